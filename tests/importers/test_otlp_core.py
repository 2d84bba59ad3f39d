"""The core's OTLP mapping equals the Python importer's on random span sets (seeded)."""

from __future__ import annotations

import otlp_golden
import otlp_random
import pytest
from trajgrade.importers import ImportReport, otlp

SEEDS = range(400)


@pytest.mark.parametrize("group_by", [None, "session.id"])
def test_random_span_sets_map_the_same(group_by: str | None) -> None:
    for seed in SEEDS:
        requests, logs = otlp_random.requests(seed)
        report = ImportReport()
        spans: list[otlp.SpanRecord] = []
        for request in requests:
            spans.extend(otlp.span_records(request, first_order=len(spans)))
        events: list[otlp.EventRecord] = []
        for log_request in logs:
            events.extend(otlp.event_records(log_request, report, first_order=len(events)))
        window = 300.0 if seed % 3 else 1.5
        traces = list(
            otlp.map_spans(spans, events, report, group_by=group_by, dedupe_window_s=window)
        )
        try:
            otlp_golden.check(
                traces=[r.SerializeToString() for r in requests],
                logs=[r.SerializeToString() for r in logs],
                group_by=group_by,
                dedupe_window_s=window,
                expected=[t.SerializeToString() for t in traces],
                report=otlp_golden.report_dict(report),
            )
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, group_by {group_by!r}") from exc
