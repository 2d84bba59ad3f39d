"""The list-of-structs columns of the native Parquet trace schema, as the fast paths read them.

arrowcols hands these columns' buffers to the core; arrowjson writes them as JSON members. Both
take a field only in the form the row path would read identically (importers/parquet.py is the
schema they are written in); anything else makes them return None, and the row path converts
or reports it.
"""

from __future__ import annotations

from typing import Any

# Each field and the form the core reads it in: "string", "bool", "u64" and "u32" (any integer
# type, every value within the range: a safe cast), "f64" (any float type, or an integer type
# whose values convert exactly).
STRUCT_LISTS: dict[str, dict[str, str]] = {
    "calls": {
        "name": "string",
        "arguments_json": "string",
        "result": "string",
        "error": "bool",
        "id": "string",
        "start_time_unix_nano": "u64",
        "end_time_unix_nano": "u64",
        "turn": "u32",
        "agent": "string",
        "server": "string",
    },
    "model_calls": {
        "model": "string",
        "input_tokens": "u64",
        "output_tokens": "u64",
        "cost": "f64",
        "turn": "u32",
        "agent": "string",
        "start_time_unix_nano": "u64",
        "end_time_unix_nano": "u64",
    },
    "turns": {"user_input": "string", "final_answer": "string"},
}


def is_string(t: Any) -> bool:
    import pyarrow as pa  # noqa: PLC0415

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def struct_fields(name: str, t: Any) -> dict[str, str] | None:
    """The kinds of a `name` column's struct fields, or None when its type is not a
    (large_)list of structs whose fields all belong to `name`."""
    import pyarrow as pa  # noqa: PLC0415

    fields = STRUCT_LISTS[name]
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return None
    item = t.value_type
    if not pa.types.is_struct(item) or not {f.name for f in item} <= set(fields):
        return None
    return {f.name: fields[f.name] for f in item}


def field_array(kind: str, child: Any) -> Any | None:
    """A struct field's values in the form `kind` names (uint64, uint32, float64 as such), or
    None when its type does not fit or a value is out of range."""
    import pyarrow as pa  # noqa: PLC0415

    t = child.type
    if kind == "string":
        return child if is_string(t) else None
    if kind == "bool":
        return child if pa.types.is_boolean(t) else None
    target = {"u64": pa.uint64(), "u32": pa.uint32(), "f64": pa.float64()}[kind]
    if not (pa.types.is_integer(t) or (kind == "f64" and pa.types.is_floating(t))):
        return None
    if t == target:
        return child
    try:  # a safe cast: a negative, out-of-range or inexact value raises
        return child.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
