"""Debug timing of the live pipeline, off unless TRAJGRADE_LIVE_TIMING names a file.

Per run (wall clock ns, comparable with the senders' span end times and a watcher's arrival
times): when its last span arrived, when it was taken as complete (end marker, settle time),
when its results were published, and when a WatchResults stream took its first result off
the watcher's queue and when that write completed (0: no watcher). Written as tab-separated
lines when the server drains (bench/bench_live.py --split reads them), then the collector's
pauses (`gc` lines: generation, start, duration). Not for production: it keeps every run's
times.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterable

ENV = "TRAJGRADE_LIVE_TIMING"


class RunTiming:
    """The times of every run, by run key."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._arrived: dict[str, int] = {}
        self._completed: dict[str, int] = {}
        self._rows: list[tuple[str, int, int, int]] = []
        # The first WatchResults stream's dequeue and completed write of a run's result.
        self._dequeued: dict[str, int] = {}
        self._written: dict[str, int] = {}
        self._gc: list[tuple[int, int, int]] = []
        self._gc_start = 0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.time_ns()
        else:
            self._gc.append((info["generation"], self._gc_start, time.time_ns() - self._gc_start))

    def arrived(self, keys: Iterable[str]) -> None:
        now = time.time_ns()
        for key in keys:
            self._arrived[key] = now

    def completed(self, keys: Iterable[str]) -> None:
        now = time.time_ns()
        for key in keys:
            self._completed[key] = now

    def published(self, keys: Iterable[str]) -> None:
        now = time.time_ns()
        for key in keys:
            self._rows.append((key, self._arrived.pop(key, 0), self._completed.pop(key, 0), now))

    def dequeued(self, key: str, at: int | None = None) -> None:
        """A stream took the run's result off its queue (now, or at `at`: the core's streams
        stamp it on their thread)."""
        self._dequeued.setdefault(key, time.time_ns() if at is None else at)

    def written(self, key: str) -> None:
        self._written.setdefault(key, time.time_ns())

    def write(self) -> None:
        dequeued, written = self._dequeued, self._written
        with open(self.path, "w", encoding="utf-8") as out:
            out.writelines(
                f"{k}\t{a}\t{c}\t{p}\t{dequeued.get(k, 0)}\t{written.get(k, 0)}\n"
                for k, a, c, p in self._rows
            )
            out.writelines(f"gc\t{g}\t{at}\t{took}\n" for g, at, took in self._gc)
        gc.callbacks.remove(self._on_gc)


def from_env() -> RunTiming | None:
    path = os.environ.get(ENV)
    return RunTiming(path) if path else None
