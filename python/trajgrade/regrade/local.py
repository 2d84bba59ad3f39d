"""The local engine: grade chunks in-process with the core's batch path (GIL released)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import cast

from trajgrade import _core
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.output import ERROR_MARKER, failure_row, jsonl_line, outcome_row
from trajgrade.regrade.source import Chunk, ReadFailure
from trajgrade.regrade.summary import DEFAULT_FAILURE_SAMPLE
from trajgrade.regrade.tracejson import TraceJsonError, peek_trace_id, trace_bytes

_FIRST_TRACE = re.compile(r"^traces\[0\]")


class LocalBackend:
    """Grades each chunk on the grader's own thread pool.

    Native JSONL arrives as blocks of whole lines (jsonl_blocks) that the core splits, decodes,
    grades and writes as rows in one call (grade_jsonl_block), counting what the summary needs;
    lines from Parquet (raw_lines) go to grade_json_traces_to_json; Parquet chunks with Arrow
    buffers (arrowcols) are read by the core from those buffers; other chunks are serialized
    Traces for CompiledSuite.grade_batch.
    """

    raw_lines = True
    jsonl_blocks = True

    def __init__(self, suite_bytes: bytes, threads: int = 0) -> None:
        self._grader = _core.Grader(threads=threads)
        self._suite = self._grader.compile_suite(suite_bytes)
        self.suite_id = self._suite.suite_id
        # Failing rows of a block the core marks for the summary's sample (the pipeline sets 0
        # once the sample is full); any block then holds every sampled row that it can.
        self.max_failing = DEFAULT_FAILURE_SAMPLE

    def grade(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """Each chunk with its outcomes (or, for raw lines, its rows) filled in, in order."""
        for chunk in chunks:
            if chunk.block is not None:
                self._grade_block(chunk)
                yield chunk
                continue
            if chunk.arrow_columns is not None:
                chunk.rows = self._grader.grade_arrow_traces_to_json(
                    self._suite, chunk.batch.num_rows, chunk.arrow_columns
                )
                self._fix_errors(chunk, chunk.rows)
                yield chunk
                continue
            if chunk.raw_lines:
                # Raw chunks hold only lines (source.read_chunks): no per-item filtering.
                lines = cast("list[bytes]", chunk.items)
                chunk.rows = self._grader.grade_json_traces_to_json(self._suite, lines)
                self._fix_errors(chunk, chunk.rows)
                yield chunk
                continue
            traces = [item for item in chunk.items if isinstance(item, bytes)]
            chunk.outcomes = self._suite.grade_batch(traces) if traces else []
            yield chunk

    def _grade_block(self, chunk: Chunk) -> None:
        """A JSONL block in one core call; its error rows rewritten as _fix_errors does."""
        assert chunk.block is not None
        graded = self._grader.grade_jsonl_block(
            self._suite, chunk.block, chunk.start, chunk.stop, self.max_failing
        )
        chunk.graded, rows = graded, graded.rows
        errors = [mark for mark in graded.marks if mark.error]
        if errors:
            pieces, done = [], 0
            for mark in errors:
                start = chunk.start + mark.text_start
                line = chunk.block[start : chunk.start + mark.text_end]
                fixed = self._fixed_row(line, chunk.where(mark.item, mark.line))
                chunk.fixed[mark.item] = fixed
                pieces += [rows[done : mark.row_start], fixed]
                done = mark.row_end
            pieces.append(rows[done:])
            rows = b"".join(pieces)
        chunk.rows = [rows]

    def _fixed_row(self, line: bytes, where: str) -> bytes:
        """The row of a line the core could not grade, decoded again by the Python path (the
        protobuf JSON mapping, exactly as before): its error row with `where` as the field,
        or its graded row if that path accepts it."""
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

    def _fix_errors(self, chunk: Chunk, rows: list[bytes]) -> None:
        """Rewrite the (rare) error rows as documented: `file:line N`, json_format's message.

        A line the core could not grade is decoded again by the Python path (the protobuf JSON
        mapping, exactly as before): its error row, or its graded row if that path accepts it.
        """
        # One search over the whole chunk (a copy and a scan) instead of one per row.
        if ERROR_MARKER not in b"".join(rows):
            return
        if chunk.batch is not None:  # Arrow rows: their JSON lines, as the other path reads
            lines = json_lines(chunk.batch)
            assert lines is not None  # arrowcols takes a subset of arrowjson's layouts
            chunk.items = list(lines)
        for i, row in enumerate(rows):
            if ERROR_MARKER not in row:
                continue
            line = chunk.items[i]
            assert isinstance(line, bytes)
            rows[i] = self._fixed_row(line, chunk.where(i))

    def close(self) -> None:
        """Nothing to release: the grader's pool goes with the object."""
