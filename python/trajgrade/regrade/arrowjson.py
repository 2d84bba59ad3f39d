"""Parquet trace rows → native protobuf-JSON Trace lines, built column-wise by Arrow compute.

No per-row Python: every string is JSON-escaped and every member concatenated by Arrow's C++
kernels; the lines then go to the core like native JSONL (Grader.grade_jsonl_block). Batches
whose columns are not the native trace schema (importers' schema, or what pyarrow infers from
Trace dicts with a map metadata) return None and are decoded row by row as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trajgrade.regrade.native_fields import STRUCT_LISTS, is_string, struct_fields

if TYPE_CHECKING:
    import pyarrow as pa

_COLUMNS = frozenset({"id", "final_answer", "finalAnswer", "metadata", *STRUCT_LISTS})


def _has_control(arr: Any) -> bool:
    """Whether any value holds a character below U+0020 (one pass over the data buffer)."""
    import numpy as np  # noqa: PLC0415

    if len(arr) == 0 or arr.buffers()[2] is None:
        return False
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    return bool((data < 0x20).any())


def _backslash_quotes(arr: Any) -> Any:
    """A `\\` before every `"` and `\\` of a string array: numpy on the data buffer (Arrow's
    replace_substring is far slower with this many matches)."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415

    n = len(arr)
    if n == 0 or arr.buffers()[2] is None:
        return arr
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    escaped = (data == 0x22) | (data == 0x5C)
    positions = np.flatnonzero(escaped)
    if len(positions) == 0:
        return arr
    relative = offsets - offsets[0]
    new_offsets = (relative + np.searchsorted(positions, relative)).astype(np.int32)
    # Backslashes at their new places, the original bytes everywhere else (byte-sized masks:
    # np.insert / np.repeat are several times slower here).
    backslashes = positions + np.arange(len(positions))
    new_data = np.empty(len(data) + len(positions), np.uint8)
    is_backslash = np.zeros(len(new_data), np.bool_)
    is_backslash[backslashes] = True
    new_data[backslashes] = 0x5C
    new_data[~is_backslash] = data
    validity = arr.is_valid().buffers()[1] if arr.null_count else None
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(new_offsets), pa.py_buffer(new_data), validity
    )


def _escape(arr: Any) -> Any:
    """String array → its JSON string contents (quotes, backslashes and controls escaped)."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    arr = arr.cast(pa.string()) if not pa.types.is_string(arr.type) else arr
    arr = _backslash_quotes(arr)
    if _has_control(arr):
        for code in range(32):
            char = chr(code)
            if pc.any(pc.match_substring(arr, char)).as_py():
                arr = pc.replace_substring(arr, char, f"\\u{code:04x}")
    return arr


def _join(*parts: Any) -> Any:
    """Element-wise concatenation; null if any part is null. (Constants as Arrow scalars: a
    Python str argument makes the kernel some 40x slower.)"""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    args = [pa.scalar(p, pa.string()) if isinstance(p, str) else p for p in parts]
    return pc.binary_join_element_wise(*args, pa.scalar("", pa.string()))


def _optional_string(key: str, arr: Any) -> Any:
    """`,"key":"value"` where the value is set, "" where it is null (absent)."""
    return _join(f',"{key}":"', _escape(arr), '"').fill_null("")


def _per_row(lengths: Any, values: Any, n: int) -> Any:
    """Values of the flattened children joined with "," per row ("" for an empty or null list)."""
    import numpy as np  # noqa: PLC0415
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths.fill_null(0).to_numpy(zero_copy_only=False), out=offsets[1:])
    return pc.binary_join(
        pa.ListArray.from_arrays(pa.array(offsets), values), pa.scalar(",", pa.string())
    )


def _member(key: str, kind: str, values: Any) -> Any | None:
    """`,"key":value` per struct, "" where the field is null (absent: the protobuf default,
    or for `arguments_json` / `result` / `cost` "not recorded"), false or 0 (the default).
    An integer out of its field's range is written as it is: the core rejects that line with
    the row's error, as the row path does."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    t = values.type
    empty = pa.scalar("", pa.string())
    if kind == "string":
        return _join(f',"{key}":"', _escape(values), '"').fill_null("") if is_string(t) else None
    if kind == "bool":
        if not pa.types.is_boolean(t):
            return None
        return pc.if_else(values.fill_null(False), pa.scalar(f',"{key}":true', pa.string()), empty)
    if not (pa.types.is_integer(t) or (kind == "f64" and pa.types.is_floating(t))):
        return None
    if pa.types.is_floating(t) and pc.all(pc.is_finite(values)).as_py() is False:
        return None  # NaN and infinities have no JSON number; the row path takes them
    text = _join(f',"{key}":', values.cast(pa.string())).fill_null("")
    if kind != "f64":  # 0 is the default: left out, as the protobuf encoder does
        zero = pc.equal(values, pa.scalar(0, t)).fill_null(True)
        text = pc.if_else(zero, empty, text)
    return text


def _struct_list(name: str, column: Any, n: int) -> Any | None:
    """`,"name":[{...},...]` per row (`[]` for a null list), or None for a layout not taken."""
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    fields = struct_fields(name, column.type)
    if fields is None:
        return None
    flat = pc.list_flatten(column)
    if flat.null_count:
        return None  # a null struct: the row-by-row path reports it
    members: list[Any] = []
    for key, kind in fields.items():
        member = _member(key, kind, flat.field(key))
        if member is None:
            return None
        members.append(member)
    if len(flat) == 0:
        objects = pa.array([], pa.string())
    elif not members:
        objects = pa.array(["{}"] * len(flat), pa.string())
    else:
        # Every member starts with a comma; the first one's is cut off.
        inner = pc.utf8_slice_codeunits(_join(*members), 1)
        objects = _join("{", inner, "}")
    joined = _per_row(pc.list_value_length(column), objects, n)
    return _join(f',"{name}":[', joined, "]").fill_null(f',"{name}":[]')


def _struct_metadata(meta: Any, n: int) -> Any | None:
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    children = [meta.field(i) for i in range(meta.type.num_fields)]
    if meta.null_count or any(c.null_count or not is_string(c.type) for c in children):
        return None
    if not children:
        return pa.array([',"metadata":{}'] * n, pa.string())
    members = [
        _join(_escape(pa.array([f.name] * n, pa.string())), '":"', _escape(c))
        for f, c in zip(meta.type, children, strict=True)
    ]
    return _join(
        ',"metadata":{"', pc.binary_join_element_wise(*members, pa.scalar('","', pa.string())), '"}'
    )


def _metadata(meta: Any, n: int) -> Any | None:
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    if pa.types.is_struct(meta.type):  # what pyarrow infers from dicts: one field per key
        return _struct_metadata(meta, n)
    if not pa.types.is_map(meta.type) or not (
        is_string(meta.type.key_type) and is_string(meta.type.item_type)
    ):
        return None
    entry = pa.struct([("key", meta.type.key_type), ("value", meta.type.item_type)])
    meta = meta.cast(pa.list_(entry))
    flat = pc.list_flatten(meta)
    keys, values = flat.field(0), flat.field(1)
    if values.null_count:
        return None
    entries = _join('"', _escape(keys), '":"', _escape(values), '"')
    joined = _per_row(pc.list_value_length(meta), entries, n)
    return _join(',"metadata":{', joined, "}").fill_null("")


def json_lines(batch: pa.RecordBatch) -> list[bytes] | None:
    """One protobuf-JSON Trace line per row, or None if the batch is not plainly native."""
    import pyarrow as pa  # noqa: PLC0415

    n = batch.num_rows
    columns = dict(zip(batch.schema.names, batch.columns, strict=True))
    strings = [columns[k] for k in ("id", "final_answer", "finalAnswer") if k in columns]
    if not set(columns) <= _COLUMNS or n == 0 or not all(is_string(c.type) for c in strings):
        return None
    parts: list[Any] = ["{"]
    # "id" and "calls" are always written ("" and [] are their defaults), so every later
    # member can start with a comma.
    ident = columns.get("id")
    parts += ['"id":"', _escape(ident).fill_null("") if ident is not None else "", '"']
    for name in STRUCT_LISTS:
        if name in columns:
            member = _struct_list(name, columns[name], n)
            if member is None:
                return None
            parts.append(member)
    for key in ("final_answer", "finalAnswer"):
        if key in columns:
            parts.append(_optional_string(key, columns[key]))
    if "metadata" in columns:
        meta = _metadata(columns["metadata"], n)
        if meta is None:
            return None
        parts.append(meta)
    parts.append("}")
    lines = _join(*parts)
    result: list[bytes] = lines.cast(pa.binary()).to_pylist()
    return result
