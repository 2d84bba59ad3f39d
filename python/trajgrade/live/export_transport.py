"""The two transports of write-back, behind one interface: OTLP/gRPC (grpc.aio) and OTLP/HTTP
protobuf (aiohttp, already the HTTP receiver's library). Each sends one serialized
`ExportLogsServiceRequest` and either returns the endpoint's response (its partial success) or
raises ExportError saying whether the OTLP spec calls the failure retryable; the batching,
retries and counting are the writer's (trajgrade.live.writeback), the same for both.
"""

from __future__ import annotations

import datetime
import email.utils
import gzip
import ssl
from typing import Protocol

import aiohttp
import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

from trajgrade.live.export_target import GRPC, GZIP, ExportTarget

EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
PROTOBUF = "application/x-protobuf"
# OTLP/gRPC: the transient statuses (the rest, e.g. INVALID_ARGUMENT, are dropped at once).
_GRPC_RETRYABLE = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
# OTLP/HTTP: "429, 502, 503, 504 are retryable; all other 4xx and 5xx are not".
_HTTP_RETRYABLE = frozenset({429, 502, 503, 504})


class ExportError(Exception):
    """One export attempt failed: `code` labels the errors metric (a gRPC status name, or
    HTTP_<status>), `retry_after_s` is the delay the endpoint asked for, if any."""

    def __init__(
        self, code: str, retryable: bool, detail: str = "", retry_after_s: float | None = None
    ) -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.retryable = retryable
        self.detail = detail
        self.retry_after_s = retry_after_s


class Transport(Protocol):
    """Sends serialized ExportLogsServiceRequest bodies to one endpoint."""

    def start(self) -> None:
        """Connect lazily; called on the server's event loop."""

    async def export(self, body: bytes, timeout_s: float) -> ExportLogsServiceResponse:
        """One attempt; raises ExportError."""

    async def close(self) -> None:
        """Release the connection (cancelling what is in flight)."""


def make_transport(target: ExportTarget) -> Transport:
    return GrpcTransport(target) if target.protocol == GRPC else HttpTransport(target)


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as handle:
        return handle.read()


class GrpcTransport:
    """OTLP/gRPC LogsService/Export over grpc.aio."""

    def __init__(self, target: ExportTarget) -> None:
        self.target = target
        self._metadata = target.headers
        # grpc-encoding gzip on each call: the message is compressed by grpc itself.
        self._compression = grpc.Compression.Gzip if target.compression == GZIP else None
        self._credentials = (
            grpc.ssl_channel_credentials(
                root_certificates=_read(target.ca_file),
                private_key=_read(target.key_file),
                certificate_chain=_read(target.cert_file),
            )
            if target.tls
            else None
        )
        self._channel: grpc.aio.Channel | None = None

    def start(self) -> None:
        # grpc.aio binds a channel to the running loop: made here, not in __init__.
        if self._credentials is None:
            self._channel = grpc.aio.insecure_channel(self.target.address)
        else:
            self._channel = grpc.aio.secure_channel(self.target.address, self._credentials)
        # No serializers: the body is already bytes, serialized once for every attempt.
        self._export = self._channel.unary_unary(
            EXPORT, response_deserializer=ExportLogsServiceResponse.FromString
        )

    async def export(self, body: bytes, timeout_s: float) -> ExportLogsServiceResponse:
        try:
            response: ExportLogsServiceResponse = await self._export(
                body, timeout=timeout_s, metadata=self._metadata, compression=self._compression
            )
        except grpc.aio.AioRpcError as exc:
            code, delay = exc.code(), _retry_info(exc)
            # RESOURCE_EXHAUSTED is retryable only with a RetryInfo, the server's word that it
            # can recover (OTLP spec, "Failures"; without it, e.g. a message over its limit).
            retryable = code in _GRPC_RETRYABLE or (
                code == grpc.StatusCode.RESOURCE_EXHAUSTED and delay is not None
            )
            raise ExportError(code.name, retryable, exc.details() or "", delay) from exc
        return response

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()


def _retry_info(exc: grpc.aio.AioRpcError) -> float | None:
    """The delay of a google.rpc.RetryInfo in the status details (OTLP/gRPC's throttling)."""
    for key, value in exc.trailing_metadata() or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        for detail in status_pb2.Status.FromString(value).details:
            info = error_details_pb2.RetryInfo()
            if detail.Unpack(info):
                return float(info.retry_delay.ToTimedelta().total_seconds())
    return None


class HttpTransport:
    """OTLP/HTTP protobuf: POST {base}/v1/logs."""

    def __init__(self, target: ExportTarget) -> None:
        self.target = target
        self._ssl: ssl.SSLContext | None = None
        if target.tls:
            self._ssl = ssl.create_default_context(cafile=target.ca_file)
            if target.cert_file is not None:
                self._ssl.load_cert_chain(target.cert_file, target.key_file)
        # The configured headers first: the content type and encoding are the protocol's.
        self._headers = {**dict(target.headers), "Content-Type": PROTOBUF}
        self._gzip = target.compression == GZIP
        if self._gzip:
            self._headers["Content-Encoding"] = "gzip"
        self._session: aiohttp.ClientSession | None = None

    def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False)
        )

    async def export(self, body: bytes, timeout_s: float) -> ExportLogsServiceResponse:
        assert self._session is not None, "start() first"
        if self._gzip:
            body = gzip.compress(body, compresslevel=6)
        try:
            async with self._session.post(
                self.target.address,
                data=body,
                headers=self._headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
                allow_redirects=False,
            ) as response:
                payload = await response.read()
                status = response.status
                retry_after = response.headers.get("Retry-After")
                content_type = response.content_type
        except TimeoutError as exc:
            raise ExportError("DEADLINE_EXCEEDED", True, f"no answer in {timeout_s}s") from exc
        except aiohttp.ClientError as exc:
            # Not reached, refused, reset, TLS handshake failed: transient as far as we know.
            raise ExportError("UNAVAILABLE", True, str(exc)) from exc
        if 200 <= status < 300:
            try:
                return ExportLogsServiceResponse.FromString(payload)
            except DecodeError:
                return ExportLogsServiceResponse()  # accepted; its partial success unreadable
        raise ExportError(
            f"HTTP_{status}",
            status in _HTTP_RETRYABLE,
            _status_message(payload, content_type),
            _retry_after(retry_after),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _status_message(payload: bytes, content_type: str) -> str:
    """The message of the google.rpc.Status an OTLP/HTTP error body carries (best effort)."""
    if content_type == PROTOBUF:
        try:
            return str(status_pb2.Status.FromString(payload).message)
        except DecodeError:
            return ""
    return payload[:200].decode("utf-8", "replace")


def _retry_after(value: str | None) -> float | None:
    """Retry-After: delay-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return max((when - datetime.datetime.now(datetime.UTC)).total_seconds(), 0.0)
