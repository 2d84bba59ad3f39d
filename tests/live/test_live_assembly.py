"""Assembly over the wire: spans re-sent by hand (real OTLP requests over real gRPC) out of
order, split, duplicated, interleaved, never ended, late, over a cap; each result still equals
`trajgrade regrade` of the same spans from a file."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

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


def runs(spans_file: Path) -> list[list]:  # type: ignore[type-arg]
    return list(by_trace(span_items(spans_file)).values())


async def test_out_of_order_split_and_duplicated(
    make_live: LiveFactory, spans_file: Path, tmp_path: Path
) -> None:
    live = await make_live()
    watch = await live.watch()
    run = runs(spans_file)[0]
    # One span per request, last span first (the root arrives first), then a retry of three.
    for item in reversed(run):
        response = await live.export(export_request([item]))
        assert not response.HasField("partial_success")
    await live.export(export_request(run[:3]))
    (item,) = await watch.wait(1)
    assert (item.completion, item.cut_off) == ("settled", False)
    await eventually(lambda: len(live.sink_lines()) == 1)
    expected = regrade_lines(
        [write_pb(tmp_path / "run.pb", export_request(run))],
        live.suite("weather"),
        tmp_path / "e.jsonl",
    )
    assert [strip_live(line) for line in live.sink_lines()] == expected
    assert live.metric("trajgrade_live_spans_total", outcome="duplicate") == 3
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == len(run)


async def test_interleaved_runs(make_live: LiveFactory, spans_file: Path, tmp_path: Path) -> None:
    live = await make_live()
    watch = await live.watch()
    first, second = runs(spans_file)
    mixed = [item for pair in zip(first, second, strict=False) for item in pair]
    mixed += first[len(second) :] + second[len(first) :]
    for start in range(0, len(mixed), 2):
        await live.export(export_request(mixed[start : start + 2]))
    await watch.wait(2)
    await eventually(lambda: len(live.sink_lines()) == 2)
    expected = regrade_lines([spans_file], live.suite("weather"), tmp_path / "e.jsonl")
    assert sorted(strip_live(line) for line in live.sink_lines()) == sorted(expected)


async def test_idle_timeout_grades_cut_off(
    make_live: LiveFactory, spans_file: Path, tmp_path: Path
) -> None:
    live = await make_live(live_idle_timeout_s=0.5)
    watch = await live.watch()
    run = runs(spans_file)[0]
    partial = [item for item in run if item.span.parent_span_id]  # the root never comes
    await live.export(export_request(partial))
    (item,) = await watch.wait(1)
    assert (item.completion, item.cut_off) == ("idle_timeout", True)
    await eventually(lambda: len(live.sink_lines()) == 1)
    (line,) = live.sink_lines()
    assert line.endswith(
        b'"live":{"service":"weather-agent","completion":"idle_timeout","cut_off":true}}\n'
    )
    expected = regrade_lines(
        [write_pb(tmp_path / "cut.pb", export_request(partial))],
        live.suite("weather"),
        tmp_path / "e.jsonl",
    )
    assert [strip_live(line)] == expected
    assert live.metric("trajgrade_live_traces_assembled_total", completion="idle_timeout") == 1


async def test_late_spans_are_counted_not_merged(make_live: LiveFactory, spans_file: Path) -> None:
    live = await make_live()
    watch = await live.watch()
    first, second = runs(spans_file)
    await live.export(export_request(first))
    await watch.wait(1)
    response = await live.export(export_request(first[:2]))
    assert response.partial_success.rejected_spans == 2
    assert "late" in response.partial_success.error_message
    # The next run is graded as usual; the late spans made no second result.
    await live.export(export_request(second))
    await watch.wait(2)
    await eventually(lambda: len(live.sink_lines()) == 2)
    assert [item.trace_id for item in watch.items] == [first[0].trace_id, second[0].trace_id]
    assert live.metric("trajgrade_live_spans_total", outcome="late") == 2
    assert live.metric("trajgrade_live_late_traces_total") == 1


async def test_open_traces_cap_grades_the_oldest_as_cut_off(
    make_live: LiveFactory, spans_file: Path
) -> None:
    live = await make_live(live_max_open_traces=1)
    watch = await live.watch()
    first, second = runs(spans_file)
    await live.export(export_request(first[:2]))
    await live.export(export_request(second))
    items = await watch.wait(2)
    assert [(i.trace_id, i.completion, i.cut_off) for i in items] == [
        (first[0].trace_id, "open_traces_cap", True),
        (second[0].trace_id, "settled", False),
    ]


async def test_caps_refuse_with_partial_success(make_live: LiveFactory, spans_file: Path) -> None:
    live = await make_live(live_max_open_traces=1, live_on_cap="refuse", live_max_spans_per_trace=3)
    watch = await live.watch()
    first, second = runs(spans_file)
    response = await live.export(export_request(first[:5]))
    assert response.partial_success.rejected_spans == 2
    assert "spans_per_trace" in response.partial_success.error_message
    response = await live.export(export_request(second))
    assert response.partial_success.rejected_spans == len(second)
    assert "open_traces" in response.partial_success.error_message
    # The held run, short of its refused spans, is graded as cut off once idle.
    assert live.metric("trajgrade_live_spans_total", outcome="refused_open_traces") == len(second)
    assert live.metric("trajgrade_live_spans_total", outcome="refused_spans_per_trace") == 2
    await live.server.live.drain()
    (item,) = await watch.wait(1)
    assert (item.trace_id, item.cut_off) == (first[0].trace_id, True)


async def test_malformed_export_disturbs_nothing(
    make_live: LiveFactory, spans_file: Path, tmp_path: Path
) -> None:
    live = await make_live()
    watch = await live.watch()
    run = runs(spans_file)[0]
    await live.export(export_request(run[:3]))
    raw = live.otlp_channel.unary_unary(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw(b"\x0a\xff\xff\xff")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed OTLP traces export" in (caught.value.details() or "")
    await live.export(export_request(run[3:]))
    await watch.wait(1)
    await eventually(lambda: len(live.sink_lines()) == 1)
    expected = regrade_lines(
        [write_pb(tmp_path / "run.pb", export_request(run))],
        live.suite("weather"),
        tmp_path / "e.jsonl",
    )
    assert [strip_live(line) for line in live.sink_lines()] == expected
    assert (
        live.metric(
            "trajgrade_live_export_requests_total",
            signal="traces",
            transport="grpc",
            result="malformed",
        )
        == 1
    )


async def test_end_marker_completes_at_once(make_live: LiveFactory, spans_file: Path) -> None:
    # A settle time far longer than the test: only the end marker can complete the run.
    live = await make_live(live_settle_s=600.0)
    watch = await live.watch()
    run = runs(spans_file)[0]
    request = export_request(run)
    root = next(
        rs.scope_spans[0].spans[0]
        for rs in request.resource_spans
        if not rs.scope_spans[0].spans[0].parent_span_id
    )
    marker = root.attributes.add()
    marker.key = "trajgrade.run.end"
    marker.value.bool_value = True
    await live.export(request)
    (item,) = await watch.wait(1)
    assert (item.completion, item.cut_off) == ("end_marker", False)


async def test_unrouted_runs_are_counted(make_live: LiveFactory, spans_file: Path) -> None:
    live = await make_live()
    watch = await live.watch()
    first, second = runs(spans_file)
    await live.export(export_request(first, service="billing"))
    await live.export(export_request(second))
    (item,) = await watch.wait(1)
    assert item.trace_id == second[0].trace_id
    await eventually(
        lambda: live.metric("trajgrade_live_traces_dropped_total", reason="unrouted") == 1
    )
    assert live.metric("trajgrade_live_spans_total", outcome="unrouted") == len(first)


async def test_auth_token_guards_the_receivers(make_live: LiveFactory, spans_file: Path) -> None:
    live = await make_live(auth_token="s3cret")
    run = runs(spans_file)[0]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await live.export(export_request(run))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    for wrong in ("Basic s3cret", "Bearer s3cre", "Bearer s3crett"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await live.export(export_request(run), metadata=(("authorization", wrong),))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, wrong
    response = await live.export(
        export_request(run), metadata=(("authorization", "Bearer s3cret"),)
    )
    assert not response.HasField("partial_success")
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == len(run)


async def test_transport_takes_gzip_refuses_unknown_methods_and_drains(
    make_live: LiveFactory, spans_file: Path
) -> None:
    """The receiver's TCP transport (the core's): gzip-compressed exports (what an exporter
    sends with OTEL_EXPORTER_OTLP_COMPRESSION=gzip), UNIMPLEMENTED for a method it does not
    serve, and UNAVAILABLE (retryable) once draining."""
    live = await make_live()
    watch = await live.watch()
    run = runs(spans_file)[0]
    export = live.otlp_channel.unary_unary(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    )
    body = export_request(run).SerializeToString()
    assert await export(body, compression=grpc.Compression.Gzip) == b""
    (item,) = await watch.wait(1)
    assert item.trace_id == run[0].trace_id
    other = live.otlp_channel.unary_unary("/opentelemetry.proto.collector.metrics.v1.Nope/Export")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await other(body)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    live.server._otlp_grpc[0].draining = True
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await export(body)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in (caught.value.details() or "")
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == len(run)
