"""JSON values with SPEC §2 semantics: exact decimals, JS canonical text, the three matchers."""

# ruff: noqa: PLR0911 -- one return per JSON kind / number form reads like the SPEC tables.

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

MAX_DEPTH = 128

JsonValue = Any  # None | bool | Decimal | str | list[JsonValue] | dict[str, JsonValue]


class InvalidJsonError(ValueError):
    """Text that JSON.parse rejects (or nested deeper than the limit)."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Duplicate keys: the last value wins at the first key's position (as JSON.parse does).
    out: dict[str, Any] = {}
    for key, value in pairs:
        out[key] = value
    return out


def _reject_constant(name: str) -> None:
    raise InvalidJsonError(f"{name} is not JSON")


def depth(value: JsonValue) -> int:
    """Nesting depth: 0 for a scalar, 1 for `[]`, 2 for `[[]]`."""
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


def parse(text: str, max_depth: int = MAX_DEPTH) -> JsonValue:
    """Parses like `JSON.parse`, numbers as exact `Decimal`; `""` is `{}` (SPEC §1, §9.1)."""
    if text == "":
        return {}
    try:
        value = json.loads(
            text,
            parse_float=Decimal,
            parse_int=Decimal,
            parse_constant=_reject_constant,
            object_pairs_hook=_object,
        )
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InvalidJsonError(str(exc)) from exc
    if depth(value) > max_depth:
        raise InvalidJsonError(f"nesting deeper than {max_depth}")
    return value


def kind(value: JsonValue) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def deep_eq(a: JsonValue, b: JsonValue) -> bool:
    ka, kb = kind(a), kind(b)
    if ka != kb:
        return False
    if ka == "array":
        return len(a) == len(b) and all(deep_eq(x, y) for x, y in zip(a, b, strict=True))
    if ka == "object":
        return a.keys() == b.keys() and all(deep_eq(a[k], b[k]) for k in a)
    return bool(a == b)


# ---------------------------------------------------------------- differences (SPEC §9.7)


def exact_diff(actual: JsonValue, expected: JsonValue) -> int:
    ka, ke = kind(actual), kind(expected)
    if ka != ke:
        return 1
    if ka == "object":
        n = sum(1 for k in actual if k not in expected)
        for k, ev in expected.items():
            n += exact_diff(actual[k], ev) if k in actual else 1
        return n
    if ka == "array":
        n = abs(len(actual) - len(expected))
        return n + sum(exact_diff(x, y) for x, y in zip(actual, expected, strict=False))
    return 0 if actual == expected else 1


def subset_diff(actual: JsonValue, expected: JsonValue) -> int:
    if kind(actual) != "object" or kind(expected) != "object":
        return 1
    return sum(exact_diff(actual[k], ev) if k in actual else 1 for k, ev in expected.items())


def partial_diff(actual: JsonValue, expected: JsonValue) -> int:
    ka, ke = kind(actual), kind(expected)
    if ka != ke:
        return 1
    if ke == "object":
        return sum(partial_diff(actual[k], ev) if k in actual else 1 for k, ev in expected.items())
    if ke == "array":
        n = abs(len(actual) - len(expected))
        return n + sum(partial_diff(x, y) for x, y in zip(actual, expected, strict=False))
    return 0 if actual == expected else 1


# ---------------------------------------------------------------- key paths (SPEC §9.4)


def parse_path(path: str) -> list[tuple[str, bool]]:
    """`a.b[].c` → [("a", False), ("b", True), ("c", False)]; ValueError when malformed."""
    segments: list[tuple[str, bool]] = []
    for part in path.split("."):
        each = part.endswith("[]")
        key = part[:-2] if each else part
        if not key or any(c in key for c in "[]"):
            raise ValueError(f"bad key path {path!r}")
        segments.append((key, each))
    if segments[-1][1]:
        raise ValueError(f"key path {path!r} must end with a key")
    return segments


def remove_path(value: JsonValue, segments: list[tuple[str, bool]]) -> None:
    if not isinstance(value, dict):
        return
    key, each = segments[0]
    if len(segments) == 1:
        value.pop(key, None)
        return
    if key not in value:
        return
    child = value[key]
    if each:
        if isinstance(child, list):
            for item in child:
                remove_path(item, segments[1:])
    else:
        remove_path(child, segments[1:])


def copy(value: JsonValue) -> JsonValue:
    if isinstance(value, list):
        return [copy(v) for v in value]
    if isinstance(value, dict):
        return {k: copy(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------- canonical text (SPEC §2)


def _js_number(d: Decimal) -> str:
    f = float(d)
    if not math.isfinite(f):
        return "null"
    if f == 0:
        return "0"
    if f < 0:
        return "-" + _js_number(Decimal(repr(-f)))
    t = Decimal(repr(f)).normalize().as_tuple()
    digits = "".join(map(str, t.digits))
    k = len(digits)
    n = int(t.exponent) + k
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{mantissa}e{sign}{abs(e)}"


_NAMED = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _js_string(s: str) -> str:
    out = ['"']
    for c in s:
        o = ord(c)
        if c in _NAMED:
            out.append(_NAMED[c])
        elif o < 0x20 or 0xD800 <= o <= 0xDFFF:
            out.append(f"\\u{o:04x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _array_index(key: str) -> int | None:
    if key == "0":
        return 0
    if key[:1] in "123456789" and key.isascii() and key.isdigit() and key != "":
        v = int(key)
        return v if v <= 4294967294 else None
    return None


def canonical(value: JsonValue) -> str:
    """Exactly `JSON.stringify(JSON.parse(text))`."""
    k = kind(value)
    if k == "null":
        return "null"
    if k == "bool":
        return "true" if value else "false"
    if k == "number":
        return _js_number(value)
    if k == "string":
        return _js_string(value)
    if k == "array":
        return "[" + ",".join(canonical(v) for v in value) + "]"
    indexed = sorted((i, key) for key in value if (i := _array_index(key)) is not None)
    keys = [key for _, key in indexed] + [key for key in value if _array_index(key) is None]
    return "{" + ",".join(_js_string(key) + ":" + canonical(value[key]) for key in keys) + "}"
