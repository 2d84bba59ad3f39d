"""Crash-safe run state: committed part files plus an atomically replaced manifest."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from trajgrade.regrade.output import (
    ParquetOutput,
    PartWriter,
    arrow_table_from_jsonl,
    part_tables,
)
from trajgrade.regrade.source import Position
from trajgrade.regrade.summary import Summary

if TYPE_CHECKING:
    import pyarrow as pa

MANIFEST = "manifest.json"
# JSONL output: the committed rows, appended chunk by chunk and renamed onto the output at
# the end (no copy); the manifest records how many of its bytes are committed.
ROWS = "rows.jsonl"
# Parquet output: the output written chunk by chunk (a row group each), renamed onto the
# output at the end.
ASSEMBLED = "output.parquet"
# 3: Parquet output's parts are Arrow IPC files.
VERSION = 3


class ResumeError(Exception):
    """The existing run state cannot be continued (other suite or inputs), or must not be lost."""


def parts_dir(out: Path) -> Path:
    """Where a run toward `out` keeps its committed chunks until the output is assembled."""
    return out.with_name(out.name + ".parts")


def _fsync_dir(path: Path) -> None:
    # A rename is durable only once the directory entry is on disk.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


@dataclass
class RunState:
    """The committed prefix of a run. Graded chunks are appended (append()) and then committed,
    one or several at a time (commit(): the caller groups chunks when they come faster than
    fsyncs, so a commit's fsyncs are not paid per chunk); `chunks` counts the commits.

    JSONL output: chunk rows are appended to one rows file; a commit fsyncs it, then rewrites
    the manifest (temp, fsync, rename) with the rows file's committed length, chunks = k + 1,
    the reader position and the summary. A crash before the manifest leaves rows past that
    length, which the next --resume truncates away and regrades. At the end the rows file is
    renamed onto the output.
    Parquet output: each chunk is appended as a row group to the output file in the run
    directory, which has no footer (is not readable) until the end, so the chunks of commit k
    are also kept durably in part k (Arrow IPC): part k is written to a temp file, fsynced and
    renamed before the manifest is rewritten with chunks = k + 1, and a crash between the two
    leaves an orphan part k (or its temp file) that --resume deletes. --resume rewrites the
    output file from the committed parts (the only time a part is read) and appends from
    there. At the end the output file is closed (footer, fsync).
    Either way the output is the previous file or the complete new one, never half written.

    The finish is crash-safe at every step (finish()): the complete output is staged in the
    run directory (the rows file, or the assembled parts), the manifest is marked `finished`,
    the staged file is renamed onto the output, then the run directory is removed, manifest
    last. A run that finds a `finished` manifest completes those last steps (rename if the
    staged file is still there, then the removal) instead of grading again: --resume then
    returns the recorded summary, a fresh run starts over afterwards.
    """

    out: Path
    fmt: str
    identity: dict[str, Any]
    chunks: int = 0
    position: Position = field(default_factory=Position)
    summary: Summary | None = None
    rows_bytes: int = 0
    finished: bool = False  # the output is complete: nothing is left to grade
    _parquet: ParquetOutput | None = field(default=None, repr=False, compare=False)
    _part: PartWriter | None = field(default=None, repr=False, compare=False)  # uncommitted
    _rows: BinaryIO | None = field(default=None, repr=False, compare=False)  # JSONL rows file

    @property
    def directory(self) -> Path:
        return parts_dir(self.out)

    def part(self, index: int) -> Path:
        return self.directory / f"part-{index:06d}.arrow"

    @classmethod
    def open(cls, out: Path, fmt: str, identity: dict[str, Any], *, resume: bool) -> RunState:
        """A fresh state, or with resume=True the committed one (validated against identity)."""
        state = cls(out, fmt, {"version": VERSION, **identity})
        manifest = state.directory / MANIFEST
        if manifest.exists():
            if not resume and _finished(manifest):
                # The last run got as far as staging its complete output: put it in place and
                # clear the state, then start over as asked.
                finishing = cls(out, fmt, {}, finished=True)
                finishing.finish()
                return cls.open(out, fmt, identity, resume=False)
            if not resume:
                raise ResumeError(
                    f"an interrupted run toward {out} is in {state.directory}; pass --resume to "
                    "continue it, or delete that directory to start over"
                )
            raw = json.loads(manifest.read_text(encoding="utf-8"))
            if raw["identity"].get("version") != VERSION:
                raise ResumeError(
                    f"{state.directory} was written by another trajgrade version; delete it "
                    "to start over"
                )
            if raw["identity"] != state.identity:
                raise ResumeError(
                    f"{state.directory} belongs to a run with other inputs, suite or output "
                    "format; delete it to start over"
                )
            state.chunks = raw["chunks"]
            state.position = Position.from_json(raw["position"])
            state.summary = Summary.from_json(raw["summary"])
            state.rows_bytes = raw.get("rows_bytes", 0)
            if raw.get("finished", False):
                state.finished = True
                state.finish()
                return state
            # Rows or parts past the manifest were written but never committed: regrade them.
            if fmt == "jsonl":
                with state.rows_path.open("r+b") as rows:
                    rows.truncate(state.rows_bytes)
                    os.fsync(rows.fileno())
            for leftover in state.directory.iterdir():
                if leftover.name.startswith("part-") and not _committed(leftover, state.chunks):
                    leftover.unlink()
            return state
        if state.directory.exists():
            shutil.rmtree(state.directory)  # no manifest: nothing was ever committed
        state.directory.mkdir(parents=True)
        if fmt == "jsonl":
            state.rows_path.touch()
        return state

    @property
    def rows_path(self) -> Path:
        return self.directory / ROWS

    def append(self, rows: bytes, *, longest_row: int, table: pa.Table | None = None) -> None:
        """Write one more graded chunk's rows (the core's JSONL rows, the longest `longest_row`
        bytes, and for Parquet output its Arrow table of them when it has one), not yet
        durable: the next commit() makes them so."""
        if self.fmt == "jsonl":
            if self._rows is None:
                self._rows = self.rows_path.open("r+b")
                self._rows.seek(self.rows_bytes)
            self._rows.write(rows)
            return
        if table is None:
            table = arrow_table_from_jsonl(rows, longest_row)
        if any(column.num_chunks > 1 for column in table.columns):
            table = table.combine_chunks()  # one batch: part_tables gives the same row group back
        output = self._parquet_output()  # rebuilt from the committed parts before any new row
        if self._part is None:
            self._part = PartWriter(self._part_tmp(self.chunks))
        self._part.write(table)
        output.write(table)

    def commit(self, position: Position, summary: Summary) -> None:
        """Make the rows appended since the last commit durable, then advance the manifest past
        them (to `position`, with `summary` counting every row up to it)."""
        if self.fmt == "jsonl":
            if self._rows is not None:
                self._rows.flush()
                os.fsync(self._rows.fileno())
                self.rows_bytes = self._rows.tell()
        else:
            if self._part is None:  # nothing appended: an empty part keeps parts = commits
                self._part = PartWriter(self._part_tmp(self.chunks))
            self._part.close()
            self._part = None
            os.replace(self._part_tmp(self.chunks), self.part(self.chunks))
        self.chunks += 1
        self.position = position
        self.summary = summary
        self._write_manifest()

    def _part_tmp(self, index: int) -> Path:
        final = self.part(index)
        return final.with_name(final.name + ".tmp")

    def close(self) -> None:
        """Release the open files (the run ended, finished or not). An unfinished Parquet
        output is closed too (a run that goes on rewrites it), not left to the garbage
        collector, which would close it whenever it runs, even into a file rebuilt by then."""
        if self._parquet is not None:
            self._parquet.close()
            self._parquet = None
        if self._rows is not None:
            self._rows.close()
            self._rows = None
        if self._part is not None:
            with suppress(OSError):
                self._part.close()
            self._part = None

    def _write_manifest(self) -> None:
        assert self.summary is not None
        _replace_json(
            self.directory / MANIFEST,
            {
                "identity": self.identity,
                "chunks": self.chunks,
                "position": self.position.to_json(),
                "summary": self.summary.to_json(),
                "rows_bytes": self.rows_bytes,
                "finished": self.finished,
            },
        )

    def _parquet_output(self) -> ParquetOutput:
        """The Parquet output being written, opened on first use with the committed chunks
        (rewritten from their parts after a resume)."""
        if self._parquet is None:
            self._parquet = ParquetOutput(self.staged_path)
            for index in range(self.chunks):
                for table in part_tables(self.part(index)):
                    self._parquet.write(table)
        return self._parquet

    @property
    def staged_path(self) -> Path:
        """The complete output, waiting in the run directory to be renamed onto `out`."""
        return self.rows_path if self.fmt == "jsonl" else self.directory / ASSEMBLED

    def finish(self) -> None:
        """Put the output in place atomically, then drop the run state.

        Every step can be interrupted: until the manifest says `finished`, --resume finds the
        committed chunks as before; from then on, open() completes the remaining steps (each
        one is done again or skipped when already done).
        """
        staged = self.staged_path
        if not self.finished:
            if self.fmt == "parquet":  # JSONL: every row is committed in the rows file already
                self._parquet_output().close()
                self._parquet = None
            self.close()
            if self.summary is None:  # no chunk at all (empty inputs)
                self.summary = Summary()
            self.finished = True
            self._write_manifest()
        if staged.exists():
            os.replace(staged, self.out)
            _fsync_dir(self.out.parent)
        elif not self.out.exists():
            raise ResumeError(
                f"the run toward {self.out} had finished, but the output is gone; delete "
                f"{self.directory} to start over"
            )
        # The manifest goes last: while it exists, a rerun knows the output is complete.
        for leftover in self.directory.iterdir():
            if leftover.name != MANIFEST:
                _remove(leftover)
        os.unlink(self.directory / MANIFEST)
        os.rmdir(self.directory)
        _fsync_dir(self.out.parent)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _finished(manifest: Path) -> bool:
    try:
        return bool(json.loads(manifest.read_text(encoding="utf-8")).get("finished", False))
    except (OSError, ValueError, AttributeError):
        return False


def _committed(path: Path, chunks: int) -> bool:
    stem = path.name.split(".", 1)[0]
    try:
        return path.name.endswith(".arrow") and int(stem[5:]) < chunks
    except ValueError:
        return False
