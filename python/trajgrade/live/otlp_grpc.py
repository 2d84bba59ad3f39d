"""The OTLP/gRPC receiver: TraceService/Export and LogsService/Export on an address of its own,
with the server's auth and TLS.

On TCP the transport is the core's (`_core.OtlpGrpcTransport`, rust/py/src/otlp_receiver.rs:
tonic on threads of its own): HTTP/2, TLS, gzip, the bearer token and draining never hold the
interpreter, a traces export is decoded there as it arrives (with the intake's keys, set on
the transport), and the event loop is woken once per batch of exports to make their spans and
answer each one here with what assembly made of them (the OTLP partial success). On a unix
socket it is grpc.aio's (see otlp_grpc_server)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsPartialSuccess
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTracePartialSuccess

from trajgrade import _core
from trajgrade.live.grading import LiveGrader
from trajgrade.live.intake import ShuttingDownError, awaited_answer
from trajgrade.server.auth import BearerTokenInterceptor
from trajgrade.server.settings import Settings
from trajgrade.server.tls import server_pem

log = logging.getLogger("trajgrade.live")

_EMPTY = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
# How often the transport's refusals of exports too large are taken into the metrics.
_COUNT_EVERY_S = 1.0
TRACE_SERVICE = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
LOGS_SERVICE = logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name


@dataclass(frozen=True)
class Refusal:
    """An export answered with a gRPC status instead of a response."""

    code: grpc.StatusCode
    message: str


class OtlpGrpcReceiver:
    """Answers each export: a malformed body INVALID_ARGUMENT with the parser's reason, an
    accepted one with its partial success (empty when every span was taken). The same answers
    whichever transport carried the export (the core's, or grpc.aio's for unix sockets)."""

    def __init__(self, live: LiveGrader) -> None:
        self.live = live
        self.transport: _core.OtlpGrpcTransport | None = None
        # The common case's counter child, looked up once (labels() validates and locks).
        self._traces_ok = live.metrics.exports.labels("traces", "grpc", "ok")
        self._draining = False
        # The intake's keys last handed to the transport (it decodes exports with them).
        self._keys_sent: list[str] | None = None

    @property
    def draining(self) -> bool:
        return self._draining

    @draining.setter
    def draining(self, value: bool) -> None:
        # Exports are then answered UNAVAILABLE (retryable) by the transport itself.
        self._draining = value
        if value and self.transport is not None:
            self.transport.set_draining()

    def take(
        self,
        logs: bool,
        body: bytes | _core.OtlpExport,
        answer: Callable[[bytes | Refusal], None],
    ) -> None:
        """Take an export (its protobuf bytes, or the core transport's export, whose spans it
        decoded) in the intake's order; `answer` gets its response bytes or the status it is
        refused with, now or once it is taken (live/intake.py)."""
        if self._draining:
            # Retryable for an exporter (OTLP): its retry goes to a replica that is up.
            answer(Refusal(grpc.StatusCode.UNAVAILABLE, "the server is shutting down"))
            return
        if not logs:
            self.live.take_traces(body, lambda result: answer(self._traces_answer(result)))
            return
        message = logs_service_pb2.ExportLogsServiceRequest()
        try:
            message.ParseFromString(body if isinstance(body, bytes) else body.body())
        except DecodeError as exc:
            answer(self._malformed("logs", logs_service_pb2.ExportLogsServiceRequest, exc))
            return
        self.live.take_logs(message, lambda result: answer(self._logs_answer(result)))

    def on_readable(self) -> None:
        """The loop's reader callback for the core's transport: take every export waiting."""
        assert self.transport is not None
        keys = self.live.intake_keys()
        if keys is not self._keys_sent:  # a routes load changed them (or the first export)
            self.transport.set_keys(keys)
            self._keys_sent = keys
        for export in self.transport.take():
            try:
                self.take(export.logs, export, functools.partial(_send, export))
            except Exception:  # a defect: answered, logged, the other exports go on
                log.exception("an OTLP/gRPC export could not be taken")
                export.fail(grpc.StatusCode.INTERNAL.value[0], "the export could not be taken")

    def _traces_answer(self, result: ExportTracePartialSuccess | Exception) -> bytes | Refusal:
        if isinstance(result, Exception):
            return self._failed("traces", trace_service_pb2.ExportTraceServiceRequest, result)
        if not result.rejected_spans:
            self._traces_ok.inc()
            return _EMPTY  # every span taken: the empty response
        self.live.metrics.exports.labels("traces", "grpc", "partial").inc()
        response = trace_service_pb2.ExportTraceServiceResponse()
        response.partial_success.CopyFrom(result)
        return response.SerializeToString()

    def _logs_answer(self, result: ExportLogsPartialSuccess | Exception) -> bytes | Refusal:
        if isinstance(result, Exception):
            return self._failed("logs", logs_service_pb2.ExportLogsServiceRequest, result)
        outcome = "partial" if result.rejected_log_records else "ok"
        self.live.metrics.exports.labels("logs", "grpc", outcome).inc()
        response = logs_service_pb2.ExportLogsServiceResponse()
        if result.rejected_log_records:
            response.partial_success.CopyFrom(result)
        return response.SerializeToString()

    def _failed(self, signal: str, message_type: Any, exc: Exception) -> Refusal:
        """The status of an export the intake did not take."""
        if isinstance(exc, ValueError):
            return self._malformed(signal, message_type, exc)
        if isinstance(exc, ShuttingDownError):
            return Refusal(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        log.error("an OTLP/gRPC %s export could not be taken", signal, exc_info=exc)
        return Refusal(grpc.StatusCode.INTERNAL, "the export could not be taken")

    def _malformed(self, signal: str, message_type: Any, exc: Exception) -> Refusal:
        self.live.metrics.exports.labels(signal, "grpc", "malformed").inc()
        return Refusal(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"malformed OTLP {signal} export: not a {message_type.DESCRIPTOR.name} ({exc})",
        )

    # --- grpc.aio's transport (unix sockets) ------------------------------------------------

    async def _aio_export(self, logs: bool, request: bytes, context: Any) -> bytes:
        future, answered = awaited_answer()
        self.take(logs, request, answered)
        answer = await future
        if isinstance(answer, Refusal):
            await context.abort(answer.code, answer.message)
        assert isinstance(answer, bytes)
        return answer

    async def _aio_traces(self, request: bytes, context: Any) -> bytes:
        return await self._aio_export(False, request, context)

    async def _aio_logs(self, request: bytes, context: Any) -> bytes:
        return await self._aio_export(True, request, context)

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        """grpc.aio handlers (identity deserializers: the bodies are decoded here)."""
        return [
            grpc.method_handlers_generic_handler(
                TRACE_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self._aio_traces)}
            ),
            grpc.method_handlers_generic_handler(
                LOGS_SERVICE, {"Export": grpc.unary_unary_rpc_method_handler(self._aio_logs)}
            ),
        ]


def _send(export: _core.OtlpExport, answer: bytes | Refusal) -> None:
    """Answer the core transport's export."""
    if isinstance(answer, Refusal):
        export.fail(answer.code.value[0], answer.message)
    else:
        export.reply(answer)


class OtlpGrpcServer:
    """The receiver on the core's transport, bound; `start` hands its exports to the running
    loop."""

    def __init__(self, receiver: OtlpGrpcReceiver, transport: _core.OtlpGrpcTransport) -> None:
        self.receiver = receiver
        self.transport = transport
        receiver.transport = transport
        self._loop: asyncio.AbstractEventLoop | None = None
        self._counting: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # Exports arriving from now on are decoded with the intake's keys on the transport.
        self.transport.set_keys(self.receiver.live.intake_keys())
        self._loop.add_reader(self.transport.fileno(), self.receiver.on_readable)
        self._counting = self._loop.create_task(self._count_forever())

    def count(self) -> None:
        """The exports the transport refused as too large (Python never saw them), into the
        exports metric."""
        exports = self.receiver.live.metrics.exports
        for signal, refused in zip(
            ("traces", "logs"), self.transport.take_too_large(), strict=True
        ):
            if refused:
                exports.labels(signal, "grpc", "too_large").inc(refused)

    async def _count_forever(self) -> None:
        while True:
            await asyncio.sleep(_COUNT_EVERY_S)
            self.count()

    async def stop(self, grace: float) -> None:
        """Stop listening; calls in flight get `grace` seconds (off the loop) to finish."""
        if self._counting is not None:
            self._counting.cancel()
            self._counting = None
        if self._loop is not None:
            self._loop.remove_reader(self.transport.fileno())
            self._loop = None
        await asyncio.get_running_loop().run_in_executor(None, self.transport.stop, grace)
        self.count()


def otlp_grpc_server(
    receiver: OtlpGrpcReceiver,
    address: str,
    *,
    token: str | None,
    settings: Settings,
    credentials: grpc.ServerCredentials | None,
    max_message_bytes: int,
) -> tuple[OtlpGrpcServer | grpc.aio.Server, int | None]:
    """The receiver's server, bound (not started); returns it and the bound port (None for a
    unix socket).

    On a unix socket the receiver runs on grpc.aio: the HTTP/2 library under the core's
    transport refuses the `:authority` that gRPC's C-core clients send there (the socket's
    path; hyperium/h2#487), which every Python, C++ and Ruby exporter would hit."""
    if not address.startswith("unix:"):
        transport = _core.OtlpGrpcTransport(address, max_message_bytes, token, server_pem(settings))
        return OtlpGrpcServer(receiver, transport), transport.port
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
        server.add_insecure_port(address)
    else:
        server.add_secure_port(address, credentials)
    return server, None
