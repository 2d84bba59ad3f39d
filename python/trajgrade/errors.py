"""The trajgrade exception classes (defined in the Rust binding), re-exported."""

from trajgrade._core import (
    InternalError,
    InvalidRequestError,
    InvalidSuiteError,
    LimitExceededError,
    SuiteNotFoundError,
    TrajgradeError,
)

__all__ = [
    "InternalError",
    "InvalidRequestError",
    "InvalidSuiteError",
    "LimitExceededError",
    "SuiteNotFoundError",
    "TrajgradeError",
]
