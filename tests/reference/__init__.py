"""Pure-Python reference model of the trajgrade SPEC (test oracle; see model.py)."""

from .model import InvalidSuiteError, NotModelledError, Suite, compile_suite

__all__ = ["InvalidSuiteError", "NotModelledError", "Suite", "compile_suite"]
