"""The one table from exceptions to gRPC statuses (google.rpc.Status with ErrorInfo).

The exceptions are trajgrade.errors' (the client maps the statuses back to the same classes).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from trajgrade.errors import (
    CallCancelledError,
    CancelledError,
    DeadlineExceededError,
    InvalidRequestError,
    InvalidSuiteError,
    LimitExceededError,
    LiveGradingOffError,
    OverloadedError,
    ServiceError,
    ShuttingDownError,
    SuiteNotFoundError,
    UnauthenticatedError,
    with_details,
)

DOMAIN = "trajgrade"

# gRPC's default limit on received metadata is 8 KiB and the status details travel in a
# trailer, so a suite with thousands of problems must not produce an unbounded trailer.
MAX_REPORTED_PROBLEMS = 32
MAX_MESSAGE_CHARS = 2048

log = logging.getLogger("trajgrade.server")

# The server's old names for trajgrade.errors' classes: the same objects, for code written
# against them. New code uses the errors' names.
ServerError = ServiceError
RequestInvalidError = InvalidRequestError
SuiteUnknownError = SuiteNotFoundError
DeadlinePassedError = DeadlineExceededError
RequestCancelledError = CallCancelledError


@dataclass(frozen=True)
class _Row:
    code: grpc.StatusCode
    rpc_code: int


# The table (STYLE 6.4, SPEC 7). Order matters: the first matching class wins, so subclasses
# come before the classes they extend.
_TABLE: tuple[tuple[type[BaseException], _Row], ...] = (
    (InvalidSuiteError, _Row(grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT)),
    (InvalidRequestError, _Row(grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT)),
    (LimitExceededError, _Row(grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT)),
    (SuiteNotFoundError, _Row(grpc.StatusCode.NOT_FOUND, code_pb2.NOT_FOUND)),
    (OverloadedError, _Row(grpc.StatusCode.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED)),
    (DeadlineExceededError, _Row(grpc.StatusCode.DEADLINE_EXCEEDED, code_pb2.DEADLINE_EXCEEDED)),
    (CancelledError, _Row(grpc.StatusCode.CANCELLED, code_pb2.CANCELLED)),
    (CallCancelledError, _Row(grpc.StatusCode.CANCELLED, code_pb2.CANCELLED)),
    (ShuttingDownError, _Row(grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE)),
    (
        LiveGradingOffError,
        _Row(grpc.StatusCode.FAILED_PRECONDITION, code_pb2.FAILED_PRECONDITION),
    ),
    (UnauthenticatedError, _Row(grpc.StatusCode.UNAUTHENTICATED, code_pb2.UNAUTHENTICATED)),
)
_INTERNAL = _Row(grpc.StatusCode.INTERNAL, code_pb2.INTERNAL)
INTERNAL_MESSAGE = "internal error; the server log has the details"


def _row(exc: BaseException) -> _Row | None:
    for cls, row in _TABLE:
        if isinstance(exc, cls):
            return row
    return None


def _clip(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 1] + "…"


def to_status(exc: BaseException, *, rpc: str = "") -> grpc.Status:
    """The grpc.Status (with google.rpc.Status details) that answers a call that raised exc.

    Anything outside the table is an unexpected bug: the client gets INTERNAL and a generic
    message, the traceback goes to the log only.
    """
    row = _row(exc)
    if row is None:
        log.error("internal error in %s", rpc or "rpc", exc_info=exc)
        info = error_details_pb2.ErrorInfo(reason="INTERNAL", domain=DOMAIN)
        return _pack(_INTERNAL.rpc_code, INTERNAL_MESSAGE, [info])

    reason = str(getattr(exc, "reason_code", "") or type(exc).__name__.upper())
    field = str(getattr(exc, "field", "") or "")
    message = str(getattr(exc, "message", "") or exc)
    metadata: dict[str, str] = {"field": field}
    extra = getattr(exc, "metadata", None)
    if isinstance(extra, dict):
        metadata.update({str(k): str(v) for k, v in extra.items()})
    details: list[object] = []

    problems = getattr(exc, "problems", None)
    if isinstance(exc, InvalidSuiteError) and problems:
        listed = [(str(f), str(m)) for f, m in problems]
        metadata["problems"] = str(len(listed))
        if not field:
            metadata["field"] = listed[0][0]
        shown = listed[:MAX_REPORTED_PROBLEMS]
        more = len(listed) - len(shown)
        message = "invalid suite: " + "; ".join(f"{f}: {m}" for f, m in shown)
        if more:
            message += f"; and {more} more"
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(field=f, description=_clip(m))
                    for f, m in shown
                ]
            )
        )
    retry_after_ms = metadata.get("retry_after_ms")
    if retry_after_ms is not None:
        # The standard form of the same hint (gRPC clients and proxies read RetryInfo).
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromMilliseconds(int(retry_after_ms))
        details.append(retry)
    info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata)
    return _pack(row.rpc_code, _clip(message), [info, *details])


def _pack(code: int, message: str, details: list[object]) -> grpc.Status:
    packed = []
    for detail in details:
        any_detail = any_pb2.Any()
        any_detail.Pack(detail)  # type: ignore[arg-type]
        packed.append(any_detail)
    return rpc_status.to_status(status_pb2.Status(code=code, message=message, details=packed))


def error_info(trailing_metadata: Any) -> error_details_pb2.ErrorInfo | None:
    """The ErrorInfo in a failed call's trailing metadata (as to_status put it there)."""
    for key, value in trailing_metadata or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            parsed = status_pb2.Status.FromString(value)
            for detail in parsed.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    return info
    return None


def invalid_request(message: str, *, field: str = "") -> InvalidRequestError:
    """A request the server refuses before it reaches the core (reason INVALID_REQUEST)."""
    return with_details(InvalidRequestError(message), reason_code="INVALID_REQUEST", field=field)


def suite_not_found(message: str, *, field: str = "suite_id") -> SuiteNotFoundError:
    """A suite_id this server does not hold (reason SUITE_NOT_FOUND, as the core's)."""
    return with_details(SuiteNotFoundError(message), reason_code="SUITE_NOT_FOUND", field=field)
