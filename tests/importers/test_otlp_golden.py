"""The core's OTLP mapping against goldens written once by the Python importer's mapping:
the real instrumentations' exports the importer tests drive (one file each) and seeded random
span sets (tests/importers/otlp_random.py; digests of the Traces, and the whole report)."""

from __future__ import annotations

import json
from pathlib import Path

import otlp_golden
import otlp_random
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from trajgrade import _core
from trajgrade.importers import otlp
from trajgrade.importers.report import ImportReport
from trajgrade.live.assembly import Run, span_rows
from trajgrade.live.grading import _incoming, _parts
from trajgrade.live.records import picked

FILES = sorted(otlp_golden.GOLDEN_DIR.glob("*.json"))
RANDOM = [
    json.loads(line)
    for line in (otlp_golden.GOLDEN_DIR / "random.jsonl").read_text(encoding="utf-8").splitlines()
]


def test_goldens_are_there() -> None:
    assert len(FILES) >= 20
    assert len(RANDOM) == 400


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_exported_files_map_as_the_importer_did(path: Path) -> None:
    golden = otlp_golden.read_golden(path)
    got, report = otlp_golden.core_map(
        golden["traces"], golden["logs"], golden["group_by"], golden["dedupe_window_s"]
    )
    assert report == golden["report"]
    assert got == golden["expected"]


def test_random_span_sets_map_as_the_importer_did() -> None:
    for golden in RANDOM:
        requests, logs = otlp_random.requests(golden["seed"])
        traces = [r.SerializeToString() for r in requests]
        log_bytes = [r.SerializeToString() for r in logs]
        where = f"seed {golden['seed']}, group_by {golden['group_by']!r}"
        # The generator still makes the inputs the goldens were written from.
        assert otlp_golden.digest([*traces, b"logs", *log_bytes]) == golden["input_sha256"], where
        got, report = otlp_golden.core_map(
            traces, log_bytes, golden["group_by"], golden["dedupe_window_s"]
        )
        assert report == golden["report"], where
        assert otlp_golden.digest(got) == golden["expected_sha256"], where


@pytest.mark.parametrize("group_by", [None, "session.id"])
def test_live_runs_map_in_one_call_as_each_run_alone(group_by: str | None) -> None:
    """_core.map_otlp_runs (the live receiver's completed runs in one call): each run maps to
    the Trace that map_otlp gives the requests of its own spans and events."""
    for seed in range(60):
        requests, logs = otlp_random.requests(seed)
        spans = [s for r in requests for s in _incoming(r.SerializeToString(), [])[0]]
        events = [e for r in logs for e in otlp.event_records(r, ImportReport())]
        runs: dict[str, Run] = {}
        for order, span in enumerate(spans):
            span.order = order
            runs.setdefault(span.trace_id, Run(span.trace_id, 0.0, 0.0)).spans.append(span)
        for order, event in enumerate(events, start=len(spans)):
            event.order = order
            runs.setdefault(event.trace_id, Run(event.trace_id, 0.0, 0.0)).events.append(event)
        # A run's spans out of arrival order (as after a regroup): the mapping sorts them.
        for run in runs.values():
            run.spans.reverse()
        expected = []
        for run in runs.values():
            # The reference: the run's spans as one request, a ResourceSpans per span (in
            # arrival order), its events as one logs request, through map_otlp.
            traces = ExportTraceServiceRequest()
            for span in sorted(run.spans, key=lambda s: s.order):
                resource_spans = traces.resource_spans.add()
                resource_spans.resource.ParseFromString(span.resource_raw)
                resource_spans.scope_spans.add().spans.add().ParseFromString(span.raw)
            logs_request = ExportLogsServiceRequest()
            for event in sorted(run.events, key=lambda e: e.order):
                scope_logs = logs_request.resource_logs.add().scope_logs.add()
                scope_logs.log_records.add().ParseFromString(event.raw)
            log_bytes = [logs_request.SerializeToString()] if run.events else []
            mapped, _ = _core.map_otlp([traces.SerializeToString()], log_bytes, group_by)
            expected.append(mapped[0] if mapped else None)
        parts = [_parts(run.spans, run.events) for run in runs.values()]
        got = _core.map_otlp_runs(parts, group_by)
        assert got == expected, f"seed {seed}"
    assert _core.map_otlp_runs([]) == []
    malformed = _core.map_otlp_runs([([b""], [b"\x0a\xff"], [])])
    assert len(malformed) == 1 and "traces" in str(malformed[0])


def test_live_intake_spans_and_rows_are_the_exports() -> None:
    """_core.otlp_spans (the live receiver's intake) against the export decoded here: each
    span's ids, flags, marker, bytes and keyed attributes (the core's strings, or the
    importer's conversion through `convert` when a key holds another type), one dict per
    resource, and the rows assembly takes (assembly's own span_rows over the same spans)."""
    keys = ["service.name", "session.id", "gen_ai.agent.name"]
    converted = 0
    for seed in range(60):
        requests, _ = otlp_random.requests(seed)
        for request in requests:
            spans, rows = _incoming(request.SerializeToString(), keys)
            assert rows == span_rows(spans)
            assert [s for row in rows for s in spans[row[1] : row[2]]] == spans
            decoded = [
                (resource_spans.resource, span)
                for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            ]
            assert len(spans) == len(decoded)
            for got, (resource, span) in zip(spans, decoded, strict=True):
                assert (got.trace_id, got.span_id, got.parent) == (
                    span.trace_id.hex(),
                    span.span_id.hex(),
                    span.parent_span_id.hex(),
                )
                assert (got.start, got.flags, got.size) == (
                    span.start_time_unix_nano,
                    span.flags,
                    span.ByteSize(),
                )
                assert got.raw == span.SerializeToString()
                assert got.resource_raw == resource.SerializeToString()
                assert got.attrs == picked(span.attributes, keys)
                assert got.resource == picked(resource.attributes, keys)
                assert got.is_root == (not span.parent_span_id)
                assert got.key == (got.trace_id, got.span_id) and got.keys == set(keys)
                converted += any(not isinstance(v, str) for v in got.attrs.values())
            # One dict per resource, shared by its spans.
            assert len({id(s.resource) for s in spans}) == len(request.resource_spans)
    assert converted > 0  # the conversion path ran
