"""The intake's order and slices (live/intake.py): a large export is taken in slices with the
loop free between them, exports are taken in arrival order (one arriving meanwhile waits),
slices never end inside a trace's rows, and the drain answers what it leaves untaken."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTracePartialSuccess
from opentelemetry.proto.common.v1 import common_pb2
from trajgrade.live import intake
from trajgrade.live.intake import Intake, ShuttingDownError, run_through, slices

from .conftest import (
    LiveFactory,
    by_trace,
    eventually,
    export_request,
    regrade_lines,
    span_items,
    strip_live,
    write_pb,
)


def row(trace: str, first: int, end: int) -> Any:
    return (trace, first, end, 0, False, False, set(), "")


def test_slices_end_between_traces_only() -> None:
    rows = [row("a", 0, 3), row("b", 3, 6), row("a", 6, 7), row("c", 7, 10), row("d", 10, 12)]
    cuts = [[r[0] for r in piece] for piece in slices(rows, 3)]
    # "a" comes back after "b": the first slice runs to its last row.
    assert cuts == [["a", "b", "a"], ["c"], ["d"]]
    assert [[r[0] for r in piece] for piece in slices(rows, 100)] == [["a", "b", "a", "c", "d"]]
    assert list(slices([], 3)) == [[]]  # an empty request is one (empty) slice


def steps(name: str, parts: int, log: list[str]) -> Iterator[None]:
    for part in range(parts):
        if part:
            yield
        log.append(f"{name}{part}")
    return name  # type: ignore[misc]


async def test_exports_are_taken_in_order_with_the_loop_free_between_slices() -> None:
    log: list[str] = []
    answers: list[Any] = []
    box = Intake()
    box.submit(steps("big", 3, log), answers.append)  # type: ignore[arg-type]
    assert log == ["big0"]  # the first slice at once
    asyncio.get_running_loop().call_soon(log.append, "loop")
    box.submit(steps("small", 1, log), answers.append)  # type: ignore[arg-type]
    assert len(box) == 2  # behind the big one
    await eventually(lambda: len(answers) == 2)
    assert log == ["big0", "loop", "big1", "big2", "small0"]
    assert answers == ["big", "small"]
    # Nothing waiting: a one-step export is taken and answered at once.
    box.submit(steps("alone", 1, log), answers.append)  # type: ignore[arg-type]
    assert answers[-1] == "alone" and len(box) == 0
    assert run_through(steps("through", 3, log)) == "through"  # type: ignore[arg-type]


async def test_a_failing_export_is_answered_with_its_error_and_the_next_goes_on() -> None:
    def malformed() -> Iterator[None]:
        yield
        raise ValueError("not an export")

    answers: list[Any] = []
    box = Intake()
    box.submit(malformed(), answers.append)  # type: ignore[arg-type]
    box.submit(steps("next", 1, []), answers.append)  # type: ignore[arg-type]
    await eventually(lambda: len(answers) == 2)
    assert isinstance(answers[0], ValueError) and answers[1] == "next"
    with pytest.raises(ValueError, match="not an export"):
        await Intake().run(malformed())  # type: ignore[arg-type]


async def test_the_drain_takes_what_it_can_and_refuses_the_rest() -> None:
    def endless() -> Iterator[None]:
        while True:
            yield

    answers: list[Any] = []
    box = Intake()
    box.submit(endless(), answers.append)  # type: ignore[arg-type]
    box.submit(steps("behind", 1, []), answers.append)  # type: ignore[arg-type]
    assert await box.close(0.05) == 2
    assert [type(a) for a in answers] == [ShuttingDownError, ShuttingDownError]
    box.submit(steps("late", 1, []), answers.append)  # type: ignore[arg-type]
    assert isinstance(answers[-1], ShuttingDownError)
    # Within the time: taken, and answered.
    done: list[Any] = []
    box = Intake()
    box.submit(steps("short", 3, []), done.append)  # type: ignore[arg-type]
    assert await box.close(5.0) == 0 and done == ["short"]


def with_end_marker(request: Any) -> Any:
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.add(key="trajgrade.run.end", value=common_pb2.AnyValue(bool_value=True))
    return request


async def test_an_export_taken_while_another_is_sliced_waits_behind_it(
    make_live: LiveFactory, spans_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's root with the end marker arrives while the export holding its other spans is
    being sliced: it waits, so the run is graded whole (not cut, no late spans), as the
    regrade of all its spans; every slice's spans are counted."""
    monkeypatch.setattr(intake, "SLICE_SPANS", 2)
    live = await make_live()
    grader = live.server.live
    runs = list(by_trace(span_items(spans_file)).values())
    first = runs[0]
    roots = [i for i, item in enumerate(first) if not item.span.parent_span_id]
    (root,) = roots
    rest = [item for i, item in enumerate(first) if i != root]
    others = [item for run in runs[1:] for item in run]
    big = export_request([*rest, *others]).SerializeToString()
    marker = with_end_marker(export_request([first[root]])).SerializeToString()
    answers: list[Any] = []
    grader.take_traces(big, answers.append)
    assert len(grader.intake) == 1  # part-taken: its next slices wait for the loop
    grader.take_traces(marker, answers.append)
    assert len(grader.intake) == 2
    assert live.metric("trajgrade_live_exports_waiting") == 2
    await eventually(lambda: len(answers) == 2)
    assert answers == [ExportTracePartialSuccess(), ExportTracePartialSuccess()]
    assert live.metric("trajgrade_live_exports_waiting") == 0
    total = len(first) + len(others)
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == total
    assert live.metric("trajgrade_live_spans_total", outcome="late") == 0
    await eventually(lambda: len(live.sink_lines()) == len(runs), timeout=30)
    request = export_request([*rest, *others])
    request.MergeFrom(with_end_marker(export_request([first[root]])))
    expected = regrade_lines(
        [write_pb(tmp_path / "all.pb", request)], live.suite("weather"), tmp_path / "e.jsonl"
    )
    assert sorted(strip_live(line) for line in live.sink_lines()) == sorted(expected)


async def test_sliced_exports_through_the_transport_are_answered(
    make_live: LiveFactory, spans_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the core's OTLP/gRPC transport: exports sent at once, each sliced, all answered
    (a partial success counts the refused spans of every slice)."""
    monkeypatch.setattr(intake, "SLICE_SPANS", 1)
    live = await make_live(live_max_spans_per_trace=2)
    runs = list(by_trace(span_items(spans_file)).values())
    answers = await asyncio.gather(*(live.export(export_request(run)) for run in runs))
    refused = sum(max(len(run) - 2, 0) for run in runs)
    assert sum(a.partial_success.rejected_spans for a in answers) == refused
    assert all(
        "spans_per_trace" in a.partial_success.error_message
        for a, run in zip(answers, runs, strict=True)
        if len(run) > 2
    )
    spans = sum(len(run) for run in runs)
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == spans - refused


async def test_an_export_over_the_otlp_size_limit_is_refused_on_both_transports(
    make_live: LiveFactory, spans_file: Path
) -> None:
    """--otlp-max-message-bytes bounds one export (what it holds the intake): over it, gRPC
    says RESOURCE_EXHAUSTED and HTTP 413, and nothing of it is taken; under it, all is."""
    live = await make_live(otlp_max_message_bytes=16384)
    run = next(iter(by_trace(span_items(spans_file)).values()))
    large = export_request(run)
    large.resource_spans[0].scope_spans[0].spans[0].attributes.add(
        key="padding", value=common_pb2.AnyValue(string_value="x" * 32768)
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await live.export(large)
    # Not OUT_OF_RANGE (tonic's own), which OTLP exporters retry: the same export again.
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--otlp-max-message-bytes" in (refused.value.details() or "")
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            live.http_endpoint + "/v1/traces",
            data=large.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
        ) as response,
    ):
        assert response.status == 413
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == 0
    # Counted, though no span reached the intake (gRPC: taken from the transport each second).
    for transport in ("grpc", "http"):
        labels = {"signal": "traces", "transport": transport, "result": "too_large"}
        await eventually(
            lambda labels=labels: live.metric("trajgrade_live_export_requests_total", **labels) == 1
        )
    await live.export(export_request(run))
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == len(run)
