"""Protobuf wire-format framing, so the server can route bytes without decoding traces."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from trajgrade.errors import InvalidRequestError
from trajgrade.server.status import invalid_request

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise invalid_request("request is not a valid protobuf message (bad varint)")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _field_at(buf: bytes, pos: int) -> tuple[int, int, int, int]:
    """The field starting at ``pos``: (number, wire type, start of the value, end)."""
    size = len(buf)
    key, pos = _varint(buf, pos)
    number, kind = key >> 3, key & 7
    if number == 0:
        raise invalid_request("request is not a valid protobuf message (field 0)")
    if kind == _VARINT:
        value_start = pos
        _, pos = _varint(buf, pos)
    elif kind == _I64:
        value_start, pos = pos, pos + 8
    elif kind == _I32:
        value_start, pos = pos, pos + 4
    elif kind == _LEN:
        length, value_start = _varint(buf, pos)
        pos = value_start + length
    else:
        raise invalid_request(f"request is not a valid protobuf message (wire type {kind})")
    if pos > size:
        raise invalid_request("request is not a valid protobuf message (truncated)")
    return number, kind, value_start, pos


def top_level_fields(buf: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(field number, start of the whole field, start of the value, end) for each top-level field.

    Only the outer framing is read: a nested message (a whole trace) is skipped by its length.
    A varint field's value starts where the field does (callers only slice LEN values).
    """
    pos = 0
    size = len(buf)
    while pos < size:
        start = pos
        number, kind, value_start, pos = _field_at(buf, pos)
        yield number, start, start if kind == _VARINT else value_start, pos


def field_value(buf: bytes, number: int) -> bytes | None:
    """The value bytes of the last length-delimited top-level field ``number``, or None."""
    found: bytes | None = None
    for num, _, value_start, end in top_level_fields(buf):
        if num == number:
            found = buf[value_start:end]
    return found


def _len_values(buf: bytes, number: int, name: str) -> list[bytes]:
    """Every value of top-level length-delimited field ``number``, in order. A malformed
    request, or the field with another wire type, is InvalidRequestError naming ``name``."""
    values: list[bytes] = []
    pos = 0
    size = len(buf)
    while pos < size:
        num, kind, value_start, pos = _field_at(buf, pos)
        if num != number:
            continue
        if kind != _LEN:
            raise invalid_request(
                f"request is not a valid protobuf message ({name} has wire type {kind})",
                field=name,
            )
        values.append(buf[value_start:pos])
    return values


def message_field(buf: bytes, number: int, name: str) -> bytes | None:
    """The value of top-level message field ``number`` (every occurrence joined: protobuf
    merges them), or None when absent; malformed input as in `_len_values`."""
    values = _len_values(buf, number, name)
    return b"".join(values) if values else None


def text(value: bytes, name: str) -> str:
    """A string field's bytes as text; not UTF-8 (protobuf requires it) is InvalidRequestError."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_request(
            f"{name} is not valid UTF-8 (byte {exc.start}): string fields must be UTF-8",
            field=name,
        ) from None


def string_field(buf: bytes, number: int, name: str) -> str:
    """The last occurrence of top-level string field ``number`` ('' when absent), checked."""
    values = _len_values(buf, number, name)
    return text(values[-1], name) if values else ""


def trace_id(request: bytes) -> str:
    """Best effort: the id of the trace (field 1) inside a GradeTraceRequest, else ''."""
    try:
        trace = field_value(request, 1)
        if trace is None:
            return ""
        value = field_value(trace, 1)
        return "" if value is None else value.decode("utf-8")
    except (InvalidRequestError, UnicodeDecodeError):
        pass
    return ""


def split_fields(
    buf: bytes, repeated: int, singles: tuple[int, ...]
) -> tuple[list[bytes], dict[int, tuple[int, int, int]]]:
    """The values of the length-delimited field ``repeated`` in order, and for each of
    ``singles`` that occurs, the last occurrence as (start of the field, start of the value, end).

    One pass over the outer framing; the values (whole traces) are sliced, never decoded.
    """
    values: list[bytes] = []
    _, found = _scan(buf, repeated, singles, values.append)
    return values, found


def count_fields(
    buf: bytes, repeated: int, singles: tuple[int, ...]
) -> tuple[int, dict[int, tuple[int, int, int]]]:
    """As split_fields, with only the number of ``repeated`` values (nothing is copied: the
    core splits the chunk itself)."""
    return _scan(buf, repeated, singles, None)


def _scan(
    buf: bytes,
    repeated: int,
    singles: tuple[int, ...],
    append: Callable[[bytes], None] | None,
) -> tuple[int, dict[int, tuple[int, int, int]]]:
    """The loop of split_fields / count_fields: how many ``repeated`` values (each also given
    to ``append``, unless None) and the singles found.

    The common case, a one-byte tag and a length-delimited value, is read inline: a chunk of
    thousands of traces is framed on the event loop, so this loop is kept tight.
    """
    found: dict[int, tuple[int, int, int]] = {}
    count = 0
    size = len(buf)
    pos = 0
    while pos < size:
        start = pos
        key = buf[pos]
        if key < 0x80 and key & 7 == _LEN and key >> 3:
            pos += 1
            length = buf[pos] if pos < size else 0x80
            if length < 0x80:  # a value under 128 bytes
                value_start = pos + 1
            elif pos + 1 < size and buf[pos + 1] < 0x80:  # under 16 KiB
                length = (length & 0x7F) | (buf[pos + 1] << 7)
                value_start = pos + 2
            else:
                length, value_start = _varint(buf, pos)
            pos = value_start + length
            if pos > size:
                raise invalid_request("request is not a valid protobuf message (truncated)")
            number = key >> 3
        else:  # anything else (a long tag, another wire type): the general reader, one field
            number, kind, value_start, pos = _field_at(buf, start)
            if kind != _LEN:
                if number == repeated or number in singles:
                    raise invalid_request(
                        f"request is not a valid protobuf message (field {number}, wire type "
                        f"{kind})"
                    )
                continue
        if number == repeated:
            count += 1
            if append is not None:
                append(buf[value_start:pos])
        elif number in singles:
            found[number] = (start, value_start, pos)
    return count, found
