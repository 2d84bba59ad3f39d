"""Write-back over OTLP/HTTP and over TLS: live results reach real receivers in the test (an
aiohttp server decoding ExportLogsServiceRequest, a grpc.aio LogsService behind TLS and mTLS),
with the configured headers; the OTLP/HTTP retry rules (503 + Retry-After retried, 400 dropped)
and a partial success are counted."""

from __future__ import annotations

import asyncio
import datetime
import email.utils
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from aiohttp import web
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.logs.v1 import logs_pb2
from server.test_server_ops import Pki  # tests/server: the throwaway CA of the TLS tests
from trajgrade.live import export_transport
from trajgrade.live.writeback import EVENT_NAME
from trajgrade.v1 import grader_service_pb2

from .conftest import Live, LiveFactory, by_trace, eventually, export_request, span_items
from .test_live_writeback import LogsSink, attrs, start_sink

pytestmark = pytest.mark.timeout(120)

PROTOBUF = "application/x-protobuf"
TOKEN = "Bearer wb-s3cret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@dataclass
class Call:
    at: float
    path: str
    headers: Mapping[str, str]  # case-insensitive, as HTTP field names are
    body_bytes: int = 0  # the body as read (inflated when it came gzip-encoded)


@dataclass
class HttpLogsReceiver:
    """An OTLP/HTTP logs endpoint: decodes each body; `answers` scripts the first replies
    (status, extra headers, body), the rest are 200 with an empty ExportLogsServiceResponse."""

    answers: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    records: list[logs_pb2.LogRecord] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.calls.append(Call(time.monotonic(), request.path, request.headers.copy(), len(body)))
        if request.content_type != PROTOBUF:
            return web.Response(status=415)
        decoded = logs_service_pb2.ExportLogsServiceRequest.FromString(body)
        if self.answers:
            status, headers, reply = self.answers.pop(0)
            if status == 200:
                self.keep(decoded)
            return web.Response(status=status, headers=headers, body=reply, content_type=PROTOBUF)
        self.keep(decoded)
        reply = logs_service_pb2.ExportLogsServiceResponse().SerializeToString()
        return web.Response(body=reply, content_type=PROTOBUF)

    def keep(self, request: logs_service_pb2.ExportLogsServiceRequest) -> None:
        for resource_logs in request.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                self.records.extend(scope_logs.log_records)


StartHttp = Callable[..., Awaitable[int]]


@pytest.fixture
async def http_receiver() -> AsyncIterator[StartHttp]:
    runners: list[web.AppRunner] = []

    async def start(
        receiver: HttpLogsReceiver, path: str = "/v1/logs", context: ssl.SSLContext | None = None
    ) -> int:
        app = web.Application()
        app.router.add_post(path, receiver.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        runners.append(runner)
        return int(runner.addresses[0][1])

    yield start
    for runner in runners:
        await runner.cleanup()


async def grade(live: Live, spans_file: Path) -> grader_service_pb2.WatchResultsResponse:
    """Send one whole run; its result (one write-back record per assertion)."""
    watch = await live.watch()
    items = next(iter(by_trace(span_items(spans_file)).values()))
    await live.export(export_request(items))
    (result,) = await watch.wait(1)
    return result


async def grade_one(live: Live, spans_file: Path) -> int:
    """Send one whole run; the number of write-back records its result makes."""
    return len((await grade(live, spans_file)).result.results)


def sent(live: Live, outcome: str = "sent") -> float:
    return live.metric("trajgrade_live_writeback_records_total", outcome=outcome)


async def test_http_records_headers_and_base_path(
    make_live: LiveFactory, spans_file: Path, http_receiver: StartHttp
) -> None:
    receiver = HttpLogsReceiver()
    port = await http_receiver(receiver, "/otlp/v1/logs")
    live = await make_live(
        otlp_export_endpoint=f"http://127.0.0.1:{port}/otlp",
        otlp_export_header=(("authorization", TOKEN), ("x-tenant", "blue")),
    )
    result = await grade(live, spans_file)
    expected = len(result.result.results)
    await eventually(lambda: sent(live) == expected, what="the sent count")
    assert {r.event_name for r in receiver.records} == {EVENT_NAME}
    assert [attrs(r)["gen_ai.evaluation.name"] for r in receiver.records] == [
        a.name for a in result.result.results
    ]
    assert {attrs(r)["trajgrade.suite_id"] for r in receiver.records} == {result.suite_id}
    (call,) = receiver.calls
    assert call.path == "/otlp/v1/logs"
    assert call.headers["Content-Type"] == PROTOBUF
    assert call.headers["Authorization"] == TOKEN
    assert call.headers["X-Tenant"] == "blue"


async def test_http_gzip_bodies_are_compressed_on_the_wire(
    make_live: LiveFactory, spans_file: Path, http_receiver: StartHttp
) -> None:
    receiver = HttpLogsReceiver()
    port = await http_receiver(receiver)
    live = await make_live(
        otlp_export_endpoint=f"http://127.0.0.1:{port}", otlp_export_compression="gzip"
    )
    expected = await grade_one(live, spans_file)
    await eventually(lambda: sent(live) == expected, what="the sent count")
    assert len(receiver.records) == expected  # aiohttp inflated the body; it decoded
    (call,) = receiver.calls
    assert call.headers["Content-Encoding"] == "gzip"
    # What travelled is smaller than the ExportLogsServiceRequest it inflates to.
    assert int(call.headers["Content-Length"]) < call.body_bytes


async def test_grpc_gzip_exports_arrive(make_live: LiveFactory, spans_file: Path) -> None:
    server, sink, port = await start_sink()
    try:
        live = await make_live(
            otlp_export_endpoint=f"127.0.0.1:{port}",
            otlp_export_insecure=True,
            otlp_export_compression="gzip",
        )
        expected = await grade_one(live, spans_file)
        await eventually(lambda: sent(live) == expected, what="the sent count")
        assert len(sink.records) == expected
    finally:
        await server.stop(0)


async def test_http_503_is_retried_after_retry_after(
    make_live: LiveFactory, spans_file: Path, http_receiver: StartHttp
) -> None:
    receiver = HttpLogsReceiver(answers=[(503, {"Retry-After": "1"}, b"")])
    port = await http_receiver(receiver)
    live = await make_live(otlp_export_endpoint=f"http://127.0.0.1:{port}")
    # The backoff alone would wait past the test: only Retry-After makes the retry come soon.
    live.server.live.writer.backoff_s = 600.0
    expected = await grade_one(live, spans_file)
    await eventually(lambda: sent(live) == expected, what="the retried batch")
    first, second = receiver.calls
    assert second.at - first.at >= 0.9
    assert len(receiver.records) == expected
    assert live.metric("trajgrade_live_writeback_errors_total", code="HTTP_503") == 1
    assert sent(live, "failed") == 0


async def test_http_400_is_dropped_not_retried(
    make_live: LiveFactory, spans_file: Path, http_receiver: StartHttp
) -> None:
    status = status_pb2.Status(code=3, message="bad log record").SerializeToString()
    receiver = HttpLogsReceiver(answers=[(400, {}, status)])
    port = await http_receiver(receiver)
    live = await make_live(otlp_export_endpoint=f"http://127.0.0.1:{port}")
    live.server.live.writer.backoff_s = 0.01
    expected = await grade_one(live, spans_file)
    await eventually(lambda: sent(live, "failed") == expected, what="the failed count")
    # Far longer than the backoff: a retry would have come by now.
    await asyncio.sleep(0.3)
    assert len(receiver.calls) == 1
    assert receiver.records == []
    assert live.metric("trajgrade_live_writeback_errors_total", code="HTTP_400") == 1
    assert sent(live) == 0


async def test_http_partial_success_is_counted_as_rejected(
    make_live: LiveFactory, spans_file: Path, http_receiver: StartHttp
) -> None:
    partial = logs_service_pb2.ExportLogsServiceResponse()
    partial.partial_success.rejected_log_records = 1
    partial.partial_success.error_message = "one too many"
    receiver = HttpLogsReceiver(answers=[(200, {}, partial.SerializeToString())])
    port = await http_receiver(receiver)
    live = await make_live(otlp_export_endpoint=f"http://127.0.0.1:{port}")
    expected = await grade_one(live, spans_file)
    await eventually(lambda: sent(live) == expected - 1, what="the sent count")
    assert sent(live, "rejected") == 1


async def test_https_with_client_certificate(
    make_live: LiveFactory, spans_file: Path, http_receiver: StartHttp, pki: Pki
) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki.ca)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.verify_mode = ssl.CERT_REQUIRED
    receiver = HttpLogsReceiver()
    port = await http_receiver(receiver, context=context)
    live = await make_live(
        otlp_export_endpoint=f"https://127.0.0.1:{port}",
        otlp_export_ca=pki.ca,
        otlp_export_cert=pki.client_cert,
        otlp_export_key=pki.client_key,
    )
    expected = await grade_one(live, spans_file)
    await eventually(lambda: sent(live) == expected, what="the sent count")
    assert len(receiver.records) == expected


class HeaderSink(LogsSink):
    """The gRPC logs receiver, also keeping each call's metadata."""

    def __init__(self) -> None:
        super().__init__()
        self.metadata: list[dict[str, str]] = []

    async def Export(  # noqa: N802 (the generated servicer's name)
        self, request: logs_service_pb2.ExportLogsServiceRequest, context: grpc.aio.ServicerContext
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        self.metadata.append({k: str(v) for k, v in context.invocation_metadata() or ()})
        return await super().Export(request, context)


async def start_tls_sink(pki: Pki, *, mutual: bool) -> tuple[grpc.aio.Server, HeaderSink, int]:
    server = grpc.aio.server()
    sink = HeaderSink()
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(sink, server)
    credentials = grpc.ssl_server_credentials(
        [(Path(pki.server_key).read_bytes(), Path(pki.server_cert).read_bytes())],
        root_certificates=Path(pki.ca).read_bytes() if mutual else None,
        require_client_auth=mutual,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    return server, sink, port


async def test_grpc_tls_by_default_with_the_ca_and_headers(
    make_live: LiveFactory, spans_file: Path, pki: Pki
) -> None:
    server, sink, port = await start_tls_sink(pki, mutual=False)
    try:
        # A bare host:port is TLS (no --otlp-export-insecure), verified with the given CA.
        live = await make_live(
            otlp_export_endpoint=f"127.0.0.1:{port}",
            otlp_export_ca=pki.ca,
            otlp_export_header=(("authorization", TOKEN),),
        )
        expected = await grade_one(live, spans_file)
        await eventually(lambda: sent(live) == expected, what="the sent count")
        assert len(sink.records) == expected
        assert sink.metadata[0]["authorization"] == TOKEN
    finally:
        await server.stop(0)


async def test_grpc_mutual_tls_needs_the_client_certificate(
    make_live: LiveFactory, spans_file: Path, pki: Pki
) -> None:
    server, sink, port = await start_tls_sink(pki, mutual=True)
    try:
        live = await make_live(
            otlp_export_endpoint=f"https://127.0.0.1:{port}",
            otlp_export_protocol="grpc",
            otlp_export_ca=pki.ca,
            otlp_export_cert=pki.client_cert,
            otlp_export_key=pki.client_key,
        )
        expected = await grade_one(live, spans_file)
        await eventually(lambda: sent(live) == expected, what="the sent count")
        assert len(sink.records) == expected
        # Without a client certificate the handshake fails: retried, then counted as failed.
        anonymous = await make_live(otlp_export_endpoint=f"127.0.0.1:{port}", otlp_export_ca=pki.ca)
        anonymous.server.live.writer.backoff_s = 0.01
        anonymous.server.live.writer.max_attempts = 2
        refused = await grade_one(anonymous, spans_file)
        await eventually(lambda: sent(anonymous, "failed") == refused, what="the failed count")
        assert anonymous.metric("trajgrade_live_writeback_errors_total", code="UNAVAILABLE") == 2
        assert len(sink.records) == expected  # only the first server's
    finally:
        await server.stop(0)


class ThrottlingSink(LogsSink):
    """A gRPC logs receiver whose first call is RESOURCE_EXHAUSTED, with a RetryInfo delay
    or (`delay_s` None) without one."""

    def __init__(self, delay_s: int | None) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.at: list[float] = []

    async def Export(  # noqa: N802 (the generated servicer's name)
        self, request: logs_service_pb2.ExportLogsServiceRequest, context: grpc.aio.ServicerContext
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        self.at.append(time.monotonic())
        if len(self.at) == 1:
            status = status_pb2.Status(code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
            status.message = "slow down"
            if self.delay_s is not None:
                info = error_details_pb2.RetryInfo()
                info.retry_delay.FromSeconds(self.delay_s)
                status.details.add().Pack(info)
            await context.abort_with_status(rpc_status.to_status(status))
        return await super().Export(request, context)


@pytest.mark.parametrize("retry_info", [True, False], ids=["with_retry_info", "without"])
async def test_grpc_resource_exhausted_is_retried_only_with_retry_info(
    make_live: LiveFactory, spans_file: Path, retry_info: bool
) -> None:
    server = grpc.aio.server()
    sink = ThrottlingSink(delay_s=1 if retry_info else None)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        live = await make_live(
            otlp_export_endpoint=f"http://127.0.0.1:{port}", otlp_export_protocol="grpc"
        )
        # With RetryInfo only its delay brings the retry; without, a retry would come at once.
        live.server.live.writer.backoff_s = 600.0 if retry_info else 0.01
        expected = await grade_one(live, spans_file)
        if retry_info:
            await eventually(lambda: sent(live) == expected, what="the retried batch")
            assert sink.at[1] - sink.at[0] >= 0.9
        else:
            # OTLP: RESOURCE_EXHAUSTED without RetryInfo is not retryable: dropped at once.
            await eventually(lambda: sent(live, "failed") == expected, what="the failed count")
            await asyncio.sleep(0.2)  # room for a wrong retry to show
            assert (len(sink.at), sent(live)) == (1, 0)
        assert live.metric("trajgrade_live_writeback_errors_total", code="RESOURCE_EXHAUSTED") == 1
    finally:
        await server.stop(0)


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert export_transport._retry_after("7") == 7.0
    soon = email.utils.format_datetime(
        datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30), usegmt=True
    )
    assert 25.0 <= (export_transport._retry_after(soon) or 0.0) <= 30.0
    assert export_transport._retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # passed
    assert export_transport._retry_after("soon") is None
    assert export_transport._retry_after(None) is None
