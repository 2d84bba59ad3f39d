"""Strict dict → protobuf message parsing, with the field path of the first unknown field."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

M = TypeVar("M", bound=Message)
# json_format names the field of some errors: "... at Suite.assertions[0].tool_sequence.mode."
_PARSE_ERROR_AT = re.compile(r" at [A-Za-z_]\w*\.(\S+?)\.*$")


class MessageParseError(ValueError):
    """A dict that does not fit the message; `field` is the path of the problem."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _find_field(descriptor: Descriptor, key: str) -> FieldDescriptor | None:
    field = descriptor.fields_by_name.get(key)
    if field is not None:
        return field
    return next((f for f in descriptor.fields if f.json_name == key), None)


def unknown_field(value: Any, descriptor: Descriptor, prefix: str = "") -> str | None:
    """Path of the first key that is not a field of `descriptor` (depth-first, in key order)."""
    if not isinstance(value, Mapping):
        return None
    for key, item in value.items():
        field = _find_field(descriptor, str(key))
        path = _join(prefix, str(key))
        if field is None:
            return path
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            found = _unknown_in_message_field(item, field, path)
            if found:
                return found
    return None


def _unknown_in_message_field(item: Any, field: FieldDescriptor, path: str) -> str | None:
    sub = field.message_type
    if sub is None:
        return None
    if sub.GetOptions().map_entry:
        value_field = sub.fields_by_name["value"]
        if value_field.message_type is None or not isinstance(item, Mapping):
            return None
        children = [(f"{path}[{k!r}]", v) for k, v in item.items()]
        sub = value_field.message_type
    elif field.is_repeated and isinstance(item, list):
        children = [(f"{path}[{i}]", v) for i, v in enumerate(item)]
    else:
        children = [(path, item)]
    for child_path, child in children:
        found = unknown_field(child, sub, child_path)
        if found:
            return found
    return None


def parse_dict(value: Any, message: M) -> M:
    """Fills `message` from its protobuf JSON mapping; unknown fields are errors."""
    if not isinstance(value, Mapping):
        raise MessageParseError("", f"expected an object, got {type(value).__name__}")
    descriptor = cast(Descriptor, message.DESCRIPTOR)
    found = unknown_field(value, descriptor)
    if found:
        key = found.rsplit(".", 1)[-1]
        raise MessageParseError(found, f"unknown field {key!r}")
    try:
        json_format.ParseDict(dict(value), message, ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        text = str(exc).splitlines()[0]
        at = _PARSE_ERROR_AT.search(text)
        raise MessageParseError(at.group(1) if at else "", text) from exc
    return message
