"""The local engine: grade chunks in-process with the core's batch path (GIL released)."""

from __future__ import annotations

from collections.abc import Iterator

from trajgrade import _core
from trajgrade.regrade.source import Chunk


class LocalBackend:
    """Grades each chunk with CompiledSuite.grade_batch on the grader's own thread pool."""

    def __init__(self, suite_bytes: bytes, threads: int = 0) -> None:
        self._grader = _core.Grader(threads=threads)
        self._suite = self._grader.compile_suite(suite_bytes)
        self.suite_id = self._suite.suite_id

    def grade(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """Each chunk with its outcomes filled in (one per trace item, in order)."""
        for chunk in chunks:
            traces = [item for item in chunk.items if isinstance(item, bytes)]
            chunk.outcomes = self._suite.grade_batch(traces) if traces else []
            yield chunk

    def close(self) -> None:
        """Nothing to release: the grader's pool goes with the object."""
