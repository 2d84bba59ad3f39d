"""The trajgrade exception classes (defined in the Rust binding), re-exported."""

from trajgrade._core import (
    CancelledError,
    InternalError,
    InvalidRequestError,
    InvalidSuiteError,
    LimitExceededError,
    SuiteNotFoundError,
    TrajgradeError,
)

__all__ = [
    "CancelledError",
    "InternalError",
    "InvalidRequestError",
    "InvalidSuiteError",
    "LimitExceededError",
    "SuiteNotFoundError",
    "TrajgradeError",
]
