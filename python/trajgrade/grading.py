"""The public grading API: `compile_suite(...)` → `CompiledSuite` with `.grade` / `.grade_batch`."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from trajgrade import _core
from trajgrade._core import Grader, TrajgradeError
from trajgrade.suites import SuiteInput, load_suite
from trajgrade.traces import TraceInput, trace_bytes
from trajgrade.v1 import result_pb2, suite_pb2

_default: Grader | None = None
_default_lock = threading.Lock()
_TRACES_INDEX = re.compile(r"^traces\[\d+\]")


def default_grader() -> Grader:
    """The process-wide grader (threads from `TRAJGRADE_GRADE_THREADS`, default: one per core)."""
    global _default  # noqa: PLW0603 -- one lazily built grader per process, by design
    with _default_lock:
        if _default is None:
            _default = Grader(threads=int(os.environ.get("TRAJGRADE_GRADE_THREADS", "0")))
        return _default


class CompiledSuite:
    """A validated, compiled suite. Immutable and safe to share between threads."""

    __slots__ = ("_inner",)

    def __init__(self, inner: _core.CompiledSuite) -> None:
        self._inner = inner

    @property
    def suite_id(self) -> str:
        """Content hash of the canonical suite (`s1-` + 32 hex digits), equal on every replica."""
        return self._inner.suite_id

    @property
    def suite(self) -> suite_pb2.Suite:
        """The suite as compiled."""
        return suite_pb2.Suite.FromString(self._inner.suite_bytes())

    def grade(self, trace: TraceInput) -> result_pb2.GradeResult:
        """Grades one trace (message, bytes, dict or JSON text).

        Raises `InvalidRequestError` / `LimitExceededError` for a trace that cannot be graded.
        """
        return result_pb2.GradeResult.FromString(self._inner.grade(trace_bytes(trace)))

    def grade_batch(
        self, traces: Iterable[TraceInput]
    ) -> list[result_pb2.GradeResult | result_pb2.ItemError]:
        """Grades many traces in parallel (the GIL is released); one outcome per trace, in order.

        A trace that cannot be graded becomes that item's `ItemError`; the others are graded.
        Each graded trace's result is a `LazyGradeResult`: a `GradeResult` decoded on first
        use. `bytes` go to the core as they are and plain dicts are encoded by the core.
        """
        items = traces if isinstance(traces, list) else list(traces)
        # LazyGradeResults, made by the binding; a GradeResult to every reader.
        outcomes: list[Any]
        outcomes, errors = self._inner.grade_inputs(items, _prepare)
        for i in errors:
            raw = outcomes[i]
            if isinstance(raw, bytes):  # the core's ItemError (else: what _prepare returned)
                error = result_pb2.ItemError.FromString(raw)
                # The core numbers items within its call; report the caller's index.
                error.field = _TRACES_INDEX.sub(f"traces[{i}]", error.field)
                outcomes[i] = error
        return outcomes

    def __repr__(self) -> str:
        return f"CompiledSuite(suite_id={self.suite_id!r})"


def _prepare(i: int, trace: TraceInput) -> bytes | result_pb2.ItemError:
    """An item the binding does not take as it is: its `Trace` bytes, or its `ItemError`."""
    try:
        return trace_bytes(trace, f"traces[{i}]")
    except TrajgradeError as exc:
        return _item_error(exc, trace)


def _item_error(exc: TrajgradeError, trace: object) -> result_pb2.ItemError:
    trace_id = trace.get("id") if isinstance(trace, Mapping) else None
    return result_pb2.ItemError(
        trace_id=trace_id if isinstance(trace_id, str) else "",
        reason_code=exc.reason_code,
        field=exc.field,
        message=exc.message or str(exc),
    )


def compile_suite(
    suite: SuiteInput,
    *,
    grader: Grader | None = None,
    format: str = "auto",
    allow_unsupported: bool = False,
) -> CompiledSuite:
    """Validates and compiles a suite: a `Suite` message, its bytes, JSON or YAML text, a dict,
    or a file path, in any suite format (native, Orbit, promptfoo, ADK: detected, or named by
    `format`; see docs/suite-formats.md). Raises `InvalidSuiteError` naming the field of the
    problem; parts of another format that cannot be converted are errors unless
    `allow_unsupported=True` leaves them out.
    """
    message = load_suite(suite, format=format, allow_unsupported=allow_unsupported)
    core = (grader or default_grader()).compile_suite(message.SerializeToString(deterministic=True))
    return CompiledSuite(core)
