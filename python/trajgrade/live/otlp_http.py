"""The OTLP/HTTP receiver (aiohttp): POST /v1/traces and /v1/logs, protobuf or JSON bodies,
gzip Content-Encoding, the answer in the request's content type (OTLP/HTTP specification)."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import ssl
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from trajgrade.importers import otlp
from trajgrade.live.grading import LiveGrader
from trajgrade.live.intake import ShuttingDownError
from trajgrade.server.settings import Settings

log = logging.getLogger("trajgrade.live")

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# JSON bodies from this size are parsed on the receiver's own thread, not on the event loop:
# the protobuf JSON mapping is Python, about 0.3 s per MB here, and the loop assembles and
# grades every live run (a 12.5 MB body held it 3-4.8 s). The thread shares the interpreter,
# so the loop still runs between its turns (sys.getswitchinterval(), 5 ms).
JSON_OFF_LOOP_BYTES = 16 * 1024


class OtlpHttpReceiver:
    """The two endpoints; auth by the server's bearer token."""

    def __init__(self, live: LiveGrader, token: str | None, max_body_bytes: int) -> None:
        self.live = live
        self._token = None if token is None else token.encode("utf-8")
        self.max_body_bytes = max_body_bytes
        self.draining = False
        # One thread: large JSON bodies are parsed one at a time, in arrival order.
        self._json = ThreadPoolExecutor(1, thread_name_prefix="trajgrade-otlp-json")

    def close(self) -> None:
        """No more exports: the JSON thread ends (after a parse in progress)."""
        self._json.shutdown(wait=False, cancel_futures=True)

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

    def _refusal(self, request: web.Request, signal: str) -> web.Response | None:
        """The answer to an export refused before its body is read: an unknown content type,
        no token, the drain."""
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
            return _shutting_down(content_type)
        return None

    async def _export(self, request: web.Request, signal: str, message_type: Any) -> web.Response:
        refusal = self._refusal(request, signal)
        if refusal is not None:
            return refusal
        content_type = request.content_type
        metrics = self.live.metrics.exports
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            metrics.labels(signal, "http", "too_large").inc()
            return _status(
                413,
                code_pb2.RESOURCE_EXHAUSTED,
                f"body over {self.max_body_bytes} bytes (--otlp-max-message-bytes)",
                content_type,
            )
        try:
            response, partial, rejected = await self._take(
                signal, content_type, body, message_type()
            )
        except (DecodeError, json_format.ParseError, ValueError, TypeError) as exc:
            metrics.labels(signal, "http", "malformed").inc()
            return _status(
                400,
                code_pb2.INVALID_ARGUMENT,
                f"malformed OTLP {signal} export ({content_type}): {exc}",
                content_type,
            )
        except ShuttingDownError:
            return _shutting_down(content_type)
        if rejected:
            response.partial_success.CopyFrom(partial)  # type: ignore[attr-defined]
        metrics.labels(signal, "http", "partial" if rejected else "ok").inc()
        return _message(200, response, content_type)

    async def _take(
        self, signal: str, content_type: str, body: bytes, message: Any
    ) -> tuple[Message, Any, int]:
        """Decode the body and take the export in the intake's order: the response to fill,
        the partial success, and how many spans or records it rejected."""
        if content_type == JSON:
            await self._parse_json(body, message)
        elif signal == "logs":
            _parse(body, content_type, message)
        if signal == "traces":
            # Protobuf bodies are decoded in the core; JSON ones become protobuf first.
            if content_type == JSON:
                body = message.SerializeToString()
            traces = await self.live.traces(body)
            return trace_service_pb2.ExportTraceServiceResponse(), traces, traces.rejected_spans
        logs = await self.live.logs(message)
        return logs_service_pb2.ExportLogsServiceResponse(), logs, logs.rejected_log_records

    async def _parse_json(self, body: bytes, message: Any) -> None:
        """Fill `message` from an OTLP/JSON body: a large one on the receiver's JSON thread."""
        if len(body) < JSON_OFF_LOOP_BYTES:
            _parse(body, JSON, message)
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._json, _parse, body, JSON, message)

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


def _shutting_down(content_type: str) -> web.Response:
    # 503 is retryable for an exporter (OTLP/HTTP): its retry reaches a live replica.
    return _status(503, code_pb2.UNAVAILABLE, "the server is shutting down", content_type)


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
