"""What both shells share: the options, the channel's credentials and settings, and the
plans they drive (one `Calls` per client)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, TypeAlias

import grpc

from trajgrade.client.plans import Call, Calls
from trajgrade.client.requests import METHODS, SuiteRef
from trajgrade.client.retry import Deadline, Retry, RetryPolicy
from trajgrade.client.stream import Open, StreamPlan, StreamState, stream_plan
from trajgrade.v1 import grader_service_pb2

PathOrBytes: TypeAlias = "bytes | str | os.PathLike[str]"

DEFAULT_TIMEOUT: Final = 30.0
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024  # the server's default max_message_bytes
DEFAULT_STREAM_WINDOW: Final = 1024
DEFAULT_STREAM_CHUNK: Final = 256
SERVICE: Final = "/trajgrade.v1.GraderService/"


def _read(value: PathOrBytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


@dataclass(frozen=True)
class _Options:
    target: str
    timeout: float | None
    retry: RetryPolicy
    metadata: tuple[tuple[str, str], ...]
    credentials: grpc.ChannelCredentials | None
    channel_options: tuple[tuple[str, Any], ...]
    stream_window: int
    stream_chunk: int


def _options(
    target: str,
    *,
    timeout: float | None,
    retry: RetryPolicy | None,
    token: str | None,
    tls: bool,
    root_certificates: PathOrBytes | None,
    certificate_chain: PathOrBytes | None,
    private_key: PathOrBytes | None,
    server_name: str | None,
    max_message_bytes: int,
    stream_window: int,
    stream_chunk: int,
    channel_options: Sequence[tuple[str, Any]],
) -> _Options:
    if (certificate_chain is None) != (private_key is None):
        raise ValueError("certificate_chain and private_key go together (mutual TLS)")
    if stream_window < 1:
        raise ValueError("stream_window must be at least 1")
    if stream_chunk < 1:
        raise ValueError("stream_chunk must be at least 1")
    secure = tls or any(
        v is not None for v in (root_certificates, certificate_chain, private_key, server_name)
    )
    credentials = None
    if secure:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(root_certificates),
            private_key=_read(private_key),
            certificate_chain=_read(certificate_chain),
        )
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        # Reconnect about as fast as the retry policy retries: gRPC's default first reconnect
        # back-off (1 s) would make early retries against a restarting server fail fast.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 2000),
    ]
    if server_name is not None:
        options.append(("grpc.ssl_target_name_override", server_name))
    options.extend(channel_options)
    metadata = () if token is None else (("authorization", f"Bearer {token}"),)
    return _Options(
        target=target,
        timeout=timeout,
        retry=retry or RetryPolicy(),
        metadata=metadata,
        credentials=credentials,
        channel_options=tuple(options),
        stream_window=stream_window,
        stream_chunk=stream_chunk,
    )


class Default:
    """The type of `DEFAULT`: "use the client's timeout" (None means no deadline)."""


DEFAULT: Final = Default()
Unset: TypeAlias = "float | Default | None"


class ClientBase:
    """What the two clients share: options, the channel, the plans (`Calls`: retries, the
    suite cache, the request encodings)."""

    _grpc: ClassVar[Any]  # the grpc or grpc.aio module

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        token: str | None = None,
        tls: bool = False,
        root_certificates: PathOrBytes | None = None,
        certificate_chain: PathOrBytes | None = None,
        private_key: PathOrBytes | None = None,
        server_name: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        stream_window: int = DEFAULT_STREAM_WINDOW,
        stream_chunk: int = DEFAULT_STREAM_CHUNK,
        channel_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._opts = _options(
            target,
            timeout=timeout,
            retry=retry,
            token=token,
            tls=tls,
            root_certificates=root_certificates,
            certificate_chain=certificate_chain,
            private_key=private_key,
            server_name=server_name,
            max_message_bytes=max_message_bytes,
            stream_window=stream_window,
            stream_chunk=stream_chunk,
            channel_options=channel_options,
        )
        self._calls = Calls(self._opts.retry)
        self._open()

    def _open(self) -> None:
        o = self._opts
        # grpc for the blocking client, grpc.aio for the asyncio one: same calls, same names.
        api = self._grpc
        if o.credentials is None:
            self._channel = api.insecure_channel(o.target, options=o.channel_options)
        else:
            self._channel = api.secure_channel(o.target, o.credentials, options=o.channel_options)
        self._unary = {
            name: self._channel.unary_unary(SERVICE + name, response_deserializer=decode)
            for name, decode in METHODS.items()
        }
        self._watch = self._channel.unary_stream(
            SERVICE + "WatchResults",
            response_deserializer=grader_service_pb2.WatchResultsResponse.FromString,
        )
        self._stream = self._channel.stream_stream(
            SERVICE + "StreamGradeTraces",
            response_deserializer=grader_service_pb2.StreamGradeTracesResponse.FromString,
        )

    @property
    def target(self) -> str:
        """The address this client dials (`host:port` or `unix:/path`)."""
        return self._opts.target

    def _chunk(self, chunk_size: int | None) -> int:
        if chunk_size is None:
            return self._opts.stream_chunk
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        return chunk_size

    def _deadline(self, timeout: Unset) -> Deadline:
        """The deadline of a unary method: `timeout`, or the client's when not given."""
        return Deadline.after(self._opts.timeout if isinstance(timeout, Default) else timeout)

    def _invoke(self, step: Call) -> Any:
        """The unary call a plan's step names (an awaitable in the asyncio client)."""
        return self._unary[step.method](
            step.request, timeout=step.timeout, metadata=self._opts.metadata
        )

    def _reopen(self, previous: Any, requests: Any, step: Open) -> Any:
        """A stream attempt's call, sending `requests`; the previous attempt's is cancelled."""
        if previous is not None:
            previous.cancel()
        return self._stream(requests, timeout=step.timeout, metadata=self._opts.metadata)

    def _stream_plan(
        self, ref: SuiteRef, deadline: Deadline, chunk_size: int | None
    ) -> tuple[StreamState, StreamPlan]:
        """A grade_stream's state and plan, the suite resolved to `ref`."""
        state = StreamState(ref, self._opts.stream_window, self._chunk(chunk_size))
        return state, stream_plan(state, Retry(self._opts.retry, deadline, self._calls.rng))
