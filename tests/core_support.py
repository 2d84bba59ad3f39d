"""What the Rust core grades today, probed once: a test that needs `scope.per_turn` expects a
failure (strict xfail) while the core rejects it, and must pass once it does."""

from __future__ import annotations

import functools

import pytest
import trajgrade


@functools.cache
def grades_per_turn() -> bool:
    try:
        trajgrade.compile_suite(
            {"assertions": [{"tool_called": {"tool": "a"}, "scope": {"per_turn": True}}]}
        )
    except trajgrade.InvalidSuiteError:
        return False
    return True


needs_per_turn = pytest.mark.xfail(
    condition=not grades_per_turn(),
    reason="the core rejects scope (per_turn)",
    strict=True,
)
