"""The local engine: grade chunks in-process with the core's batch path (GIL released)."""

from __future__ import annotations

from collections.abc import Iterator

from trajgrade import _core
from trajgrade.regrade.source import ArrowChunk, Chunk, LinesChunk
from trajgrade.regrade.summary import DEFAULT_FAILURE_SAMPLE


class LocalBackend:
    """Grades each chunk on the grader's own thread pool.

    Raw chunks (raw_input) go to the core whole: blocks of JSON lines (native JSONL, or
    Parquet rows as JSON lines) that it splits, decodes, grades and writes as rows in one call
    (grade_jsonl_block), counting what the summary needs and writing the error rows (`file:line
    N`, its own message); Parquet batches in the native schema the same way from their Arrow
    buffers (grade_arrow_block). Other chunks are serialized Traces for
    CompiledSuite.grade_batch, whose outcomes the core writes and counts the same way
    (_core.outcome_block). Every chunk leaves with `graded` set.
    """

    raw_input = True

    def __init__(self, suite_bytes: bytes, threads: int = 0) -> None:
        self._grader = _core.Grader(threads=threads)
        self._suite = self._grader.compile_suite(suite_bytes)
        self.suite_id = self._suite.suite_id
        # Failing rows of a block the core marks for the summary's sample (the pipeline sets 0
        # once the sample is full); any block then holds every sampled row that it can.
        self.max_failing = DEFAULT_FAILURE_SAMPLE
        # Rows also as Arrow columns (set for Parquet output).
        self.arrow = False

    def grade(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """Each chunk with the core's block (rows and counts) filled in, in order."""
        for chunk in chunks:
            if isinstance(chunk, LinesChunk):
                source, first, unit = chunk.origin()
                chunk.graded = self._grader.grade_jsonl_block(
                    self._suite, chunk.block, chunk.start, chunk.stop, self.max_failing,
                    source, first, unit, self.arrow,
                )  # fmt: skip
            elif isinstance(chunk, ArrowChunk):
                source, first, _ = chunk.origin()
                chunk.graded = self._grader.grade_arrow_block(
                    self._suite, chunk.batch.num_rows, chunk.columns, self.max_failing,
                    source, first, self.arrow,
                )  # fmt: skip
            else:
                traces = [item for item in chunk.items if isinstance(item, bytes)]
                chunk.outcomes = self._suite.grade_batch(traces) if traces else []
                chunk.graded = chunk.block(self.suite_id, self.max_failing, self.arrow)
            yield chunk

    @property
    def suite(self) -> _core.CompiledSuite:
        """The compiled suite (bound to this backend's grader)."""
        return self._suite

    def close(self) -> None:
        """Nothing to release: the grader's pool goes with the object."""
