"""The JSONL results sink: regrade rows appended per batch, fsynced, rotated by size, by a
writer thread that accounts for every row."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import threading
from pathlib import Path

from trajgrade.server.metrics import LiveMetrics

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


class SinkWriter:
    """The sink's writes, on a thread of their own so the event loop never waits for the
    disk; every row accounted for: written (`sink_rows`), in a batch that failed
    (`sink_errors`, `failed_rows`) or, once `finish` gave up on it, not written
    (`sink_unwritten`)."""

    def __init__(self, sink: JsonlSink, metrics: LiveMetrics) -> None:
        self.sink = sink
        self.metrics = metrics
        self.failed_rows = 0
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "trajgrade-live-sink")
        self._futures: set[asyncio.Future[None]] = set()
        # Batches submitted and not yet written (id -> rows); whether finish() gave up on
        # them (the thread then writes and counts nothing more); whether a write is running,
        # and whether close() left the file to it. All under the lock.
        self._lock = threading.Lock()
        self._pending: dict[int, int] = {}
        self._jobs = 0
        self._abandoned = False
        self._busy = False
        self._close_after = False

    def submit(self, lines: list[bytes]) -> None:
        """On the loop: one batch of rows, written (and fsynced) in submission order."""
        with self._lock:
            self._jobs += 1
            job = self._jobs
            self._pending[job] = len(lines)
        future = asyncio.wrap_future(self._thread.submit(self._write, job, lines))
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)

    def _write(self, job: int, lines: list[bytes]) -> None:
        with self._lock:
            if self._abandoned:
                return  # finish() counted it as not written
            self._busy = True
        written = False
        try:
            self.sink.write(lines)
            written = True
        except OSError:
            self.metrics.sink_errors.inc()
            log.exception("results sink: %d rows not written", len(lines))
        finally:
            with self._lock:
                self._busy = False
                # Gone from pending: finish() gave up on it first (and counted it).
                counted = self._pending.pop(job, None) is None
                if not written and not counted:
                    self.failed_rows += len(lines)
                close = self._close_after
            if close:
                self.sink.close()
        if written and not counted:
            self.metrics.sink_rows.inc(len(lines))

    async def finish(self, timeout_s: float | None) -> int:
        """Wait for the batches submitted, at most `timeout_s` (None: as long as they take);
        returns the rows not written by then (counted; a write still running may yet land
        in the file, but was not confirmed in time). Nothing is written after it."""
        if self._futures:
            await asyncio.wait(self._futures, timeout=timeout_s)
        with self._lock:
            self._abandoned = True
            unwritten = sum(self._pending.values())
            self._pending.clear()
        if unwritten:
            self.metrics.sink_unwritten.inc(unwritten)
        return unwritten

    def close(self) -> None:
        """After finish(): close the file, or leave it to the write still running (a disk
        that hangs must not block the loop)."""
        self._thread.shutdown(wait=False)
        with self._lock:
            self._close_after = self._busy
        if not self._close_after:
            self.sink.close()
