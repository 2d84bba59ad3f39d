"""Read the examples out of the vendored seed documents (spec/seeds/) at test time."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

SEEDS = Path(__file__).resolve().parents[2] / "spec" / "seeds"
_FENCE = re.compile(r"^```json[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def text(name: str) -> str:
    return (SEEDS / name).read_text(encoding="utf-8")


def json_blocks(name: str) -> list[str]:
    """Every ```json block of a seed, verbatim, in document order."""
    return [m.group(1) for m in _FENCE.finditer(text(name))]


def between(name: str, start: str, end: str, *, after: str | None = None) -> str:
    """The lines of a seed from the line that is `start` up to (not including) the first line
    after it that starts with `end`.

    The article and the lesson are plain text without fences; their examples are cut out by
    their first line and the line that follows them; `after` skips to the first line that is
    `after` before looking for `start`.
    """
    lines = text(name).split("\n")
    skip = 0 if after is None else next(i for i, line in enumerate(lines) if line.strip() == after)
    first = next(i for i in range(skip, len(lines)) if lines[i].strip() == start)
    last = next(i for i in range(first + 1, len(lines)) if lines[i].strip().startswith(end))
    return "\n".join(lines[first:last]).rstrip() + "\n"


def trace(calls: list[tuple[str, dict[str, Any]]], trace_id: str = "t") -> dict[str, Any]:
    return {
        "id": trace_id,
        "calls": [{"name": n, "arguments_json": json.dumps(a)} for n, a in calls],
    }
