"""gRPC statuses → trajgrade exceptions, and which of them are worth another attempt.

Sans-IO: a failed call is read through its `code()`, `details()` and `trailing_metadata()`
accessors only. The table is server/status.py's, inverted; both sides use trajgrade.errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError
from google.rpc import code_pb2, error_details_pb2, status_pb2

from trajgrade.errors import (
    CallCancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidRequestError,
    InvalidSuiteError,
    LimitExceededError,
    LiveGradingOffError,
    QueueFullError,
    ResourceExhaustedError,
    ServiceError,
    ShuttingDownError,
    SuiteNotFoundError,
    TooManyRpcsError,
    TrajgradeError,
    UnauthenticatedError,
    UnavailableError,
    WatcherTooSlowError,
    with_details,
)

# Reason codes of the core's LimitExceededError; the server sends them as INVALID_ARGUMENT.
_LIMIT_REASONS: Final = (
    "TRACE_TOO_LARGE",
    "TOO_MANY_CALLS",
    "ARGUMENT_TOO_LARGE",
    "SUITE_TOO_LARGE",
    "TOO_MANY_TRACES",
    "WORK_LIMIT_EXCEEDED",
)

_Code = grpc.StatusCode
# (code, ErrorInfo.reason or None for any) → exception. The first matching row wins; anything
# else is a plain ServiceError.
STATUS_TABLE: Final[tuple[tuple[grpc.StatusCode, str | None, type[TrajgradeError]], ...]] = (
    (_Code.INVALID_ARGUMENT, "INVALID_SUITE", InvalidSuiteError),
    *((_Code.INVALID_ARGUMENT, reason, LimitExceededError) for reason in _LIMIT_REASONS),
    (_Code.INVALID_ARGUMENT, None, InvalidRequestError),
    (_Code.NOT_FOUND, None, SuiteNotFoundError),
    (_Code.RESOURCE_EXHAUSTED, "QUEUE_FULL", QueueFullError),
    (_Code.RESOURCE_EXHAUSTED, "TOO_MANY_RPCS", TooManyRpcsError),
    (_Code.RESOURCE_EXHAUSTED, "WATCHER_TOO_SLOW", WatcherTooSlowError),
    (_Code.RESOURCE_EXHAUSTED, None, ResourceExhaustedError),
    (_Code.DEADLINE_EXCEEDED, None, DeadlineExceededError),
    (_Code.UNAVAILABLE, "SHUTTING_DOWN", ShuttingDownError),
    (_Code.UNAVAILABLE, None, UnavailableError),
    (_Code.UNAUTHENTICATED, None, UnauthenticatedError),
    (_Code.FAILED_PRECONDITION, "LIVE_GRADING_OFF", LiveGradingOffError),
    (_Code.FAILED_PRECONDITION, None, FailedPreconditionError),
    (_Code.CANCELLED, None, CallCancelledError),
    (_Code.INTERNAL, None, InternalError),
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


def error_from_status(code: grpc.StatusCode, message: str, trailing: Any) -> TrajgradeError:
    """The trajgrade exception for a status: its code, message and trailing metadata (where
    the server puts its google.rpc.Status details)."""
    info, bad = _status_details(trailing)
    reason = info.reason if info is not None else ""
    cls: type[TrajgradeError] = ServiceError
    for row_code, row_reason, row_cls in STATUS_TABLE:
        if row_code == code and row_reason in (None, reason):
            cls = row_cls
            break
    metadata = dict(info.metadata) if info is not None else {}
    exc = with_details(
        cls(message), reason_code=reason or code.name, field=metadata.get("field", "")
    )
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


def error_from_rpc(error: grpc.RpcError) -> TrajgradeError:
    """The trajgrade exception for a failed call (`error` is a grpc.Call as well)."""
    code: grpc.StatusCode = error.code()
    return error_from_status(code, error.details() or code.name, error.trailing_metadata())


def protocol_error(what: str) -> InternalError:
    """The server answered something this client cannot read (a bug on one side)."""
    return with_details(
        InternalError(f"unexpected answer from the server: {what}"), reason_code="PROTOCOL_ERROR"
    )


def lost_status(rpc_error: grpc.RpcError) -> bool:
    """A stream's INTERNAL that grpc.aio made up on the client: a write issued after the server
    ended the call replaces the server's status (grpc/grpc issue 36066). Our server's own
    INTERNAL always carries an ErrorInfo; this one has none and gRPC's fixed message. The real
    status is unknown (a drain's UNAVAILABLE, typically), so the stream is retried."""
    if rpc_error.code() != grpc.StatusCode.INTERNAL:
        return False
    details = rpc_error.details() or ""
    if not details.startswith("Internal error from Core"):
        return False
    trailing = rpc_error.trailing_metadata() or ()
    packed = [v for k, v in trailing if k == "grpc-status-details-bin" and isinstance(v, bytes)]
    if not packed:
        return True
    # The server's own status can arrive in the trailers and still be replaced by the made-up
    # INTERNAL (a drain's SHUTTING_DOWN while the client writes): lost unless that status is
    # itself an INTERNAL (a bug the server reports: never retried) or unreadable.
    try:
        code = status_pb2.Status.FromString(packed[-1]).code
    except DecodeError:
        return False
    return code not in (code_pb2.OK, code_pb2.INTERNAL)


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
    if isinstance(error, CallCancelledError):
        local = error.message.startswith(_LOCAL_CANCEL)  # this client cancelled or closed it
        return not answered and not error.metadata and not local
    return isinstance(error, ResourceExhaustedError) and error.reason_code in _OVERLOAD_REASONS


def retry_after(error: TrajgradeError) -> float:
    """The server's retry-after hint in seconds (ErrorInfo `retry_after_ms`), else 0."""
    metadata = error.metadata if isinstance(error, ServiceError) else {}
    try:
        return max(int(metadata.get("retry_after_ms", "0")), 0) / 1000.0
    except ValueError:
        return 0.0


@dataclass(frozen=True)
class Failed:
    """A failed call as a shell hands it to the core: the exception to raise, whether gRPC
    lost the real status (`lost_status`), and the gRPC error it came from (`cause`)."""

    error: TrajgradeError
    lost: bool
    cause: BaseException

    @classmethod
    def of(cls, rpc_error: grpc.RpcError) -> Failed:
        return cls(error_from_rpc(rpc_error), lost_status(rpc_error), rpc_error)
