"""JSON text with exact numbers: parse without float rounding, serialise compactly."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any


def loads(text: str | bytes) -> Any:
    """Parse JSON keeping every number exact (integers as int, the rest as Decimal).

    Key order is kept (dict insertion order); a duplicate key keeps its first position and
    its last value, as JavaScript's JSON.parse does.
    """
    return json.loads(text, parse_float=Decimal)


def dumps(value: Any) -> str:
    """Serialise compactly (`,` and `:`, no spaces, non-ASCII literal) with exact numbers.

    Decimal prints its own digits, so a number parsed by `loads` comes back with the same
    value; Python floats print their shortest round-trip form.
    """
    parts: list[str] = []
    _encode(value, parts)
    return "".join(parts)


# One branch per JSON type; splitting it would only scatter the type switch.
def _encode(value: Any, out: list[str]) -> None:  # noqa: PLR0912
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{value} is not a JSON number")
        out.append(str(value))
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} is not a JSON number")
        out.append(repr(value))
    elif isinstance(value, dict):
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if index:
                out.append(",")
            out.append(json.dumps(str(key), ensure_ascii=False))
            out.append(":")
            _encode(item, out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out)
        out.append("]")
    else:
        raise TypeError(f"cannot serialise {type(value).__name__} as JSON")
