"""The local engine: grade chunks in-process with the core's batch path (GIL released)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from trajgrade import _core
from trajgrade._core import BlockMark, JsonlBlock
from trajgrade.regrade.arrowcols import Buffers
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.output import failure_row, jsonl_line, outcome_row
from trajgrade.regrade.source import ArrowChunk, Chunk, Graded, LinesChunk, ReadFailure
from trajgrade.regrade.summary import DEFAULT_FAILURE_SAMPLE
from trajgrade.regrade.tracejson import TraceJsonError, peek_trace_id, trace_bytes

_FIRST_TRACE = re.compile(r"^traces\[0\]")


class LocalBackend:
    """Grades each chunk on the grader's own thread pool.

    Raw chunks (raw_input) go to the core whole: blocks of JSON lines (native JSONL, or
    Parquet rows as JSON lines) that it splits, decodes, grades and writes as rows in one call
    (grade_jsonl_block), counting what the summary needs; Parquet batches in the native schema
    the same way from their Arrow buffers (grade_arrow_block). Other chunks are serialized
    Traces for CompiledSuite.grade_batch.
    """

    raw_input = True

    def __init__(self, suite_bytes: bytes, threads: int = 0) -> None:
        self._grader = _core.Grader(threads=threads)
        self._suite = self._grader.compile_suite(suite_bytes)
        self.suite_id = self._suite.suite_id
        # Failing rows of a block the core marks for the summary's sample (the pipeline sets 0
        # once the sample is full); any block then holds every sampled row that it can.
        self.max_failing = DEFAULT_FAILURE_SAMPLE

    def grade(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """Each chunk with its outcomes (or, for raw chunks, what the core made of it) filled
        in, in order."""
        for chunk in chunks:
            if isinstance(chunk, LinesChunk):
                chunk.graded = self.grade_jsonl(
                    chunk.block, chunk.start, chunk.stop, chunk.field_of
                )
            elif isinstance(chunk, ArrowChunk):
                chunk.graded = self.grade_arrow(chunk.batch, chunk.columns, chunk.field_of)
            else:
                traces = [item for item in chunk.items if isinstance(item, bytes)]
                chunk.outcomes = self._suite.grade_batch(traces) if traces else []
            yield chunk

    def grade_jsonl(
        self, data: bytes, start: int, stop: int, where: Callable[[BlockMark], str]
    ) -> Graded:
        """The whole JSON lines data[start:stop] in one core call: the core's block, its rows
        with the error rows rewritten by _fixed_row (`where(mark)` naming the line), and those
        rewritten rows by item."""
        graded = self._grader.grade_jsonl_block(self._suite, data, start, stop, self.max_failing)
        return self._rewrite_errors(
            graded, lambda mark: data[start + mark.text_start : start + mark.text_end], where
        )

    def grade_arrow(
        self, batch: Any, columns: dict[str, Buffers], where: Callable[[BlockMark], str]
    ) -> Graded:
        """As grade_jsonl for a Parquet batch read from its Arrow buffers (arrowcols); error
        rows are rewritten from the batch's JSON lines (arrowjson), as the other path reads
        them."""
        graded = self._grader.grade_arrow_block(
            self._suite, batch.num_rows, columns, self.max_failing
        )
        lines: list[bytes] = []

        def line_of(mark: BlockMark) -> bytes:
            if not lines:
                batch_lines = json_lines(batch)
                assert batch_lines is not None  # arrowcols takes a subset of its layouts
                lines.extend(batch_lines)
            return lines[mark.item]

        return self._rewrite_errors(graded, line_of, where)

    def _rewrite_errors(
        self,
        graded: JsonlBlock,
        line_of: Callable[[BlockMark], bytes],
        where: Callable[[BlockMark], str],
    ) -> Graded:
        rows, fixed = graded.rows, {}
        errors = [mark for mark in graded.marks if mark.error]
        if errors:
            pieces, done = [], 0
            for mark in errors:
                fixed[mark.item] = self._fixed_row(line_of(mark), where(mark))
                pieces += [rows[done : mark.row_start], fixed[mark.item]]
                done = mark.row_end
            pieces.append(rows[done:])
            rows = b"".join(pieces)
        return Graded(graded, rows, fixed)

    def _fixed_row(self, line: bytes, where: str) -> bytes:
        """The (rare) row of a line the core could not grade, as documented: the line decoded
        again by the Python path (the protobuf JSON mapping, exactly as before), giving its
        error row with `where` (`file:line N`) as the field and json_format's message, or
        its graded row if that path accepts it."""
        try:
            payload = trace_bytes(line)
        except TraceJsonError as exc:
            failure = ReadFailure(peek_trace_id(line), where, str(exc))
            return jsonl_line(failure_row(failure, self.suite_id))
        fixed = outcome_row(self._suite.grade_batch([payload])[0], self.suite_id)
        if fixed["error"] is not None:
            error = fixed["error"]
            error["field"] = _FIRST_TRACE.sub(where, error["field"])
        return jsonl_line(fixed)

    @property
    def suite(self) -> _core.CompiledSuite:
        """The compiled suite (bound to this backend's grader)."""
        return self._suite

    def close(self) -> None:
        """Nothing to release: the grader's pool goes with the object."""
