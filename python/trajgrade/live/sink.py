"""The JSONL results sink: regrade rows appended per batch, fsynced, rotated by size."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

log = logging.getLogger("trajgrade.live")


class JsonlSink:
    """Appends rows to PATH (`results.jsonl`). Once it holds `max_bytes`, it is renamed to
    `results.N.jsonl` (N = 1, 2, ... in rotation order, so the highest N is the newest) and a
    new PATH is started; past `keep` rotated files the oldest is deleted. Every file stays a
    results file that `trajgrade diff` and `regrade --baseline` read.

    Not thread-safe: one writer thread calls `write` (live/grading.py).
    """

    def __init__(self, path: str, *, max_bytes: int, keep: int) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = self.path.open("ab")
        self._size = self._handle.tell()
        stem, suffix = self.path.stem, self.path.suffix
        self._rotated = re.compile(re.escape(stem) + r"\.(\d+)" + re.escape(suffix) + "$")
        self.rows = 0

    def rotated_files(self) -> list[Path]:
        """The rotated files, oldest first."""
        found = []
        for entry in self.path.parent.iterdir():
            match = self._rotated.match(entry.name)
            if match:
                found.append((int(match[1]), entry))
        return [entry for _, entry in sorted(found)]

    def write(self, lines: list[bytes]) -> None:
        """Append one batch of rows durably (one fsync), then rotate if the file is full."""
        if not lines:
            return
        data = b"".join(lines)
        self._handle.write(data)
        self._handle.flush()
        os.fsync(self._handle.fileno())
        self._size += len(data)
        self.rows += len(lines)
        if self._size >= self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        self._handle.close()
        rotated = self.rotated_files()
        last = int(self._rotated.match(rotated[-1].name)[1]) if rotated else 0  # type: ignore[index]
        target = self.path.with_name(f"{self.path.stem}.{last + 1}{self.path.suffix}")
        os.replace(self.path, target)
        rotated.append(target)
        for old in rotated[: max(len(rotated) - self.keep, 0)]:
            old.unlink(missing_ok=True)
        self._handle = self.path.open("ab")
        self._size = 0
        # The rename must survive a crash too.
        directory = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
        log.info("results file rotated to %s", target)

    def close(self) -> None:
        self._handle.close()
