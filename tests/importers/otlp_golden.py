"""The core's span-to-call mapping against the Python importer's (differential), and the
goldens that keep it honest after the Python mapping is gone.

`check(...)` maps the same OTLP requests both ways and asserts byte-identical Traces and an
identical report; with TRAJGRADE_OTLP_GOLDEN_RECORD=<dir> set it also writes each distinct
input with the Python result as a golden file (tests/importers/data/otlp_golden/).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from trajgrade import _core
from trajgrade.importers.report import ImportReport

GOLDEN_DIR = Path(__file__).parent / "data" / "otlp_golden"


def report_dict(report: ImportReport) -> dict[str, Any]:
    return {
        "traces": report.traces,
        "calls": report.calls,
        "model_calls": report.model_calls,
        "merged_duplicates": report.merged_duplicates,
        "id_collisions": report.id_collisions,
        "unmapped": dict(report.unmapped),
        "examples": report.examples,
    }


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


def check(
    traces: list[bytes],
    *,
    logs: list[bytes],
    group_by: str | None,
    dedupe_window_s: float,
    expected: list[bytes],
    report: dict[str, Any],
) -> None:
    got, got_report = core_map(traces, logs, group_by, dedupe_window_s)
    assert got_report == report
    assert got == expected
    record = os.environ.get("TRAJGRADE_OTLP_GOLDEN_RECORD")
    if record:
        write_golden(
            Path(record),
            traces=traces,
            logs=logs,
            group_by=group_by,
            dedupe_window_s=dedupe_window_s,
            expected=expected,
            report=report,
        )


def write_golden(
    directory: Path,
    *,
    traces: list[bytes],
    logs: list[bytes],
    group_by: str | None,
    dedupe_window_s: float,
    expected: list[bytes],
    report: dict[str, Any],
) -> None:
    def b64(items: list[bytes]) -> list[str]:
        return [base64.b64encode(item).decode("ascii") for item in items]

    document = {
        "traces": b64(traces),
        "logs": b64(logs),
        "group_by": group_by,
        "dedupe_window_s": dedupe_window_s,
    }
    name = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]
    document |= {"expected": b64(expected), "report": report}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.json").write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")


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
