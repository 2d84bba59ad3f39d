"""The real OTLP exporters (gRPC and HTTP) against a live server: the results on WatchResults,
in the JSONL sink and in the metrics equal `trajgrade regrade` of the same spans from a file."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from trajgrade.regrade.output import jsonl_line, outcome_row
from trajgrade.v1 import result_pb2

from .conftest import LiveFactory, drive, eventually, regrade_lines, strip_live


def watched_line(response: object) -> bytes:
    """A WatchResults result as a regrade row."""
    outcome = result_pb2.TraceOutcome(result=response.result)  # type: ignore[attr-defined]
    return jsonl_line(outcome_row(outcome.SerializeToString(), response.suite_id))  # type: ignore[attr-defined]


async def test_grpc_exporter_results_equal_regrade(make_live: LiveFactory, tmp_path: Path) -> None:
    live = await make_live()
    watch = await live.watch()
    spans = tmp_path / "runs.traces.json"
    # Three runs, each graded by both suites of the "dual" route.
    await asyncio.to_thread(drive, "grpc", live.grpc_endpoint, spans, 3, "dual-agent")
    items = await watch.wait(6)
    await eventually(lambda: len(live.sink_lines()) == 6, what="6 sink rows")

    expected = regrade_lines([spans], live.suite("weather"), tmp_path / "w.jsonl")
    expected += regrade_lines([spans], live.suite("strict"), tmp_path / "s.jsonl")
    assert len(expected) == 6
    assert sorted(strip_live(line) for line in live.sink_lines()) == sorted(expected)
    assert sorted(watched_line(item) for item in items) == sorted(expected)
    assert {item.service_name for item in items} == {"dual-agent"}
    assert not any(item.cut_off or item.early for item in items)
    assert {item.completion for item in items} == {"settled"}
    verdicts = {item.suite_id: item.result.verdict for item in items}
    assert sorted(verdicts.values()) == [result_pb2.VERDICT_PASS, result_pb2.VERDICT_FAIL]

    # Metrics: every span accepted is graded; per suite, verdicts and assertion counts.
    accepted = live.metric("trajgrade_live_spans_total", outcome="accepted")
    assert accepted > 0
    assert live.metric("trajgrade_live_spans_total", outcome="graded") == accepted
    assert live.metric("trajgrade_live_traces_assembled_total", completion="settled") == 3
    for suite_id, verdict in verdicts.items():
        name = result_pb2.Verdict.Name(verdict)
        assert live.metric("trajgrade_live_results_total", suite_id=suite_id, verdict=name) == 3
        assert live.metric("trajgrade_live_score_count", suite_id=suite_id) == 3
    for item in items[:2]:
        for result in item.result.results:
            status = result_pb2.AssertionStatus.Name(result.status)
            labels = {"suite_id": item.suite_id, "assertion": result.name, "status": status}
            assert live.metric("trajgrade_live_assertions_total", **labels) == 3, labels


async def test_http_exporter_sink_read_by_diff_and_report(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    live = await make_live()
    watch = await live.watch(service_names=["weather-agent"])
    spans = tmp_path / "runs.traces.json"
    await asyncio.to_thread(
        drive, "http", live.http_endpoint + "/v1/traces", spans, 2, "weather-agent"
    )
    items = await watch.wait(2)
    await eventually(lambda: len(live.sink_lines()) == 2, what="2 sink rows")
    expected = regrade_lines([spans], live.suite("weather"), tmp_path / "w.jsonl")
    assert sorted(strip_live(line) for line in live.sink_lines()) == sorted(expected)
    assert sorted(watched_line(item) for item in items) == sorted(expected)

    # `trajgrade diff` reads the sink: the same results, nothing flipped.
    diff = subprocess.run(
        [
            sys.executable,
            "-m",
            "trajgrade",
            "diff",
            str(tmp_path / "w.jsonl"),
            str(live.sink),
            "--json",
            "--exit-code",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert diff.returncode == 0, diff.stderr
    compared = json.loads(diff.stdout)
    assert (compared["common"], compared["flipped"]) == (2, 0)
    assert (compared["only_old"], compared["only_new"]) == (0, 0)
    # ... and so does `regrade --report` as its baseline.
    report = tmp_path / "report.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trajgrade",
            "regrade",
            str(spans),
            "--suite",
            str(live.suite("weather")),
            "--out",
            str(tmp_path / "again.jsonl"),
            "--report",
            str(report),
            "--baseline",
            str(live.sink),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert report.stat().st_size > 0
    html = report.read_text(encoding="utf-8")
    assert str(live.sink) in html
    assert "Against the baseline: 0 verdict flips" in html
