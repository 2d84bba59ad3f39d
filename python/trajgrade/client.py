"""The Python client of `trajgrade.v1.GraderService`: `Client` (blocking) and `AsyncClient`.

Both take the same options and have the same methods (`register_suite`, `get_suite`, `grade`,
`grade_batch`, `grade_stream`); docs/api.md describes them. Behaviour that matters in
production:

* Suites travel by `suite_id`. A suite is registered once per client and its id cached by
  content. A replica that answers NOT_FOUND for that id (a fresh replica behind a load
  balancer, or one whose LRU dropped it) gets the suite inline in the same call, so a fleet of
  stateless replicas needs no sticky sessions.
* Every call has a deadline (`timeout`, default 30 s; `grade_stream` has none unless given).
  UNAVAILABLE, RESOURCE_EXHAUSTED when the server has no capacity (queue full, too many
  calls: never sooner than its retry-after), and CANCELLED from gRPC before any handler saw
  the call are retried with exponential back-off and jitter, within the deadline and at most
  `RetryPolicy.max_attempts` times. Grading is a pure function, so every RPC is safe to
  repeat.
* `grade_stream` sends `stream_chunk` traces (default 256) per StreamGradeTraces message; the
  server grades each chunk as one batch, so a stream runs at batch speed rather than at gRPC's
  per-message rate. `chunk_size=1` sends the single-trace form that older servers understand.
* A failed call raises a `trajgrade` exception (`InvalidSuiteError` with `field` and
  `problems`, `SuiteNotFoundError`, ...): `_STATUS_TABLE` below is server/status.py inverted.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import re
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeAlias

import grpc
from google.rpc import error_details_pb2, status_pb2

from trajgrade._core import (
    InternalError,
    InvalidRequestError,
    InvalidSuiteError,
    LimitExceededError,
    SuiteNotFoundError,
    TrajgradeError,
)
from trajgrade.suites import SuiteInput, load_suite
from trajgrade.traces import TraceInput, trace_bytes
from trajgrade.v1 import grader_service_pb2, result_pb2, suite_pb2
from trajgrade.wire import length_delimited as _field

__all__ = [
    "AsyncClient",
    "CancelledError",
    "Client",
    "DeadlineExceededError",
    "Outcome",
    "ResourceExhaustedError",
    "RetryPolicy",
    "ServiceError",
    "UnauthenticatedError",
    "UnavailableError",
]

Outcome: TypeAlias = "result_pb2.GradeResult | result_pb2.ItemError"
"""What one trace of a batch or stream yields: its result, or why it was not graded."""

PathOrBytes: TypeAlias = "bytes | str | os.PathLike[str]"

DEFAULT_TIMEOUT: Final = 30.0
DEFAULT_MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024  # the server's default max_message_bytes
DEFAULT_STREAM_WINDOW: Final = 1024
DEFAULT_STREAM_CHUNK: Final = 256
_SERVICE: Final = "/trajgrade.v1.GraderService/"
_SUITE_ID = re.compile(r"^s1-[0-9a-f]{32}$")
_TRACES_INDEX = re.compile(r"^traces\[(\d+)\]")
_SUITE_CACHE_SIZE: Final = 1024


# --- errors --------------------------------------------------------------------------------------


class ServiceError(TrajgradeError):
    """A whole-call failure with no library counterpart (the server or the network said no).

    `code` is the gRPC status code; `reason_code`, `field` and `metadata` come from the
    status's `google.rpc.ErrorInfo` when the server sent one.
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN
    metadata: Mapping[str, str] = {}


class UnavailableError(ServiceError):
    """UNAVAILABLE: no server reachable, or it is shutting down (retried)."""


class ResourceExhaustedError(ServiceError):
    """RESOURCE_EXHAUSTED: the grading queue is full (retried) or a message is too large."""


class DeadlineExceededError(ServiceError):
    """DEADLINE_EXCEEDED: the call's deadline passed; never a partial answer."""


class UnauthenticatedError(ServiceError):
    """UNAUTHENTICATED: missing or wrong bearer token."""


class CancelledError(ServiceError):
    """CANCELLED by the server side: gRPC dropped the call before any handler saw it (its
    backlog overflowed, or the server stopped); retried."""


# Reason codes of the core's LimitExceededError; the server sends them as INVALID_ARGUMENT.
_LIMIT_REASONS: Final = (
    "TRACE_TOO_LARGE",
    "TOO_MANY_CALLS",
    "ARGUMENT_TOO_LARGE",
    "SUITE_TOO_LARGE",
    "TOO_MANY_TRACES",
)

# server/status.py's table, inverted: (code, ErrorInfo.reason or None for any) → exception.
# The first matching row wins; anything else is a plain ServiceError.
_STATUS_TABLE: Final[tuple[tuple[grpc.StatusCode, str | None, type[TrajgradeError]], ...]] = (
    (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_SUITE", InvalidSuiteError),
    *((grpc.StatusCode.INVALID_ARGUMENT, reason, LimitExceededError) for reason in _LIMIT_REASONS),
    (grpc.StatusCode.INVALID_ARGUMENT, None, InvalidRequestError),
    (grpc.StatusCode.NOT_FOUND, None, SuiteNotFoundError),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, None, ResourceExhaustedError),
    (grpc.StatusCode.DEADLINE_EXCEEDED, None, DeadlineExceededError),
    (grpc.StatusCode.UNAVAILABLE, None, UnavailableError),
    (grpc.StatusCode.UNAUTHENTICATED, None, UnauthenticatedError),
    (grpc.StatusCode.CANCELLED, None, CancelledError),
    (grpc.StatusCode.INTERNAL, None, InternalError),
)


def _status_details(
    trailing: Any,
) -> tuple[error_details_pb2.ErrorInfo | None, error_details_pb2.BadRequest | None]:
    info: error_details_pb2.ErrorInfo | None = None
    bad: error_details_pb2.BadRequest | None = None
    for key, value in trailing or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        for detail in status_pb2.Status.FromString(value).details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
            elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                bad = error_details_pb2.BadRequest()
                detail.Unpack(bad)
    return info, bad


def error_from_rpc(error: grpc.RpcError) -> TrajgradeError:
    """The trajgrade exception for a failed call (`error` is a grpc.Call as well)."""
    code: grpc.StatusCode = error.code()
    message: str = error.details() or code.name
    info, bad = _status_details(error.trailing_metadata())
    reason = info.reason if info is not None else ""
    cls: type[TrajgradeError] = ServiceError
    for row_code, row_reason, row_cls in _STATUS_TABLE:
        if row_code == code and row_reason in (None, reason):
            cls = row_cls
            break
    exc = cls(message)
    metadata = dict(info.metadata) if info is not None else {}
    exc.reason_code = reason or code.name
    exc.field = metadata.get("field", "")
    exc.message = message
    if isinstance(exc, ServiceError):
        exc.code = code
        exc.metadata = metadata
    if isinstance(exc, InvalidSuiteError):
        exc.problems = (
            [(v.field, v.description) for v in bad.field_violations]
            if bad is not None
            else [(exc.field, message)]
        )
    return exc


# --- retries -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with jitter for UNAVAILABLE, an overloaded server and CANCELLED
    before any handler ran (`retryable`); never sooner than the server's retry-after.

    Attempt n (n >= 2) waits `min(max_backoff, initial_backoff * multiplier ** (n - 2))`, minus
    up to `jitter` of it at random; retrying stops after `max_attempts` attempts or when the
    wait would pass the call's deadline, and the last error is raised.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 3.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter is a fraction between 0 and 1")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """The wait before attempt `attempt + 1`, after `attempt` failed attempts."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return base * (1.0 - self.jitter * rng.random())


NO_RETRY: Final = RetryPolicy(max_attempts=1)


# RESOURCE_EXHAUSTED reasons that mean "no capacity now" (a message over the size limit,
# RESOURCE_EXHAUSTED without a reason, would be refused again).
_OVERLOAD_REASONS: Final = ("QUEUE_FULL", "TOO_MANY_RPCS")
_LOCAL_CANCEL: Final = ("Locally cancelled", "Channel closed")


def retryable(error: TrajgradeError, *, answered: bool = False) -> bool:
    """UNAVAILABLE always; RESOURCE_EXHAUSTED only when the server had no capacity (queue
    full, too many calls); CANCELLED only when no handler of the server answered (no
    ErrorInfo) and, for a stream, no answer came back in that attempt (`answered`)."""
    if isinstance(error, UnavailableError):
        return True
    if isinstance(error, CancelledError):
        local = error.message.startswith(_LOCAL_CANCEL)  # this client cancelled or closed it
        return not answered and not error.metadata and not local
    return isinstance(error, ResourceExhaustedError) and error.reason_code in _OVERLOAD_REASONS


def lost_status(rpc_error: grpc.RpcError) -> bool:
    """A stream's INTERNAL that grpc.aio made up on the client: a write issued after the server
    ended the call replaces the server's status (grpc/grpc issue 36066). Our server's own
    INTERNAL always carries an ErrorInfo; this one has none and gRPC's fixed message. The real
    status is unknown (a drain's UNAVAILABLE, typically), so the stream is retried."""
    if rpc_error.code() != grpc.StatusCode.INTERNAL:
        return False
    details = rpc_error.details() or ""
    trailing = rpc_error.trailing_metadata() or ()
    has_status = any(key == "grpc-status-details-bin" for key, _ in trailing)
    return details.startswith("Internal error from Core") and not has_status


def retry_after(error: TrajgradeError) -> float:
    """The server's retry-after hint in seconds (ErrorInfo `retry_after_ms`), else 0."""
    metadata = error.metadata if isinstance(error, ServiceError) else {}
    try:
        return max(int(metadata.get("retry_after_ms", "0")), 0) / 1000.0
    except ValueError:
        return 0.0


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


# --- requests ------------------------------------------------------------------------------------


@dataclass
class _SuiteRef:
    """A suite as the client sends it: by id, or inline when a replica does not know the id."""

    suite_id: str | None
    encoded: bytes | None  # serialized Suite (deterministic), None when only the id is known

    def fields(self, inline_number: int, id_number: int, *, inline: bool) -> bytes:
        if inline or self.suite_id is None:
            assert self.encoded is not None
            return _field(inline_number, self.encoded)
        return _field(id_number, self.suite_id.encode("utf-8"))


class _SuiteCache:
    """Suite content → id (and back), bounded; shared by every thread of one client."""

    def __init__(self, size: int = _SUITE_CACHE_SIZE) -> None:
        self._size = size
        self._ids: OrderedDict[bytes, str] = OrderedDict()
        self._suites: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def ref(self, suite: SuiteInput) -> _SuiteRef:
        if isinstance(suite, str) and _SUITE_ID.match(suite):
            with self._lock:
                return _SuiteRef(suite, self._suites.get(suite))
        encoded = load_suite(suite).SerializeToString(deterministic=True)
        key = hashlib.sha256(encoded).digest()
        with self._lock:
            suite_id = self._ids.get(key)
            if suite_id is not None:
                self._ids.move_to_end(key)
        return _SuiteRef(suite_id, encoded)

    def remember(self, ref: _SuiteRef, suite_id: str) -> None:
        ref.suite_id = suite_id
        if ref.encoded is None:
            return
        with self._lock:
            self._ids[hashlib.sha256(ref.encoded).digest()] = suite_id
            self._suites[suite_id] = ref.encoded
            for cache in (self._ids, self._suites):
                while len(cache) > self._size:
                    cache.popitem(last=False)

    def encoded(self, suite_id: str) -> bytes | None:
        with self._lock:
            return self._suites.get(suite_id)


def _item_error(exc: TrajgradeError, trace: object, field_path: str) -> result_pb2.ItemError:
    trace_id = trace.get("id") if isinstance(trace, Mapping) else getattr(trace, "id", "")
    return result_pb2.ItemError(
        trace_id=trace_id if isinstance(trace_id, str) else "",
        reason_code=exc.reason_code or "INVALID_TRACE",
        field=exc.field or field_path,
        message=exc.message or str(exc),
    )


@dataclass
class _Batch:
    """A batch split into traces to send and traces that failed to encode here."""

    slots: list[Outcome | None]
    payloads: list[bytes]
    origin: list[int]

    @classmethod
    def of(cls, traces: Iterable[TraceInput]) -> _Batch:
        batch = cls([], [], [])
        for i, trace in enumerate(traces):
            try:
                batch.payloads.append(trace_bytes(trace, f"traces[{i}]"))
            except TrajgradeError as exc:
                batch.slots.append(_item_error(exc, trace, f"traces[{i}]"))
                continue
            batch.origin.append(i)
            batch.slots.append(None)
        return batch

    def request(self, ref: _SuiteRef, *, inline: bool) -> bytes:
        head = ref.fields(1, 2, inline=inline)
        return head + b"".join(_field(3, p) for p in self.payloads)

    def outcomes(self, response: grader_service_pb2.BatchGradeTracesResponse) -> list[Outcome]:
        if len(response.outcomes) != len(self.origin):
            raise _protocol_error(f"{len(response.outcomes)} outcomes for {len(self.origin)}")
        for i, outcome in zip(self.origin, response.outcomes, strict=True):
            if outcome.WhichOneof("outcome") == "error":
                # The server numbers items within the request; report the caller's index.
                outcome.error.field = _TRACES_INDEX.sub(f"traces[{i}]", outcome.error.field)
                self.slots[i] = outcome.error
            else:
                self.slots[i] = outcome.result
        return [s for s in self.slots if s is not None]


def _protocol_error(what: str) -> InternalError:
    exc = InternalError(f"unexpected answer from the server: {what}")
    exc.reason_code = "PROTOCOL_ERROR"
    exc.message = str(exc)
    return exc


def _outcome(outcome: result_pb2.TraceOutcome) -> Outcome:
    kind = outcome.WhichOneof("outcome")
    if kind == "result":
        return outcome.result
    if kind == "error":
        return outcome.error
    raise _protocol_error("a stream outcome with neither result nor error")


def _outcomes(response: grader_service_pb2.StreamGradeTracesResponse) -> list[Outcome]:
    """The outcomes of one stream answer: a chunk's `outcomes`, or a single trace's `outcome`."""
    if len(response.outcomes):
        return [_outcome(o) for o in response.outcomes]
    return [_outcome(response.outcome)]


class _Stream:
    """State of one grade_stream across attempts: the traces sent and not yet answered.

    `pending` holds, in order, every trace taken from the source whose outcome has not been
    yielded: its encoded bytes (sent, or to be sent again after a reconnect) or the ItemError
    it got here. Sequence numbers are absolute, so each attempt's request iterator resumes at
    the first unanswered trace.
    """

    def __init__(self, ref: _SuiteRef, window: int, chunk: int) -> None:
        self.ref = ref
        self.window = window
        self.chunk = chunk  # traces per message; 1 sends the single-trace form
        self.inline = False
        self.pending: deque[bytes | result_pb2.ItemError] = deque()
        self.first_seq = 0  # sequence number of pending[0]
        self.taken = 0  # traces taken from the source so far
        self.exhausted = False
        self.epoch = 0
        self.unanswered = 0  # encoded entries in pending
        self.source_error: BaseException | None = None  # raised by the caller's iterable

    def take(self, trace: TraceInput) -> None:
        index = self.taken
        self.taken += 1
        try:
            self.pending.append(trace_bytes(trace, f"traces[{index}]"))
            self.unanswered += 1
        except TrajgradeError as exc:
            self.pending.append(_item_error(exc, trace, f"traces[{index}]"))

    def entry(self, seq: int) -> bytes | result_pb2.ItemError | None:
        offset = seq - self.first_seq
        return self.pending[offset] if 0 <= offset < len(self.pending) else None

    def request(self, payloads: list[bytes], first: bool) -> bytes:
        """One StreamGradeTracesRequest: `trace` when chunks are off, else the chunk `traces`."""
        head = self.ref.fields(2, 3, inline=self.inline) if first else b""
        if self.chunk == 1:
            (payload,) = payloads
            return _field(1, payload) + head
        return b"".join([_field(4, p) for p in payloads]) + head

    def answer(self, outcome: Outcome) -> list[Outcome]:
        """The outcomes now due, in order: errors made here, then this answer's trace."""
        due: list[Outcome] = []
        while self.pending and isinstance(self.pending[0], result_pb2.ItemError):
            due.append(self.pop_error())
        if not self.pending:
            raise _protocol_error("more stream outcomes than traces")
        self.pending.popleft()
        if isinstance(outcome, result_pb2.ItemError):
            # The server numbers a chunk's traces within the message; sequence numbers are
            # the caller's indexes.
            outcome.field = _TRACES_INDEX.sub(f"traces[{self.first_seq}]", outcome.field)
        self.first_seq += 1
        self.unanswered -= 1
        due.append(outcome)
        return due

    def pop_error(self) -> result_pb2.ItemError:
        head = self.pending.popleft()
        self.first_seq += 1
        assert isinstance(head, result_pb2.ItemError)
        return head

    def tail(self) -> list[Outcome]:
        """After the server closed the stream normally: the remaining local errors."""
        if self.source_error is not None:
            raise self.source_error
        if self.unanswered:
            raise _protocol_error(f"stream ended with {self.unanswered} traces unanswered")
        due: list[Outcome] = []
        while self.pending:
            due.append(self.pop_error())
        return due

    @property
    def finished(self) -> bool:
        return self.exhausted and not self.pending


# --- channels ------------------------------------------------------------------------------------


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
    rng: random.Random = field(default_factory=random.Random, compare=False)


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


class _Default:
    """The type of `_DEFAULT`: "use the client's timeout" (None means no deadline)."""


_DEFAULT: Final = _Default()
_Unset: TypeAlias = "float | _Default | None"


class _ClientBase:
    """What the two clients share: options, the suite cache, the request encodings."""

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
        self._suites = _SuiteCache()
        self._open()

    def _open(self) -> None:
        raise NotImplementedError

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

    def _call_deadline(self, timeout: _Unset) -> float | None:
        return _deadline(self._opts.timeout if isinstance(timeout, _Default) else timeout)

    def _wait(
        self,
        attempt: int,
        error: TrajgradeError,
        deadline: float | None,
        *,
        answered: bool = False,
        lost: bool = False,
    ) -> float | None:
        """Seconds to sleep before retrying, or None to give up and raise `error`: the jittered
        back-off, but never less than the server's retry-after. `lost`: see lost_status."""
        if attempt >= self._opts.retry.max_attempts:
            return None
        if not lost and not retryable(error, answered=answered):
            return None
        delay = max(self._opts.retry.backoff(attempt, self._opts.rng), retry_after(error))
        left = _remaining(deadline)
        if left is not None and delay >= left:
            return None
        return delay


_METHODS: Final = {
    "GradeTrace": grader_service_pb2.GradeTraceResponse.FromString,
    "BatchGradeTraces": grader_service_pb2.BatchGradeTracesResponse.FromString,
    "RegisterSuite": grader_service_pb2.RegisterSuiteResponse.FromString,
    "GetSuite": grader_service_pb2.GetSuiteResponse.FromString,
    "ImportSuite": grader_service_pb2.ImportSuiteResponse.FromString,
}


def _import_request(text: str, format: str, skip_unsupported: bool, name: str) -> bytes:
    return grader_service_pb2.ImportSuiteRequest(
        format=format, text=text, skip_unsupported=skip_unsupported, name=name
    ).SerializeToString()


# --- blocking client -----------------------------------------------------------------------------


class Client(_ClientBase):
    """Blocking client; thread-safe (share one per process). Use as a context manager or
    call `close()`.

    `target` is `host:port` or `unix:/path`. `timeout` (seconds, None for none) is the default
    deadline of each unary call, retries included; every method takes `timeout=` to override
    it. `token` adds `authorization: Bearer <token>`. TLS: `tls=True` with the system roots,
    or `root_certificates` (PEM bytes or a path); mutual TLS adds `certificate_chain` and
    `private_key`; `server_name` overrides the name checked in the server certificate.
    """

    def _open(self) -> None:
        o = self._opts
        if o.credentials is None:
            self._channel = grpc.insecure_channel(o.target, options=o.channel_options)
        else:
            self._channel = grpc.secure_channel(o.target, o.credentials, options=o.channel_options)
        self._unary = {
            name: self._channel.unary_unary(_SERVICE + name, response_deserializer=decode)
            for name, decode in _METHODS.items()
        }
        self._stream = self._channel.stream_stream(
            _SERVICE + "StreamGradeTraces",
            response_deserializer=grader_service_pb2.StreamGradeTracesResponse.FromString,
        )

    def close(self) -> None:
        """Close the channel (calls in progress are cancelled)."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, method: str, request: bytes, deadline: float | None) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._unary[method](
                    request, timeout=_remaining(deadline), metadata=self._opts.metadata
                )
            except grpc.RpcError as rpc_error:
                error = error_from_rpc(rpc_error)
                delay = self._wait(attempt, error, deadline)
                if delay is None:
                    raise error from rpc_error
                time.sleep(delay)

    def _register(self, ref: _SuiteRef, deadline: float | None) -> str:
        assert ref.encoded is not None
        response = self._call("RegisterSuite", _field(1, ref.encoded), deadline)
        suite_id: str = response.suite_id
        self._suites.remember(ref, suite_id)
        return suite_id

    def _by_id(self, suite: SuiteInput, deadline: float | None) -> _SuiteRef:
        ref = self._suites.ref(suite)
        if ref.suite_id is None:
            self._register(ref, deadline)
        return ref

    def register_suite(self, suite: SuiteInput, *, timeout: _Unset = _DEFAULT) -> str:
        """Validates, compiles and keeps the suite on the server; returns its `suite_id`.

        Raises InvalidSuiteError (`field` = first problem, `problems` = all of them).
        """
        ref = self._suites.ref(suite)
        if ref.encoded is None:
            raise TypeError("register_suite needs the suite itself, not only its id")
        return self._register(ref, self._call_deadline(timeout))

    def get_suite(self, suite_id: str, *, timeout: _Unset = _DEFAULT) -> suite_pb2.Suite:
        """The suite registered under `suite_id`.

        A replica that does not hold it answers NOT_FOUND; if this client registered that id,
        its own copy is returned instead (the id is a hash of the content, so it is the same
        suite). Otherwise SuiteNotFoundError is raised.
        """
        request = grader_service_pb2.GetSuiteRequest(suite_id=suite_id).SerializeToString()
        try:
            response = self._call("GetSuite", request, self._call_deadline(timeout))
        except SuiteNotFoundError:
            known = self._suites.encoded(suite_id)
            if known is None:
                raise
            return suite_pb2.Suite.FromString(known)
        suite: suite_pb2.Suite = response.suite
        return suite

    def import_suite(
        self,
        text: str,
        *,
        format: str = "auto",
        skip_unsupported: bool = False,
        name: str = "",
        timeout: _Unset = _DEFAULT,
    ) -> grader_service_pb2.ImportSuiteResponse:
        """Converts a suite file's text (Orbit, promptfoo, ADK or native; `format` to force one)
        on the server and registers it: the response holds the native `suite`, its `suite_id`
        and what was left out (`unsupported`, with `skip_unsupported=True`). `name` picks one
        suite of a source holding several. Raises InvalidSuiteError naming each problem.
        """
        request = _import_request(text, format, skip_unsupported, name)
        response: grader_service_pb2.ImportSuiteResponse = self._call(
            "ImportSuite", request, self._call_deadline(timeout)
        )
        self._suites.remember(self._suites.ref(response.suite), response.suite_id)
        return response

    def grade(
        self, trace: TraceInput, suite: SuiteInput, *, timeout: _Unset = _DEFAULT
    ) -> result_pb2.GradeResult:
        """Grades one trace (message, dict, JSON text or bytes) against `suite` (message, dict,
        path, JSON/YAML text, bytes, or a `suite_id` this client or the server knows).

        A trace that cannot be graded raises InvalidRequestError or LimitExceededError.
        """
        deadline = self._call_deadline(timeout)
        ref = self._by_id(suite, deadline)
        encoded = _field(1, trace_bytes(trace))
        try:
            response = self._call("GradeTrace", encoded + ref.fields(2, 3, inline=False), deadline)
        except SuiteNotFoundError:
            if ref.encoded is None:
                raise
            response = self._call("GradeTrace", encoded + ref.fields(2, 3, inline=True), deadline)
        result: result_pb2.GradeResult = response.result
        return result

    def grade_batch(
        self, traces: Iterable[TraceInput], suite: SuiteInput, *, timeout: _Unset = _DEFAULT
    ) -> list[Outcome]:
        """Grades many traces in one call: one GradeResult or ItemError per trace, in order.

        At most the server's `max_batch_items` (default 10,000) traces per call.
        """
        deadline = self._call_deadline(timeout)
        ref = self._by_id(suite, deadline)
        batch = _Batch.of(traces)
        if not batch.payloads:
            return batch.outcomes(grader_service_pb2.BatchGradeTracesResponse())
        try:
            response = self._call("BatchGradeTraces", batch.request(ref, inline=False), deadline)
        except SuiteNotFoundError:
            if ref.encoded is None:
                raise
            response = self._call("BatchGradeTraces", batch.request(ref, inline=True), deadline)
        return batch.outcomes(response)

    def grade_stream(
        self,
        traces: Iterable[TraceInput],
        suite: SuiteInput,
        *,
        timeout: float | None = None,
        chunk_size: int | None = None,
    ) -> Iterator[Outcome]:
        """Grades traces over one StreamGradeTraces call, yielding outcomes in input order.

        Traces go out in chunks of `chunk_size` (default: the client's `stream_chunk`, 256)
        per message, each graded by the server as one batch; a chunk is sent when full, when
        the input ends, or when `stream_window` traces are waiting for answers. `chunk_size=1`
        sends one trace per message (the form servers without chunks understand). Traces are
        read lazily, at most `stream_window` ahead of the outcomes. If the stream breaks with
        UNAVAILABLE (or a full queue) it is reopened and the unanswered traces are sent again;
        a replica that does not know the suite gets it inline. `timeout` bounds the whole
        stream (default: none).
        """
        deadline = _deadline(timeout)
        state = _Stream(
            self._by_id(suite, deadline), self._opts.stream_window, self._chunk(chunk_size)
        )
        return self._run_stream(state, iter(traces), deadline)

    def _run_stream(
        self, state: _Stream, source: Iterator[TraceInput], deadline: float | None
    ) -> Iterator[Outcome]:
        feed = _SyncFeed(state, source)
        cond = feed.cond
        attempt = 0
        try:
            while True:
                with cond:
                    epoch = state.epoch
                call = self._stream(
                    feed.requests(epoch), timeout=_remaining(deadline), metadata=self._opts.metadata
                )
                answered = False
                try:
                    for response in call:
                        with cond:
                            due = [d for o in _outcomes(response) for d in state.answer(o)]
                            cond.notify_all()
                        attempt = 0  # progress: the attempt budget is for consecutive failures
                        answered = True
                        yield from due
                    with cond:
                        due = state.tail()
                    yield from due
                    if state.finished:
                        return
                    raise _protocol_error("stream closed before every trace was sent")
                except grpc.RpcError as rpc_error:
                    error = error_from_rpc(rpc_error)
                    with cond:
                        state.epoch += 1
                        cond.notify_all()
                    if isinstance(error, SuiteNotFoundError) and not state.inline:
                        if state.ref.encoded is None:
                            raise error from rpc_error
                        state.inline = True
                        continue
                    attempt += 1
                    delay = self._wait(
                        attempt, error, deadline, answered=answered, lost=lost_status(rpc_error)
                    )
                    if delay is None:
                        raise error from rpc_error
                    time.sleep(delay)
                finally:
                    call.cancel()
        finally:
            with cond:
                state.epoch += 1
                cond.notify_all()


# --- asyncio client ------------------------------------------------------------------------------


class AsyncClient(_ClientBase):
    """The asyncio twin of `Client` (same options, same methods, awaitable).

    Create it inside the event loop that uses it; `await client.close()` or `async with`.
    `grade_stream` accepts a sync or async iterable and is an async iterator of outcomes.
    """

    def _open(self) -> None:
        o = self._opts
        if o.credentials is None:
            self._channel = grpc.aio.insecure_channel(o.target, options=o.channel_options)
        else:
            self._channel = grpc.aio.secure_channel(
                o.target, o.credentials, options=o.channel_options
            )
        self._unary = {
            name: self._channel.unary_unary(_SERVICE + name, response_deserializer=decode)
            for name, decode in _METHODS.items()
        }
        self._stream = self._channel.stream_stream(
            _SERVICE + "StreamGradeTraces",
            response_deserializer=grader_service_pb2.StreamGradeTracesResponse.FromString,
        )

    async def close(self) -> None:
        """Close the channel (calls in progress are cancelled)."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _call(self, method: str, request: bytes, deadline: float | None) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._unary[method](
                    request, timeout=_remaining(deadline), metadata=self._opts.metadata
                )
            except grpc.RpcError as rpc_error:
                error = error_from_rpc(rpc_error)
                delay = self._wait(attempt, error, deadline)
                if delay is None:
                    raise error from rpc_error
                await asyncio.sleep(delay)

    async def _register(self, ref: _SuiteRef, deadline: float | None) -> str:
        assert ref.encoded is not None
        response = await self._call("RegisterSuite", _field(1, ref.encoded), deadline)
        suite_id: str = response.suite_id
        self._suites.remember(ref, suite_id)
        return suite_id

    async def _by_id(self, suite: SuiteInput, deadline: float | None) -> _SuiteRef:
        ref = self._suites.ref(suite)
        if ref.suite_id is None:
            await self._register(ref, deadline)
        return ref

    async def register_suite(self, suite: SuiteInput, *, timeout: _Unset = _DEFAULT) -> str:
        """See `Client.register_suite`."""
        ref = self._suites.ref(suite)
        if ref.encoded is None:
            raise TypeError("register_suite needs the suite itself, not only its id")
        return await self._register(ref, self._call_deadline(timeout))

    async def get_suite(self, suite_id: str, *, timeout: _Unset = _DEFAULT) -> suite_pb2.Suite:
        """See `Client.get_suite`."""
        request = grader_service_pb2.GetSuiteRequest(suite_id=suite_id).SerializeToString()
        try:
            response = await self._call("GetSuite", request, self._call_deadline(timeout))
        except SuiteNotFoundError:
            known = self._suites.encoded(suite_id)
            if known is None:
                raise
            return suite_pb2.Suite.FromString(known)
        suite: suite_pb2.Suite = response.suite
        return suite

    async def import_suite(
        self,
        text: str,
        *,
        format: str = "auto",
        skip_unsupported: bool = False,
        name: str = "",
        timeout: _Unset = _DEFAULT,
    ) -> grader_service_pb2.ImportSuiteResponse:
        """See `Client.import_suite`."""
        request = _import_request(text, format, skip_unsupported, name)
        response: grader_service_pb2.ImportSuiteResponse = await self._call(
            "ImportSuite", request, self._call_deadline(timeout)
        )
        self._suites.remember(self._suites.ref(response.suite), response.suite_id)
        return response

    async def grade(
        self, trace: TraceInput, suite: SuiteInput, *, timeout: _Unset = _DEFAULT
    ) -> result_pb2.GradeResult:
        """See `Client.grade`."""
        deadline = self._call_deadline(timeout)
        ref = await self._by_id(suite, deadline)
        encoded = _field(1, trace_bytes(trace))
        try:
            response = await self._call(
                "GradeTrace", encoded + ref.fields(2, 3, inline=False), deadline
            )
        except SuiteNotFoundError:
            if ref.encoded is None:
                raise
            response = await self._call(
                "GradeTrace", encoded + ref.fields(2, 3, inline=True), deadline
            )
        result: result_pb2.GradeResult = response.result
        return result

    async def grade_batch(
        self, traces: Iterable[TraceInput], suite: SuiteInput, *, timeout: _Unset = _DEFAULT
    ) -> list[Outcome]:
        """See `Client.grade_batch`."""
        deadline = self._call_deadline(timeout)
        ref = await self._by_id(suite, deadline)
        batch = _Batch.of(traces)
        if not batch.payloads:
            return batch.outcomes(grader_service_pb2.BatchGradeTracesResponse())
        try:
            response = await self._call(
                "BatchGradeTraces", batch.request(ref, inline=False), deadline
            )
        except SuiteNotFoundError:
            if ref.encoded is None:
                raise
            response = await self._call(
                "BatchGradeTraces", batch.request(ref, inline=True), deadline
            )
        return batch.outcomes(response)

    async def grade_stream(
        self,
        traces: Iterable[TraceInput] | AsyncIterable[TraceInput],
        suite: SuiteInput,
        *,
        timeout: float | None = None,
        chunk_size: int | None = None,
    ) -> AsyncIterator[Outcome]:
        """See `Client.grade_stream`: `async for outcome in client.grade_stream(...)`."""
        deadline = _deadline(timeout)
        state = _Stream(
            await self._by_id(suite, deadline), self._opts.stream_window, self._chunk(chunk_size)
        )
        feed = _AsyncFeed(state, traces)
        attempt = 0
        try:
            while True:
                call = self._stream(
                    feed.requests(state.epoch),
                    timeout=_remaining(deadline),
                    metadata=self._opts.metadata,
                )
                answered = False
                try:
                    async for response in call:
                        due = [d for o in _outcomes(response) for d in state.answer(o)]
                        feed.space.set()
                        attempt = 0
                        answered = True
                        for outcome in due:
                            yield outcome
                    for outcome in state.tail():
                        yield outcome
                    if state.finished:
                        return
                    raise _protocol_error("stream closed before every trace was sent")
                except grpc.RpcError as rpc_error:
                    error = error_from_rpc(rpc_error)
                    state.epoch += 1
                    feed.space.set()
                    if isinstance(error, SuiteNotFoundError) and not state.inline:
                        if state.ref.encoded is None:
                            raise error from rpc_error
                        state.inline = True
                        continue
                    attempt += 1
                    delay = self._wait(
                        attempt, error, deadline, answered=answered, lost=lost_status(rpc_error)
                    )
                    if delay is None:
                        raise error from rpc_error
                    await asyncio.sleep(delay)
                finally:
                    call.cancel()
        finally:
            state.epoch += 1
            feed.space.set()
            feed.pump.cancel()


_WOULD_WAIT: Final = result_pb2.ItemError()  # a sentinel entry: the window is full
_Entry: TypeAlias = "bytes | result_pb2.ItemError | None"


class _SyncFeed:
    """The request iterators of one blocking grade_stream (gRPC runs them on its own thread)."""

    def __init__(self, state: _Stream, source: Iterator[TraceInput]) -> None:
        self.state = state
        self.source = source
        self.cond = threading.Condition()

    def _next_entry(self, seq: int, epoch: int, *, block: bool) -> _Entry:  # noqa: PLR0911 - one exit per case
        """Entry `seq`, taking a trace from the source if needed; None ends this iterator.

        With `block` False, a full window answers _WOULD_WAIT instead of waiting (the caller
        sends its partial chunk first: its outcomes are what would free the window).
        """
        state = self.state
        with self.cond:
            if state.epoch != epoch:
                return None
            entry = state.entry(seq)
            if entry is not None or state.exhausted:
                return entry
            if state.unanswered >= state.window and not block:
                return _WOULD_WAIT
            while state.unanswered >= state.window and state.epoch == epoch:
                self.cond.wait()
            if state.epoch != epoch:
                return None
            try:
                state.take(next(self.source))
            except StopIteration:
                state.exhausted = True
                return None
            except Exception as exc:  # the caller's iterable failed: end the stream cleanly
                state.source_error = exc
                state.exhausted = True
                return None
            return state.entry(seq)

    def requests(self, epoch: int) -> Iterator[bytes]:
        """Attempt `epoch`: the unanswered traces again, then new ones from the source."""
        state = self.state
        seq = state.first_seq
        first = True
        chunk: list[bytes] = []
        while True:
            entry = self._next_entry(seq, epoch, block=not chunk)
            if entry is None:
                break
            if entry is _WOULD_WAIT or len(chunk) == state.chunk:
                yield state.request(chunk, first)
                first = False
                chunk = []
                continue
            seq += 1
            if isinstance(entry, bytes):
                chunk.append(entry)
        if chunk and state.epoch == epoch:
            yield state.request(chunk, first)


class _AsyncFeed:
    """The request iterators of one async grade_stream, fed by a pump task.

    One pump reads the caller's iterable, so a reconnect never interrupts the caller's
    generator mid-item; the request iterators take traces from its queue.
    """

    def __init__(
        self, state: _Stream, traces: Iterable[TraceInput] | AsyncIterable[TraceInput]
    ) -> None:
        self.state = state
        self.space = asyncio.Event()
        self.queue: asyncio.Queue[tuple[TraceInput] | Exception | None] = asyncio.Queue(1)
        self.pump = asyncio.get_running_loop().create_task(_pump(traces, self.queue))

    async def requests(self, epoch: int) -> AsyncIterator[bytes]:
        """Attempt `epoch`: the unanswered traces again, then new ones from the queue."""
        state = self.state
        seq = state.first_seq
        first = True
        chunk: list[bytes] = []
        while state.epoch == epoch:
            if len(chunk) == state.chunk:
                yield state.request(chunk, first)
                first = False
                chunk = []
            entry = state.entry(seq)
            if entry is None:
                if state.exhausted:
                    break
                if state.unanswered >= state.window and chunk:
                    # Send the partial chunk: its answers are what will free the window.
                    yield state.request(chunk, first)
                    first = False
                    chunk = []
                    continue
                while state.unanswered >= state.window:
                    self.space.clear()
                    await self.space.wait()
                    if state.epoch != epoch:
                        return
                item = await self.queue.get()
                if not isinstance(item, tuple):
                    state.source_error = item
                    state.exhausted = True
                    break
                state.take(item[0])  # no await between get and take: nothing is lost
                entry = state.entry(seq)
            seq += 1
            if isinstance(entry, bytes):
                chunk.append(entry)
        if chunk and state.epoch == epoch:
            yield state.request(chunk, first)


async def _pump(
    traces: Iterable[TraceInput] | AsyncIterable[TraceInput],
    queue: asyncio.Queue[tuple[TraceInput] | Exception | None],
) -> None:
    """Feeds the caller's traces to the stream; None at the end, or the iterable's error."""
    try:
        if isinstance(traces, AsyncIterable):
            async for trace in traces:
                await queue.put((trace,))
        else:
            for trace in traces:
                await queue.put((trace,))
    except Exception as exc:  # delivered in order, after the traces already read
        await queue.put(exc)
        return
    await queue.put(None)
