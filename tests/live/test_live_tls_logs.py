"""The receivers under the server's mTLS settings, and GenAI log events (LogsService, /v1/logs)
joining the runs of their traces."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from server.test_server_ops import Pki  # tests/server: the throwaway CA of the TLS tests

from .conftest import LOGS_EXPORT, TRACE_EXPORT, LiveFactory, by_trace, export_request, span_items


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


async def test_mutual_tls_on_both_receivers(
    make_live: LiveFactory, pki: Pki, spans_file: Path
) -> None:
    live = await make_live(
        tls_cert_file=pki.server_cert, tls_key_file=pki.server_key, tls_client_ca_file=pki.ca
    )
    run = next(iter(by_trace(span_items(spans_file)).values()))
    request = export_request(run)
    target = f"127.0.0.1:{live.server.otlp_grpc_port}"
    for client_cert, works in ((True, True), (False, False)):
        credentials = pki.channel_credentials(client_cert=client_cert)
        async with grpc.aio.secure_channel(target, credentials) as channel:
            export = channel.unary_unary(
                TRACE_EXPORT,
                request_serializer=trace_service_pb2.ExportTraceServiceRequest.SerializeToString,
                response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
            )
            if works:
                await export(request, timeout=5)
            else:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await export(request, timeout=5)
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    url = f"https://127.0.0.1:{live.server.otlp_http_port}/v1/traces"
    body = request.SerializeToString()
    headers = {"Content-Type": "application/x-protobuf"}
    context = ssl.create_default_context(cafile=pki.ca)
    context.load_cert_chain(pki.client_cert, pki.client_key)
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=body, headers=headers, ssl=context) as response:
            assert response.status == 200  # the same spans again: duplicates, accepted
        anonymous = ssl.create_default_context(cafile=pki.ca)
        with pytest.raises(aiohttp.ClientError):
            async with session.post(url, data=body, headers=headers, ssl=anonymous) as response:
                await response.read()
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == len(run)
    assert live.metric("trajgrade_live_spans_total", outcome="duplicate") == len(run)


def choice_event(trace_id: bytes, span_id: bytes) -> logs_service_pb2.ExportLogsServiceRequest:
    """One gen_ai.choice log event (the shape opentelemetry-instrumentation-openai-v2 emits)."""
    request = logs_service_pb2.ExportLogsServiceRequest()
    record = request.resource_logs.add().scope_logs.add().log_records.add()
    record.event_name = "gen_ai.choice"
    record.trace_id, record.span_id = trace_id, span_id
    record.time_unix_nano = 1
    content = record.body.kvlist_value.values.add()
    content.key = "index"
    content.value.int_value = 0
    return request


async def test_log_events_join_their_run_and_late_ones_are_refused(
    make_live: LiveFactory, spans_file: Path
) -> None:
    live = await make_live()
    watch = await live.watch()
    run = next(iter(by_trace(span_items(spans_file)).values()))
    open_part = [item for item in run if item.span.parent_span_id]
    await live.export(export_request(open_part))
    export_logs = live.otlp_channel.unary_unary(
        LOGS_EXPORT,
        request_serializer=logs_service_pb2.ExportLogsServiceRequest.SerializeToString,
        response_deserializer=logs_service_pb2.ExportLogsServiceResponse.FromString,
    )
    event = choice_event(run[0].span.trace_id, run[0].span.span_id)
    response = await export_logs(event)
    assert not response.HasField("partial_success")
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            live.http_endpoint + "/v1/logs",
            data=event.SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
        ) as answer,
    ):
        assert answer.status == 200
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == len(open_part) + 2
    await live.export(export_request([item for item in run if not item.span.parent_span_id]))
    await watch.wait(1)
    response = await export_logs(event)
    assert response.partial_success.rejected_log_records == 1
    assert "late" in response.partial_success.error_message
