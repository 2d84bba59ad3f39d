"""JSON records in a file: JSON Lines or one JSON document, and conversation wrappers."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

from trajgrade.importers import exact_json
from trajgrade.importers.report import INVALID_RECORD, ImportReport

# Keys under which conversation dumps keep their message list (tau-bench uses `traj`).
MESSAGE_LIST_KEYS = ("messages", "traj", "trajectory", "conversation")


def iter_json_records(path: Path, report: ImportReport) -> Iterator[tuple[str, Any]]:
    """Yield `(where, value)` for each JSON record in `path`, numbers kept exact.

    A file whose first non-blank line is a complete JSON value is JSON Lines (the OTel
    collector's file exporter writes `.json` files that way); anything else is one document.
    """
    name = path.name
    with path.open("rb") as handle:
        first = b""
        for raw in handle:
            if raw.strip():
                first = raw
                break
        if not first:
            return
        try:
            exact_json.loads(first)
            lines_mode = True
        except ValueError:
            lines_mode = False
        handle.seek(0)
        if not lines_mode:
            try:
                yield name, exact_json.loads(handle.read())
            except ValueError as exc:
                report.add(INVALID_RECORD, name, str(exc))
            return
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            where = f"{name}:{number}"
            try:
                yield where, exact_json.loads(raw)
            except ValueError as exc:
                report.add(INVALID_RECORD, where, str(exc))


T = TypeVar("T")

# Finds the conversations in one record: yields `(where, id or None, metadata, items)`.
FindConversations = Callable[
    [Any, str, ImportReport], Iterator[tuple[str, str | None, dict[str, str], list[Any]]]
]


def read_conversations(
    path: Path,
    report: ImportReport,
    find: FindConversations,
    build: Callable[..., T],
) -> Iterator[T]:
    """One `build(items, trace_id=, metadata=, where=)` per conversation `find` sees in `path`.

    A conversation without an id of its own is named `<file stem>#<n>`, n counting from 0.
    """
    index = 0
    for where, value in iter_json_records(path, report):
        for conv_where, trace_id, metadata, items in find(value, where, report):
            yield build(
                items,
                trace_id=trace_id or f"{path.stem}#{index}",
                metadata=metadata,
                where=conv_where,
            )
            index += 1


def scalar_text(value: Any) -> str | None:
    """The text of a JSON scalar for a metadata map, or None for objects and arrays."""
    if isinstance(value, str):
        return value
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal | float):
        return str(value)
    return None


def wrapper_metadata(record: dict[str, Any], skip: tuple[str, ...]) -> dict[str, str]:
    """Top-level scalar fields of a wrapper object (e.g. task_id, trial, reward) as metadata."""
    out: dict[str, str] = {}
    for key, value in record.items():
        if key in skip or key == "id":
            continue
        text = scalar_text(value)
        if text is not None:
            out[str(key)] = text
    return out


def dumps_untrusted(value: Any) -> str:
    """Serialise a value that is already parsed (result objects, log bodies) as JSON text."""
    try:
        return exact_json.dumps(value)
    except (TypeError, ValueError):
        return json.dumps(value, default=str, ensure_ascii=False)
