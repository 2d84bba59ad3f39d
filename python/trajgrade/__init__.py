"""trajgrade: deterministic grading of AI-agent tool-call trajectories."""

from trajgrade._core import Grader, Limits, __version__
from trajgrade.errors import (
    InternalError,
    InvalidRequestError,
    InvalidSuiteError,
    LimitExceededError,
    SuiteNotFoundError,
    TrajgradeError,
)
from trajgrade.grading import CompiledSuite, compile_suite, default_grader
from trajgrade.results import LazyGradeResult
from trajgrade.suites import load_suite
from trajgrade.traces import trace_bytes

__all__ = [
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
    "trace_bytes",
]
