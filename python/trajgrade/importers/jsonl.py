"""Native JSON Lines: one Trace per line in the protobuf JSON mapping."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

from google.protobuf import json_format

from trajgrade.importers.report import INVALID_RECORD, ImportReport
from trajgrade.v1 import trace_pb2


def read(path: Path, report: ImportReport) -> Iterator[trace_pb2.Trace]:
    """Yield each line's Trace; a line that does not parse is counted, not fatal."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            trace = trace_pb2.Trace()
            try:
                json_format.Parse(line, trace)
            except json_format.ParseError as exc:
                report.add(INVALID_RECORD, f"{path.name}:{number}", str(exc))
                continue
            report.traces += 1
            report.calls += len(trace.calls)
            yield trace


def dumps(trace: trace_pb2.Trace) -> str:
    """One line of protobuf JSON with the proto's snake_case field names."""
    return json_format.MessageToJson(
        trace, preserving_proto_field_name=True, indent=None, ensure_ascii=False
    )


def write(traces: Iterable[trace_pb2.Trace], out: TextIO) -> int:
    """Write one trace per line; return how many were written."""
    count = 0
    for trace in traces:
        out.write(dumps(trace))
        out.write("\n")
        count += 1
    return count
