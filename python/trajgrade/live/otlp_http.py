"""The OTLP/HTTP receiver (aiohttp): POST /v1/traces and /v1/logs, protobuf or JSON bodies,
gzip Content-Encoding, the answer in the request's content type (OTLP/HTTP specification)."""

from __future__ import annotations

import hmac
import json
import logging
import ssl
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from trajgrade.importers import otlp
from trajgrade.live.grading import LiveGrader
from trajgrade.server.settings import Settings

log = logging.getLogger("trajgrade.live")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class OtlpHttpReceiver:
    """The two endpoints; auth by the server's bearer token."""

    def __init__(self, live: LiveGrader, token: str | None, max_body_bytes: int) -> None:
        self.live = live
        self._token = None if token is None else token.encode("utf-8")
        self.max_body_bytes = max_body_bytes
        self.draining = False

    def app(self) -> web.Application:
        # aiohttp inflates gzip (and deflate) request bodies itself; client_max_size bounds
        # the inflated body.
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_post("/v1/traces", self.traces)
        app.router.add_post("/v1/logs", self.logs)
        return app

    async def traces(self, request: web.Request) -> web.Response:
        return await self._export(request, "traces", trace_service_pb2.ExportTraceServiceRequest)

    async def logs(self, request: web.Request) -> web.Response:
        return await self._export(request, "logs", logs_service_pb2.ExportLogsServiceRequest)

    async def _export(self, request: web.Request, signal: str, message_type: Any) -> web.Response:
        content_type = request.content_type  # without parameters (charset)
        metrics = self.live.metrics.exports
        if content_type not in (PROTOBUF, JSON):
            metrics.labels(signal, "http", "unsupported_media_type").inc()
            return _status(
                415,
                code_pb2.INVALID_ARGUMENT,
                f"unsupported content type {content_type!r}: send {PROTOBUF} or {JSON}",
                JSON,
            )
        if not self._allowed(request):
            metrics.labels(signal, "http", "unauthenticated").inc()
            return _status(
                401,
                code_pb2.UNAUTHENTICATED,
                "missing or invalid bearer token (authorization: Bearer <token>)",
                content_type,
            )
        if self.draining:
            # 503 is retryable for an exporter (OTLP/HTTP): its retry reaches a live replica.
            return _status(503, code_pb2.UNAVAILABLE, "the server is shutting down", content_type)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            metrics.labels(signal, "http", "malformed").inc()
            return _status(
                413,
                code_pb2.RESOURCE_EXHAUSTED,
                f"body over {self.max_body_bytes} bytes (--max-message-bytes)",
                content_type,
            )
        message = message_type()
        try:
            if signal == "traces":
                # Protobuf bodies are decoded in the core; JSON ones become protobuf first.
                if content_type != PROTOBUF:
                    _parse(body, content_type, message)
                    body = message.SerializeToString()
                partial: Any = self.live.export_traces(body)
            else:
                _parse(body, content_type, message)
        except (DecodeError, json_format.ParseError, ValueError, TypeError) as exc:
            metrics.labels(signal, "http", "malformed").inc()
            return _status(
                400,
                code_pb2.INVALID_ARGUMENT,
                f"malformed OTLP {signal} export ({content_type}): {exc}",
                content_type,
            )
        if signal == "traces":
            response: Message = trace_service_pb2.ExportTraceServiceResponse()
            rejected = partial.rejected_spans
        else:
            partial = self.live.export_logs(message)
            response = logs_service_pb2.ExportLogsServiceResponse()
            rejected = partial.rejected_log_records
        if rejected:
            response.partial_success.CopyFrom(partial)  # type: ignore[attr-defined]
        metrics.labels(signal, "http", "partial" if rejected else "ok").inc()
        return _message(200, response, content_type)

    def _allowed(self, request: web.Request) -> bool:
        if self._token is None:
            return True
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(presented.strip().encode("utf-8"), self._token)


def _parse(
    body: bytes,
    content_type: str,
    message: trace_service_pb2.ExportTraceServiceRequest
    | logs_service_pb2.ExportLogsServiceRequest,
) -> None:
    if content_type == PROTOBUF:
        message.ParseFromString(body)
        return
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError("the JSON body must be an object")
    # OTLP/JSON: hex trace and span ids, lowerCamelCase keys (the protobuf JSON mapping takes
    # both cases); unknown fields are ignored, as the specification asks of receivers.
    otlp.parse_json_request(document, message)


def _message(status: int, message: Message, content_type: str) -> web.Response:
    if content_type == JSON:
        text = json_format.MessageToJson(message, indent=None)
        return web.Response(status=status, body=text.encode(), content_type=JSON)
    return web.Response(status=status, body=message.SerializeToString(), content_type=PROTOBUF)


def _status(status: int, code: int, text: str, content_type: str) -> web.Response:
    """A google.rpc.Status body, as the OTLP/HTTP specification asks for failures."""
    return _message(status, status_pb2.Status(code=code, message=text), content_type)


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """The server's TLS settings for the HTTP receiver (mTLS with a client CA)."""
    if settings.tls_cert_file is None or settings.tls_key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    if settings.tls_client_ca_file is not None:
        context.load_verify_locations(settings.tls_client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


async def start_http(
    receiver: OtlpHttpReceiver, address: str, context: ssl.SSLContext | None
) -> tuple[web.AppRunner, int | None]:
    """Serve the receiver on host:port or unix:/path; returns the runner and the bound port."""
    runner = web.AppRunner(receiver.app(), access_log=None, handle_signals=False)
    await runner.setup()
    site: web.BaseSite
    if address.startswith("unix:"):
        site = web.UnixSite(runner, address.removeprefix("unix:"), ssl_context=context)
        await site.start()
        return runner, None
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    site = web.TCPSite(runner, host, int(port), ssl_context=context, reuse_port=False)
    await site.start()
    # The bound port (asked for port 0 in tests): from the runner's listening sockets.
    addresses = runner.addresses
    bound = int(addresses[0][1]) if addresses and isinstance(addresses[0], tuple) else None
    return runner, bound
