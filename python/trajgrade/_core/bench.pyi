"""Stub of `trajgrade._core.bench`: entry points only benchmarks and tests call, never the
package (docs/internals/core-api.md). Each grades on the grader that compiled `suite`, with the
GIL released."""

from collections.abc import Mapping

from trajgrade._core import CancelToken, CompiledSuite
from typing_extensions import Buffer

__all__ = [
    "decode_only",
    "grade_arrow_traces_to_json",
    "grade_json_traces",
    "grade_json_traces_to_json",
    "grade_traces",
]

def grade_traces(
    suite: CompiledSuite, traces: list[bytes], cancel: CancelToken | None = None
) -> list[bytes]:
    """Serialized `Trace`s against `suite` → one serialized `TraceOutcome` each; once `cancel`
    is cancelled, traces not yet graded are `CANCELLED` item errors."""

def grade_json_traces(suite: CompiledSuite, lines: list[bytes]) -> list[bytes]:
    """Protobuf-JSON `Trace` lines → one `TraceOutcome` each (a bad line → its ItemError)."""

def grade_json_traces_to_json(suite: CompiledSuite, lines: list[bytes]) -> list[bytes]:
    """As `grade_json_traces`, but each output is the regrade JSONL row, newline included."""

def grade_arrow_traces_to_json(
    suite: CompiledSuite,
    rows: int,
    columns: Mapping[str, tuple[int, int, Buffer | None, Buffer | None, Buffer | None, bool]],
) -> list[bytes]:
    """Arrow buffers of native trace rows → regrade JSONL rows; bad buffers: ValueError."""

def decode_only(traces: list[bytes]) -> int:
    """Benchmark floor: prost-decode each `Trace` (one thread, no grading); count decoded."""
