"""The trajgrade exception classes: one hierarchy for the library, the server and the client.

The grading errors are the core's (defined in the Rust binding, re-exported here). A whole
call that fails for another reason (the server has no capacity, the deadline passed, the
token is wrong, the network is down) is a `ServiceError`: the server raises it and maps it to
its gRPC status (server/status.py), and the client raises the same class when that status
comes back (trajgrade.client).

Old names, kept as aliases of the one class (the same object, not a copy):
`trajgrade.client.CancelledError` is `CallCancelledError`; the server's `ServerError`,
`RequestInvalidError`, `SuiteUnknownError`, `DeadlinePassedError` and
`RequestCancelledError` (server/status.py) are `ServiceError`, `InvalidRequestError`,
`SuiteNotFoundError`, `DeadlineExceededError` and `CallCancelledError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, TypeVar

from trajgrade._core import (
    CancelledError,
    InternalError,
    InvalidRequestError,
    InvalidSuiteError,
    LimitExceededError,
    SuiteNotFoundError,
    TrajgradeError,
)

if TYPE_CHECKING:
    import grpc

__all__ = [
    "CallCancelledError",
    "CancelledError",
    "DeadlineExceededError",
    "InternalError",
    "InvalidRequestError",
    "InvalidSuiteError",
    "LimitExceededError",
    "OverloadedError",
    "QueueFullError",
    "ResourceExhaustedError",
    "ServiceError",
    "ShuttingDownError",
    "SuiteNotFoundError",
    "TooManyRpcsError",
    "TrajgradeError",
    "UnauthenticatedError",
    "UnavailableError",
    "with_details",
]

_E = TypeVar("_E", bound=TrajgradeError)


def with_details(exc: _E, *, reason_code: str, field: str = "") -> _E:
    """`exc` with the attributes every TrajgradeError carries, as the core sets them: how the
    server and the client make a core class (whose constructor takes only the message)."""
    exc.reason_code = reason_code
    exc.field = field
    exc.message = str(exc)
    return exc


class ServiceError(TrajgradeError):
    """A whole-call failure with no grading counterpart: the server or the network said no.

    `code` is the gRPC status code (`status_name` of the class unless the client saw
    another); `reason_code`, `field` and `metadata` are the status's `google.rpc.ErrorInfo`
    (the server sends `metadata` such as `retry_after_ms`).
    """

    status_name: ClassVar[str] = "UNKNOWN"
    reason_code = "SERVER_ERROR"
    metadata: Mapping[str, str] = {}

    def __init__(self, message: str = "", *, field: str = "", **metadata: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.metadata = metadata
        self.code: grpc.StatusCode = _status_code(self.status_name)


def _status_code(name: str) -> grpc.StatusCode:
    # Imported here so that `import trajgrade` (the library alone) does not load gRPC.
    import grpc  # noqa: PLC0415

    code: grpc.StatusCode = grpc.StatusCode[name]
    return code


class UnavailableError(ServiceError):
    """UNAVAILABLE: no server reachable, or it is shutting down (the client retries)."""

    status_name = "UNAVAILABLE"
    reason_code = "UNAVAILABLE"


class ShuttingDownError(UnavailableError):
    """The server is draining and accepts no new work."""

    reason_code = "SHUTTING_DOWN"


class ResourceExhaustedError(ServiceError):
    """RESOURCE_EXHAUSTED: the server has no capacity now (retried) or a message is too large
    (not retried)."""

    status_name = "RESOURCE_EXHAUSTED"
    reason_code = "RESOURCE_EXHAUSTED"


class OverloadedError(ResourceExhaustedError):
    """The server refused the call for lack of capacity; safe to retry after `retry_after_ms`."""

    reason_code = "OVERLOADED"


class QueueFullError(OverloadedError):
    """The batch queue is at its bound; nothing was accepted."""

    reason_code = "QUEUE_FULL"


class TooManyRpcsError(OverloadedError):
    """More GraderService calls in flight than max_concurrent_rpcs; this one was refused."""

    reason_code = "TOO_MANY_RPCS"


class WatcherTooSlowError(OverloadedError):
    """A WatchResults caller fell `watch_queue_size` results behind and was cut; grading never
    waits for a watcher. Reconnect (results graded meanwhile are in the JSONL sink)."""

    reason_code = "WATCHER_TOO_SLOW"


class FailedPreconditionError(ServiceError):
    """FAILED_PRECONDITION: the server is not set up for this call."""

    status_name = "FAILED_PRECONDITION"
    reason_code = "FAILED_PRECONDITION"


class LiveGradingOffError(FailedPreconditionError):
    """WatchResults on a server started without an OTLP receiver (--otlp-grpc/--otlp-http)."""

    reason_code = "LIVE_GRADING_OFF"


class DeadlineExceededError(ServiceError):
    """DEADLINE_EXCEEDED: the call's deadline passed before it was answered; never a partial
    answer. (The server's old name: DeadlinePassedError.)"""

    status_name = "DEADLINE_EXCEEDED"
    reason_code = "DEADLINE_EXCEEDED"


class UnauthenticatedError(ServiceError):
    """UNAUTHENTICATED: the bearer token is missing or wrong."""

    status_name = "UNAUTHENTICATED"
    reason_code = "UNAUTHENTICATED"


class CallCancelledError(ServiceError):
    """CANCELLED: the call was cancelled before it was answered; by the caller (the server
    says so with an ErrorInfo), or by gRPC before any handler saw it (its backlog overflowed,
    or the server stopped; no ErrorInfo, and the client retries). Not the core's
    `CancelledError` (a CancelToken was cancelled). (Old names: `trajgrade.client.
    CancelledError`, the server's RequestCancelledError.)"""

    status_name = "CANCELLED"
    reason_code = "CANCELLED"
