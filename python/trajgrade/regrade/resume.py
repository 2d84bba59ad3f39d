"""Crash-safe run state: committed part files plus an atomically replaced manifest."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trajgrade.regrade.output import Row, concatenate, write_part
from trajgrade.regrade.source import Position
from trajgrade.regrade.summary import Summary

MANIFEST = "manifest.json"
VERSION = 1


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
    """The committed prefix of a run: chunk k is in part k iff the manifest lists k chunks.

    Protocol: write part k to a temp file, fsync, rename; then rewrite the manifest (temp,
    fsync, rename) with chunks = k + 1, the reader position and the summary. A crash between
    the two leaves an orphan part k that the next --resume deletes and regrades. The output
    itself is assembled from the parts into a temp file and renamed into place at the end, so
    it is either the previous file or the complete new one, never half written.
    """

    out: Path
    fmt: str
    identity: dict[str, Any]
    chunks: int = 0
    position: Position = field(default_factory=Position)
    summary: Summary | None = None

    @property
    def directory(self) -> Path:
        return parts_dir(self.out)

    def part(self, index: int) -> Path:
        return self.directory / f"part-{index:06d}.{self.fmt}"

    @classmethod
    def open(cls, out: Path, fmt: str, identity: dict[str, Any], *, resume: bool) -> RunState:
        """A fresh state, or with resume=True the committed one (validated against identity)."""
        state = cls(out, fmt, {"version": VERSION, **identity})
        manifest = state.directory / MANIFEST
        if manifest.exists():
            if not resume:
                raise ResumeError(
                    f"an interrupted run toward {out} is in {state.directory}; pass --resume to "
                    "continue it, or delete that directory to start over"
                )
            raw = json.loads(manifest.read_text(encoding="utf-8"))
            if raw["identity"] != state.identity:
                raise ResumeError(
                    f"{state.directory} belongs to a run with other inputs, suite or output "
                    "format; delete it to start over"
                )
            state.chunks = raw["chunks"]
            state.position = Position.from_json(raw["position"])
            state.summary = Summary.from_json(raw["summary"])
            # Parts past the manifest were written but never committed: regrade them.
            for leftover in state.directory.iterdir():
                if leftover.name.startswith("part-") and not _committed(leftover, state.chunks):
                    leftover.unlink()
            return state
        if state.directory.exists():
            shutil.rmtree(state.directory)  # no manifest: nothing was ever committed
        state.directory.mkdir(parents=True)
        return state

    def commit(
        self,
        rows: list[Row] | list[bytes],
        position: Position,
        summary: Summary,
        *,
        longest_row: int | None = None,
    ) -> None:
        """Make one more chunk durable, then advance the manifest past it (`longest_row`: see
        write_part)."""
        index = self.chunks
        final = self.part(index)
        tmp = final.with_name(final.name + ".tmp")
        write_part(tmp, rows, self.fmt, longest_row=longest_row)
        os.replace(tmp, final)
        self.chunks = index + 1
        self.position = position
        _replace_json(
            self.directory / MANIFEST,
            {
                "identity": self.identity,
                "chunks": self.chunks,
                "position": position.to_json(),
                "summary": summary.to_json(),
            },
        )

    def finish(self) -> None:
        """Assemble the output atomically, then drop the run state."""
        tmp = self.out.with_name(f".{self.out.name}.{os.getpid()}.tmp")
        try:
            concatenate((self.part(i) for i in range(self.chunks)), tmp, self.fmt)
            os.replace(tmp, self.out)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        _fsync_dir(self.out.parent)
        shutil.rmtree(self.directory)


def _committed(path: Path, chunks: int) -> bool:
    stem = path.name.split(".", 1)[0]
    try:
        return path.name.endswith((".jsonl", ".parquet")) and int(stem[5:]) < chunks
    except ValueError:
        return False
