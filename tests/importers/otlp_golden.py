"""Goldens of the OTLP span-to-call mapping, written once by the Python importer's mapping
before the core's replaced it (tests/importers/data/otlp_golden/), and the core call they check.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from trajgrade import _core

GOLDEN_DIR = Path(__file__).parent / "data" / "otlp_golden"


def core_report(
    raw: tuple[int, int, int, int, int, list[tuple[str, int, list[str]]]],
) -> dict[str, Any]:
    traces, calls, model_calls, merged, collisions, unmapped = raw
    return {
        "traces": traces,
        "calls": calls,
        "model_calls": model_calls,
        "merged_duplicates": merged,
        "id_collisions": collisions,
        "unmapped": {reason: count for reason, count, _ in unmapped},
        "examples": {reason: examples for reason, _, examples in unmapped},
    }


def core_map(
    traces: list[bytes], logs: list[bytes], group_by: str | None, dedupe_window_s: float
) -> tuple[list[bytes], dict[str, Any]]:
    out, raw = _core.map_otlp(traces, logs, group_by, dedupe_window_s)
    return list(out), core_report(raw)


def read_golden(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    for key in ("traces", "logs", "expected"):
        document[key] = [base64.b64decode(item) for item in document[key]]
    return document


def digest(items: list[bytes]) -> str:
    """sha256 over length-prefixed items (the random goldens keep digests, not bytes)."""
    h = hashlib.sha256()
    for item in items:
        h.update(len(item).to_bytes(8, "big"))
        h.update(item)
    return h.hexdigest()
