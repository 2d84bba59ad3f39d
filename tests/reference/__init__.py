"""Pure-Python reference model of the trajgrade SPEC (test oracle; see model.py)."""

from .model import InvalidSuite, NotModelled, Suite, compile_suite

__all__ = ["InvalidSuite", "NotModelled", "Suite", "compile_suite"]
