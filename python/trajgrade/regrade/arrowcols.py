"""Parquet trace rows graded straight from their Arrow buffers (Grader.grade_arrow_block).

The core reads the validity bitmaps, offsets and values of each column itself (checking every
offset, length and UTF-8), so no JSON line is built or parsed; the rows are byte-for-byte those
of the row path (and of arrowjson.json_lines → grade_jsonl_block where it takes the batch).
Supported: the native schema with `id` and `final_answer` (large_)string; `calls`,
`model_calls` and `turns` (large_)lists of their structs without null structs (integers of any
type within the field's range, `cost` any float or exactly convertible integer); `metadata` a
map<(large_)string, (large_)string> without null values. Any other batch gives None (columns)
and goes through arrowjson (or row by row).

A sliced batch (`batch.slice(skip)` after a resume, `Table.to_batches`) still points at its
parent's whole buffers; its columns are compacted first (`_compact`), so the bytes copied and
checked are the rows' own, not the parent's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trajgrade.regrade.native_fields import STRUCT_LISTS, field_array, is_string, struct_fields

if TYPE_CHECKING:
    import pyarrow as pa

_COLUMNS = frozenset({"id", "final_answer", "metadata", *STRUCT_LISTS})

Buffers = tuple[int, int, memoryview | None, memoryview | None, memoryview | None, bool]


def _view(buffer: pa.Buffer | None) -> memoryview | None:
    """An Arrow buffer as the core takes it, unsigned bytes in place (no copy; Arrow exports
    signed bytes, format "b")."""
    return None if buffer is None else memoryview(buffer).cast("B")


def _compact(arr: Any) -> Any:
    """arr itself, or, when its buffers are over twice the bytes its rows reference (a slice of
    a larger array), a copy of just those rows. pa.concat_arrays of one array copies the
    referenced range of every buffer, children included, and rebases the offsets
    (Table.combine_chunks of one chunk returns the slice unchanged)."""
    import pyarrow as pa  # noqa: PLC0415

    if arr.get_total_buffer_size() <= 2 * arr.nbytes:
        return arr
    return pa.concat_arrays([arr])


def _buffers(arr: Any) -> Buffers:
    """(length, offset, validity, offsets, values, large offsets) of a string, list, map,
    boolean or uint64 array (a list's or map's values are passed separately)."""
    import pyarrow as pa  # noqa: PLC0415

    t = arr.type
    bufs = arr.buffers()
    validity = _view(bufs[0]) if arr.null_count else None
    if is_string(t):
        offsets, values = bufs[1], bufs[2]
        large = pa.types.is_large_string(t)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        offsets, values = bufs[1], None
        large = pa.types.is_large_list(t)
    else:
        offsets, values, large = None, bufs[1], False
    return (
        len(arr),
        arr.offset,
        validity,
        _view(offsets),
        _view(values),
        large,
    )


def _struct_list_columns(name: str, arr: Any, out: dict[str, Buffers]) -> bool:
    fields = struct_fields(name, arr.type)
    if fields is None:
        return False
    values = arr.values
    if values.null_count:
        return False  # a null struct: the row-by-row path reports it
    for i, f in enumerate(arr.type.value_type):
        child = field_array(fields[f.name], values.field(i))
        if child is None:
            return False
        out[f"{name}.{f.name}"] = _buffers(child)
    out[name] = _buffers(arr)
    return True


def _metadata_columns(meta: Any, out: dict[str, Buffers]) -> bool:
    import pyarrow as pa  # noqa: PLC0415

    t = meta.type
    if not pa.types.is_map(t) or not (is_string(t.key_type) and is_string(t.item_type)):
        return False
    entries = meta.values
    keys, values = entries.field(0), entries.field(1)
    if entries.null_count or keys.null_count or values.null_count:
        return False
    out["metadata"] = _buffers(meta)
    out["metadata.key"] = _buffers(keys)
    out["metadata.value"] = _buffers(values)
    return True


def columns(batch: pa.RecordBatch) -> dict[str, Buffers] | None:
    """The buffers grade_arrow_block reads, or None for a layout it does not take."""
    cols = dict(zip(batch.schema.names, batch.columns, strict=True))
    if batch.num_rows == 0 or not set(cols) <= _COLUMNS:
        return None
    cols = {name: _compact(col) for name, col in cols.items()}
    out: dict[str, Buffers] = {}
    for key in ("id", "final_answer"):
        if key in cols:
            if not is_string(cols[key].type):
                return None
            out[key] = _buffers(cols[key])
    for name in STRUCT_LISTS:
        if name in cols and not _struct_list_columns(name, cols[name], out):
            return None
    if "metadata" in cols and not _metadata_columns(cols["metadata"], out):
        return None
    return out
