"""Write-back (--otlp-export-endpoint): each live result arrives at a second OTLP receiver, a
real grpc.aio LogsService, as `gen_ai.evaluation.result` log records on the run's root span."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.logs.v1 import logs_pb2
from trajgrade.live.writeback import EVENT_NAME
from trajgrade.v1 import result_pb2

from .conftest import LiveFactory, by_trace, eventually, export_request, span_items

pytestmark = pytest.mark.timeout(120)


class LogsSink(logs_service_pb2_grpc.LogsServiceServicer):
    """A tiny OTLP logs receiver: keeps every record; can fail its first calls."""

    def __init__(self, fail_first: int = 0) -> None:
        self.records: list[logs_pb2.LogRecord] = []
        self.calls = 0
        self.fail_first = fail_first

    async def Export(  # noqa: N802 (the generated servicer's name)
        self, request: logs_service_pb2.ExportLogsServiceRequest, context: Any
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        self.calls += 1
        if self.calls <= self.fail_first:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "not yet")
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                self.records.extend(scope_logs.log_records)
        return logs_service_pb2.ExportLogsServiceResponse()


async def start_sink(fail_first: int = 0) -> tuple[grpc.aio.Server, LogsSink, int]:
    server = grpc.aio.server()
    sink = LogsSink(fail_first)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, sink, port


@pytest.fixture
async def logs_sink() -> AsyncIterator[tuple[LogsSink, int]]:
    server, sink, port = await start_sink()
    yield sink, port
    await server.stop(0)


def attrs(record: logs_pb2.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in record.attributes:
        out[kv.key] = getattr(kv.value, kv.value.WhichOneof("value") or "string_value")
    return out


async def test_one_record_per_assertion_on_the_root_span(
    make_live: LiveFactory, spans_file: Path, logs_sink: tuple[LogsSink, int]
) -> None:
    sink, port = logs_sink
    live = await make_live(otlp_export_endpoint=f"127.0.0.1:{port}", otlp_export_insecure=True)
    watch = await live.watch()
    runs = by_trace(span_items(spans_file))
    assert len(runs) == 2
    # The dual route grades each run against two suites: weather passes, strict fails.
    for items in runs.values():
        await live.export(export_request(items, service="dual-agent"))
    results = await watch.wait(4)
    expected = sum(len(r.result.results) for r in results)
    await eventually(lambda: len(sink.records) >= expected, what="write-back records")
    assert len(sink.records) == expected
    # The sink holds the records before the exporter sees the reply that counts them.
    await eventually(
        lambda: live.metric("trajgrade_live_writeback_records_total", outcome="sent") == expected,
        what="the sent count",
    )

    roots = {
        trace_id: next(i.span.span_id for i in items if not i.span.parent_span_id)
        for trace_id, items in runs.items()
    }
    for response in results:
        mine = [
            r
            for r in sink.records
            if r.trace_id.hex() == response.trace_id
            and attrs(r)["trajgrade.suite_id"] == response.suite_id
        ]
        assert [attrs(r)["gen_ai.evaluation.name"] for r in mine] == [
            a.name for a in response.result.results
        ]
        for record, assertion in zip(mine, response.result.results, strict=True):
            assert record.event_name == EVENT_NAME
            assert record.span_id == roots[response.trace_id]
            got = attrs(record)
            assert got["gen_ai.evaluation.score.value"] == pytest.approx(assertion.score)
            assert got["gen_ai.evaluation.score.label"] == (
                "pass" if assertion.status == result_pb2.ASSERTION_STATUS_PASS else "fail"
            )
            assert got["gen_ai.evaluation.explanation"] == assertion.reason
    labels = {attrs(r)["gen_ai.evaluation.score.label"] for r in sink.records}
    assert labels == {"pass", "fail"}


async def test_unavailable_endpoint_is_retried_and_counted(
    make_live: LiveFactory, spans_file: Path
) -> None:
    server, sink, port = await start_sink(fail_first=2)
    try:
        live = await make_live(otlp_export_endpoint=f"127.0.0.1:{port}", otlp_export_insecure=True)
        live.server.live.writer.backoff_s = 0.01
        watch = await live.watch()
        items = next(iter(by_trace(span_items(spans_file)).values()))
        await live.export(export_request(items))
        (result,) = await watch.wait(1)
        expected = len(result.result.results)
        await eventually(lambda: len(sink.records) >= expected, what="the retried batch")
        assert sink.calls == 3
        assert live.metric("trajgrade_live_writeback_errors_total", code="UNAVAILABLE") == 2
        await eventually(
            lambda: (
                live.metric("trajgrade_live_writeback_records_total", outcome="sent") == expected
            ),
            what="the sent count",
        )
    finally:
        await server.stop(0)


async def test_grading_goes_on_when_the_endpoint_is_down(
    make_live: LiveFactory, spans_file: Path
) -> None:
    """Nothing listens at the endpoint: results still reach the watchers and the sink, and
    the failure is counted, never raised into grading."""
    live = await make_live(otlp_export_endpoint="127.0.0.1:1", otlp_export_insecure=True)
    live.server.live.writer.backoff_s = 0.01
    live.server.live.writer.max_attempts = 2
    watch = await live.watch()
    items = next(iter(by_trace(span_items(spans_file)).values()))
    await live.export(export_request(items))
    (result,) = await watch.wait(1)
    await eventually(lambda: len(live.sink_lines()) == 1, what="the sink row")
    expected = len(result.result.results)
    await eventually(
        lambda: live.metric("trajgrade_live_writeback_records_total", outcome="failed") == expected,
        what="the failed records counted",
    )
    assert live.metric("trajgrade_live_writeback_errors_total", code="UNAVAILABLE") == 2
