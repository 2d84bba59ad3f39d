"""The local engine: grade chunks in-process with the core's batch path (GIL released)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import cast

from trajgrade import _core
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.output import ERROR_MARKER, failure_row, jsonl_line, outcome_row
from trajgrade.regrade.source import Chunk, ReadFailure
from trajgrade.regrade.tracejson import TraceJsonError, peek_trace_id, trace_bytes

_FIRST_TRACE = re.compile(r"^traces\[0\]")


class LocalBackend:
    """Grades each chunk on the grader's own thread pool.

    Native JSONL chunks (raw_lines) go to the core undecoded (grade_json_traces_to_json): the
    core decodes the lines and writes each JSONL row in parallel; Parquet chunks with Arrow
    buffers (arrowcols) are read by the core from those buffers; other chunks are serialized
    Traces for CompiledSuite.grade_batch.
    """

    raw_lines = True

    def __init__(self, suite_bytes: bytes, threads: int = 0) -> None:
        self._grader = _core.Grader(threads=threads)
        self._suite = self._grader.compile_suite(suite_bytes)
        self.suite_id = self._suite.suite_id

    def grade(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """Each chunk with its outcomes (or, for raw lines, its rows) filled in, in order."""
        for chunk in chunks:
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
            try:
                payload = trace_bytes(line)
            except TraceJsonError as exc:
                failure = ReadFailure(peek_trace_id(line), chunk.where(i), str(exc))
                rows[i] = jsonl_line(failure_row(failure, self.suite_id))
                continue
            fixed = outcome_row(self._suite.grade_batch([payload])[0], self.suite_id)
            if fixed["error"] is not None:
                error = fixed["error"]
                error["field"] = _FIRST_TRACE.sub(chunk.where(i), error["field"])
            rows[i] = jsonl_line(fixed)

    def close(self) -> None:
        """Nothing to release: the grader's pool goes with the object."""
