"""The OTLP/gRPC receiver: TraceService/Export and LogsService/Export on a grpc.aio server of
its own (its own address), on the grading server's event loop, with its auth and TLS."""

from __future__ import annotations

import logging
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from trajgrade.live.grading import LiveGrader
from trajgrade.server.auth import BearerTokenInterceptor

log = logging.getLogger("trajgrade.live")

_EMPTY = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
TRACE_SERVICE = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
LOGS_SERVICE = logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name


class OtlpGrpcReceiver:
    """Decodes each export itself (identity deserializer), so a malformed body is answered
    INVALID_ARGUMENT with the parser's reason rather than gRPC's INTERNAL."""

    def __init__(self, live: LiveGrader) -> None:
        self.live = live
        self.draining = False
        # The common case's counter child, looked up once (labels() validates and locks).
        self._traces_ok = live.metrics.exports.labels("traces", "grpc", "ok")

    async def export_traces(self, request: bytes, context: Any) -> bytes:
        if self.draining:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        try:
            partial = self.live.export_traces(request)  # decoded in the core
        except ValueError as exc:
            await self._malformed(
                "traces", trace_service_pb2.ExportTraceServiceRequest, exc, context
            )
        if not partial.rejected_spans:
            self._traces_ok.inc()
            return _EMPTY  # every span taken: the empty response
        self.live.metrics.exports.labels("traces", "grpc", "partial").inc()
        response = trace_service_pb2.ExportTraceServiceResponse()
        response.partial_success.CopyFrom(partial)
        return response.SerializeToString()

    async def export_logs(self, request: bytes, context: Any) -> bytes:
        message = await self._parse(request, logs_service_pb2.ExportLogsServiceRequest, context)
        partial = self.live.export_logs(message)
        result = "partial" if partial.rejected_log_records else "ok"
        self.live.metrics.exports.labels("logs", "grpc", result).inc()
        response = logs_service_pb2.ExportLogsServiceResponse()
        if partial.rejected_log_records:
            response.partial_success.CopyFrom(partial)
        return response.SerializeToString()

    async def _parse(self, request: bytes, message_type: Any, context: Any) -> Any:
        signal = "traces" if message_type is trace_service_pb2.ExportTraceServiceRequest else "logs"
        if self.draining:
            # Retryable for an exporter (OTLP): its retry goes to a replica that is up.
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        message = message_type()
        try:
            message.ParseFromString(request)
        except DecodeError as exc:
            await self._malformed(signal, message_type, exc, context)
        return message

    async def _malformed(
        self, signal: str, message_type: Any, exc: Exception, context: Any
    ) -> None:
        self.live.metrics.exports.labels(signal, "grpc", "malformed").inc()
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"malformed OTLP {signal} export: not a {message_type.DESCRIPTOR.name} ({exc})",
        )

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        return [
            grpc.method_handlers_generic_handler(
                TRACE_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self.export_traces)}
            ),
            grpc.method_handlers_generic_handler(
                LOGS_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self.export_logs)}
            ),
        ]


def otlp_grpc_server(
    receiver: OtlpGrpcReceiver,
    address: str,
    *,
    token: str | None,
    credentials: grpc.ServerCredentials | None,
    max_message_bytes: int,
) -> tuple[grpc.aio.Server, int]:
    """The receiver's server, bound (not started); returns it and the bound port."""
    interceptors = [] if token is None else [BearerTokenInterceptor(token)]
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0),
        ],
    )
    server.add_generic_rpc_handlers(tuple(receiver.handlers()))
    if credentials is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, credentials)
    return server, port
