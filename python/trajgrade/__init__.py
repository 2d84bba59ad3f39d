"""trajgrade: deterministic grading of AI-agent tool-call trajectories."""

from trajgrade._core import Grader, Limits, __version__
from trajgrade.errors import (
    CancelledError,
    InternalError,
    InvalidRequestError,
    InvalidSuiteError,
    LimitExceededError,
    SuiteNotFoundError,
    TrajgradeError,
)
from trajgrade.grading import CompiledSuite, compile_suite, default_grader
from trajgrade.results import LazyGradeResult
from trajgrade.suites import load_suite, load_suites
from trajgrade.traces import trace_bytes

__all__ = [
    "CancelledError",
    "CompiledSuite",
    "Grader",
    "InternalError",
    "InvalidRequestError",
    "InvalidSuiteError",
    "LazyGradeResult",
    "LimitExceededError",
    "Limits",
    "SuiteNotFoundError",
    "TrajgradeError",
    "__version__",
    "compile_suite",
    "default_grader",
    "load_suite",
    "load_suites",
    "trace_bytes",
]
