"""Protobuf wire-format encoding shared by the client, the server and bulk regrading.

Traces travel as already-serialized bytes; wrapping them in a request message is only framing
(a tag and a length), so no side ever re-decodes a trace to build a request.
"""

from __future__ import annotations

LENGTH_DELIMITED = 2


def encode_varint(value: int) -> bytes:
    """The base-128 varint encoding of a non-negative int."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(field_number: int, payload: bytes) -> bytes:
    """One length-delimited field (a message or string) holding payload."""
    tag = encode_varint(field_number << 3 | LENGTH_DELIMITED)
    return tag + encode_varint(len(payload)) + payload
