"""Parquet trace rows graded straight from their Arrow buffers (Grader.grade_arrow_traces_to_json).

The core reads the validity bitmaps, offsets and values of each column itself (checking every
offset, length and UTF-8), so no JSON line is built or parsed; the rows are byte-for-byte those
of arrowjson.json_lines → grade_json_traces_to_json. Supported: the native schema with `id` and
`final_answer` (large_)string, `calls` a (large_)list of ToolCall structs without null structs,
times any non-negative integer type, `metadata` a map<(large_)string, (large_)string> without
null values. Any other batch returns None and goes through arrowjson (or row by row).

A sliced batch (`batch.slice(skip)` after a resume, `Table.to_batches`) still points at its
parent's whole buffers; its columns are compacted first (`_compact`), so the bytes copied and
checked are the rows' own, not the parent's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from trajgrade._core import CompiledSuite, Grader

_STRING_CALL_KEYS = ("name", "arguments_json", "result", "id")
_INT_CALL_KEYS = ("start_time_unix_nano", "end_time_unix_nano")
_CALL_KEYS = frozenset({"error", *_STRING_CALL_KEYS, *_INT_CALL_KEYS})

Buffers = tuple[int, int, bytes | None, bytes | None, bytes | None, bool]


def _is_string(t: pa.DataType) -> bool:
    import pyarrow as pa  # noqa: PLC0415

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


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
    validity = bufs[0].to_pybytes() if arr.null_count and bufs[0] is not None else None
    if _is_string(t):
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
        offsets.to_pybytes() if offsets is not None else None,
        values.to_pybytes() if values is not None else None,
        large,
    )


def _call_field(f: pa.Field, child: Any) -> Any | None:
    """A call struct's field as an array arrowcols passes (times as uint64), or None."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    if f.name == "error":
        return child if pa.types.is_boolean(f.type) else None
    if f.name not in _INT_CALL_KEYS:
        return child if _is_string(f.type) else None
    if not pa.types.is_integer(f.type):
        return None
    if pa.types.is_uint64(f.type):
        return child
    if len(child) and (pc.min(child).as_py() or 0) < 0:
        return None
    return child.cast(pa.uint64())


def _call_columns(calls: Any, out: dict[str, Buffers]) -> bool:
    import pyarrow as pa  # noqa: PLC0415

    t = calls.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    item = t.value_type
    if not pa.types.is_struct(item) or not {f.name for f in item} <= _CALL_KEYS:
        return False
    values = calls.values
    if values.null_count:
        return False  # a null call: the row-by-row path reports it
    for i, f in enumerate(item):
        child = _call_field(f, values.field(i))
        if child is None:
            return False
        out[f"calls.{f.name}"] = _buffers(child)
    out["calls"] = _buffers(calls)
    return True


def _metadata_columns(meta: Any, out: dict[str, Buffers]) -> bool:
    import pyarrow as pa  # noqa: PLC0415

    t = meta.type
    if not pa.types.is_map(t) or not (_is_string(t.key_type) and _is_string(t.item_type)):
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
    """The buffers grade_arrow_traces_to_json reads, or None for a layout it does not take."""
    cols = dict(zip(batch.schema.names, batch.columns, strict=True))
    if batch.num_rows == 0 or not set(cols) <= {"id", "calls", "final_answer", "metadata"}:
        return None
    cols = {name: _compact(col) for name, col in cols.items()}
    out: dict[str, Buffers] = {}
    for key in ("id", "final_answer"):
        if key in cols:
            if not _is_string(cols[key].type):
                return None
            out[key] = _buffers(cols[key])
    if "calls" in cols and not _call_columns(cols["calls"], out):
        return None
    if "metadata" in cols and not _metadata_columns(cols["metadata"], out):
        return None
    return out


def grade(grader: Grader, suite: CompiledSuite, batch: pa.RecordBatch) -> list[bytes] | None:
    """The batch's regrade rows, or None if its layout is not supported (use arrowjson)."""
    buffers = columns(batch)
    if buffers is None:
        return None
    return grader.grade_arrow_traces_to_json(suite, batch.num_rows, buffers)
