"""The intake's order and slices: exports are taken one after another, in arrival order, and a
large traces export in slices of about SLICE_SPANS spans, with the event loop free between
two slices (its settle timers, results, and other callers' requests go on).

Why: the event loop assembles every live run, so the time one export holds it is added to the
latency of every run completing meanwhile. A 20,000-span export taken in one piece held it for
about 150 ms (docs/performance.md, "Live grading: large exports in slices").

Order: an export that arrives while another is being sliced waits behind it, so spans are taken
in the order they came, as in one piece; a slice never ends inside the rows of one trace.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Generator, Iterator
from typing import Any, TypeVar

from trajgrade.live.records import SpanRow

log = logging.getLogger("trajgrade.live")

T = TypeVar("T")
# One export's work: yields between two slices; returns the export's answer.
Steps = Generator[None, None, T]
# Told the export's answer, or why it has none (the exception that ended its steps).
Done = Callable[[Any], None]

# About how many spans one slice takes (a few ms of the loop's time).
SLICE_SPANS = 2048


class ShuttingDownError(Exception):
    """The server is draining: the export was not taken (retryable for an exporter)."""


class Intake:
    """Exports waiting to be taken, the first of them perhaps part-taken; taken on the loop."""

    def __init__(self) -> None:
        self._queue: collections.deque[tuple[Steps[Any], Done]] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def __len__(self) -> int:
        return len(self._queue)

    def submit(self, steps: Steps[T], done: Done) -> None:
        """Take an export: at once when nothing waits (its first slice here, `done` called now
        when there is no other), else after the exports before it; `done` gets its answer or
        the exception that ended it (ValueError: malformed; ShuttingDownError)."""
        if self._closed:
            steps.close()
            _tell(done, ShuttingDownError("the server is shutting down"))
            return
        if not self._queue:
            try:
                next(steps)
            except StopIteration as stop:
                _tell(done, stop.value)
                return
            except Exception as exc:  # handed to the caller, which answers it
                _tell(done, exc)
                return
        self._queue.append((steps, done))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._take_queued(), name="trajgrade-live-intake"
            )

    async def run(self, steps: Steps[T]) -> T:
        """submit(), awaited: the answer, or the exception raised."""
        future, done = awaited_answer()
        self.submit(steps, done)
        result = await future
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[no-any-return]

    async def close(self, timeout: float | None) -> int:
        """The drain: no new export; those waiting are taken within `timeout` seconds (None:
        as long as they take), the rest told ShuttingDownError. Returns how many were not
        taken."""
        self._closed = True
        task = self._task
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except TimeoutError:
                task.cancel()
        untaken = len(self._queue)
        while self._queue:
            steps, done = self._queue.popleft()
            steps.close()
            _tell(done, ShuttingDownError("the server is shutting down"))
        return untaken

    async def _take_queued(self) -> None:
        try:
            while self._queue:
                steps, done = self._queue[0]
                try:
                    while True:
                        await asyncio.sleep(0)  # the loop's other work, between two slices
                        next(steps)
                except StopIteration as stop:
                    result: Any = stop.value
                except Exception as exc:  # handed to the caller, which answers it
                    result = exc
                self._queue.popleft()
                _tell(done, result)
        finally:
            self._task = None


def awaited_answer() -> tuple[asyncio.Future[Any], Done]:
    """A future on the running loop, and the `done` that sets it (a no-op once the caller
    is gone: the future cancelled)."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def done(result: Any) -> None:
        if not future.done():
            future.set_result(result)

    return future, done


def run_through(steps: Steps[T]) -> T:
    """An export's steps in one piece, here (benchmarks of the intake's cost)."""
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


def slices(rows: list[SpanRow], size: int | None = None) -> Iterator[list[SpanRow]]:
    """`rows` (an export's, in order) cut into slices of about `size` spans (SLICE_SPANS),
    never between two rows of one trace (a request may hold a trace in several places): at
    least one slice."""
    size = SLICE_SPANS if size is None else size
    if not rows or rows[-1][2] - rows[0][1] <= size:
        yield rows  # the common export: one slice, no cut to look for
        return
    last = {row[0]: index for index, row in enumerate(rows)}
    start = spans = 0
    reach = -1  # the last row of a trace already in this slice
    for index, row in enumerate(rows):
        if spans >= size and reach < index:
            yield rows[start:index]
            start, spans = index, 0
        spans += row[2] - row[1]
        reach = max(reach, last[row[0]])
    yield rows[start:]


def _tell(done: Done, result: Any) -> None:
    try:
        done(result)
    except Exception:  # a defect of the caller's: the other exports go on
        log.exception("an export's answer could not be sent")
