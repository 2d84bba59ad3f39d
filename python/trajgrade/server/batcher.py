"""The dynamic batcher: one bounded queue in front of the core, flushed by size or delay."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from trajgrade import _core
from trajgrade.errors import (
    CallCancelledError,
    DeadlineExceededError,
    QueueFullError,
    ShuttingDownError,
)
from trajgrade.server.metrics import ServerMetrics

log = logging.getLogger("trajgrade.server")


class GraderLike(Protocol):
    """The part of trajgrade._core.Grader the batcher calls (it releases the GIL)."""

    def grade_requests(
        self, requests: list[bytes], cancels: list[_core.CancelToken | None] | None = None
    ) -> Sequence[bytes | BaseException]: ...


Solo = Callable[[bytes], bytes]
# (requests, cancel tokens, work units each) -> answers; None: needs more units than given.
GradeHere = Callable[
    [list[bytes], list[_core.CancelToken | None], int], Sequence[bytes | BaseException | None]
]


class _Entry:
    """One queued item (a plain class with slots: one is made per unary call)."""

    __slots__ = ("cancel", "deadline", "enqueued", "future", "payload", "size", "solo")

    def __init__(
        self,
        payload: bytes,
        future: asyncio.Future[bytes],
        deadline: float | None,
        enqueued: float,
        *,
        solo: Solo | None = None,
        cancel: _core.CancelToken | None = None,
    ) -> None:
        self.payload = payload
        self.future = future
        self.deadline = deadline  # loop.time() after which grading is pointless
        self.enqueued = enqueued  # loop.time() at submission
        self.solo = solo  # grades a BatchGradeTraces request or stream chunk alone, in one call
        self.cancel = cancel  # the RPC's token: the core stops when it is cancelled
        self.size = len(payload)


class Batcher:
    """Coalesces single-trace requests into core calls; per-item futures carry each answer.

    A flush happens at ``max_batch_size`` items or ``max_batch_delay_s`` after the oldest item
    was queued, whichever comes first. At most ``executor_threads`` core calls run at once; while
    they run, new items wait in the queue, so the next batch forms by itself under load. Items
    whose caller went away (cancelled) or whose deadline passed are dropped before grading. A
    full queue refuses new items (QueueFullError); accepted items are never dropped for room.
    """

    def __init__(
        self,
        grader: GraderLike,
        *,
        max_batch_size: int,
        max_batch_delay_s: float,
        max_queue_size: int,
        max_queue_bytes: int,
        executor_threads: int,
        metrics: ServerMetrics,
        retry_after_ms: int = 100,
        grade_here: GradeHere | None = None,
        inline_bytes: int = 0,
        inline_work_units: int = 100_000,
    ) -> None:
        self._grader = grader
        # A unary batch of at most inline_bytes is graded by grade_here right on the event loop
        # (on this thread, not the pool): for a few traces the executor hop, the GIL hand-offs
        # and waking the pool's threads cost more CPU than grading them.
        self._grade_here = grade_here if inline_bytes > 0 else None
        self._inline_bytes = inline_bytes
        # Each inline item may spend this many work units (a few ms at most); one that needs
        # more is graded again in the pool with the full limit, so the loop is never held long.
        self._inline_work_units = inline_work_units
        self._max_batch = max_batch_size
        self._delay = max_batch_delay_s
        self._max_items = max_queue_size
        self._max_bytes = max_queue_bytes
        self._metrics = metrics
        self._threads = executor_threads
        self._queue: collections.deque[_Entry] = collections.deque()
        self._queued_bytes = 0
        self._closed = False
        self._wakeup = asyncio.Event()
        self._retry_after_ms = retry_after_ms
        self._room = asyncio.Event()  # set when an item leaves the queue (or on close)
        # Queued items that wake the collector: 1 while it waits for a first item, the room
        # left while it fills a batch (it also wakes at the batch's flush time).
        self._wake_at = 1
        self._slots = asyncio.Semaphore(executor_threads)
        self._running: set[asyncio.Task[None]] = set()
        self._collector: asyncio.Task[None] | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        metrics.queue_depth.set_function(self._queue.__len__)  # read at scrape, not per item

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the collector; call from the event loop that serves the RPCs."""
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._threads, thread_name_prefix="trajgrade-grade"
        )
        self._collector = asyncio.get_running_loop().create_task(
            self._collect(), name="trajgrade-batcher"
        )

    @property
    def closed(self) -> bool:
        """True once close() was called: new work is refused."""
        return self._closed

    @property
    def depth(self) -> int:
        """Items waiting in the queue (not yet handed to the core)."""
        return len(self._queue)

    def close(self) -> None:
        """Refuse new items from now on; items already queued are still graded."""
        self._closed = True
        self._wakeup.set()
        self._room.set()

    async def drain(self, timeout: float | None) -> bool:
        """Wait until every accepted item has its answer; False if the timeout cut it short."""
        self.close()
        loop = asyncio.get_running_loop()
        until = None if timeout is None else loop.time() + timeout
        while True:
            # The collector may start new core calls while we wait, so look again each round.
            pending: list[asyncio.Future[None]] = [t for t in self._running if not t.done()]
            if self._collector is not None and not self._collector.done():
                pending.append(self._collector)
            if not pending:
                return True
            left = None if until is None else until - loop.time()
            if left is not None and left <= 0:
                return False
            await asyncio.wait(pending, timeout=left, return_when=asyncio.FIRST_COMPLETED)

    async def stop(self) -> None:
        """Fail whatever is still queued with UNAVAILABLE and release the executor."""
        self.close()
        while self._queue:
            entry = self._pop()
            if not entry.future.done():
                entry.future.set_exception(ShuttingDownError("the server stopped before grading"))
        if self._collector is not None and not self._collector.done():
            self._collector.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._collector
        if self._executor is not None:
            # Core calls cannot be interrupted; don't block the loop on them.
            self._executor.shutdown(wait=False, cancel_futures=True)

    # --- submission ----------------------------------------------------------------------------

    def submit(
        self,
        payload: bytes,
        deadline: float | None,
        *,
        solo: Solo | None = None,
        cancel: _core.CancelToken | None = None,
    ) -> asyncio.Future[bytes]:
        """Queue one serialized GradeTraceRequest, or a payload that ``solo`` grades by itself
        (a BatchGradeTracesRequest, a StreamGradeTraces chunk).

        ``deadline`` is seconds from now (the RPC's time_remaining()), or None. The future
        resolves to the core's response bytes, or raises the item's TrajgradeError. Once
        ``cancel`` is cancelled the item is dropped if still queued, and its grading stops if
        running (``solo`` must pass the token on to the core itself).
        """
        if self._closed:
            self._metrics.rejected.labels("shutting_down").inc()
            raise ShuttingDownError("the server is shutting down; retry on another replica")
        if self.full(len(payload)):
            self._metrics.rejected.labels("queue_full").inc()
            raise QueueFullError(
                f"grading queue is full ({len(self._queue)} items, {self._queued_bytes} bytes); "
                "retry with backoff",
                max_queue_size=str(self._max_items),
                max_queue_bytes=str(self._max_bytes),
                retry_after_ms=str(self._retry_after_ms),
            )
        loop = asyncio.get_running_loop()
        now = loop.time()
        entry = _Entry(
            payload,
            loop.create_future(),
            None if deadline is None else now + deadline,
            now,
            solo=solo,
            cancel=cancel,
        )
        self._queue.append(entry)
        self._queued_bytes += entry.size
        if solo is not None or len(self._queue) >= self._wake_at:
            self._wakeup.set()
        return entry.future

    def full(self, size: int = 0) -> bool:
        """True when an item of `size` bytes would be refused for room now."""
        return len(self._queue) >= self._max_items or (
            bool(self._queue) and self._queued_bytes + size > self._max_bytes
        )

    async def wait_for_room(self, size: int = 0) -> None:
        """Return once an item of `size` bytes fits (or the batcher closed): back-pressure for
        a caller that would rather wait than be refused (a stream with nothing in flight)."""
        while self.full(size) and not self._closed:
            self._room.clear()
            await self._room.wait()

    async def grade(
        self, payload: bytes, deadline: float | None, cancel: _core.CancelToken | None = None
    ) -> bytes:
        """Submit one GradeTraceRequest and wait for its GradeTraceResponse bytes."""
        return await self.submit(payload, deadline, cancel=cancel)

    async def grade_solo(
        self,
        payload: bytes,
        deadline: float | None,
        solo: Solo,
        cancel: _core.CancelToken | None = None,
    ) -> bytes:
        """Queue ``solo(payload)`` (one whole BatchGradeTracesRequest) and wait for it."""
        return await self.submit(payload, deadline, solo=solo, cancel=cancel)

    # --- the collector -------------------------------------------------------------------------

    def _pop(self) -> _Entry:
        entry = self._queue.popleft()
        self._queued_bytes -= entry.size
        self._room.set()
        return entry

    def _alive(self, entry: _Entry, now: float) -> bool:
        """False (and the entry settled) when grading it would be wasted work."""
        if entry.future.done():  # the caller was cancelled
            self._metrics.dropped.labels("cancelled").inc()
            return False
        if entry.deadline is not None and now >= entry.deadline:
            self._metrics.dropped.labels("deadline").inc()
            entry.future.set_exception(
                DeadlineExceededError("the deadline passed before the request was graded")
            )
            # Nobody may await it any more (the RPC is over); mark the exception retrieved.
            entry.future.exception()
            return False
        if entry.cancel is not None and entry.cancel.cancelled:
            self._metrics.dropped.labels("cancelled").inc()
            entry.future.set_exception(CallCancelledError("the call was cancelled"))
            entry.future.exception()
            return False
        return True

    async def _next_alive(self) -> _Entry | None:
        """The next live queued entry, waiting for one to come; None once closed and empty."""
        loop = asyncio.get_running_loop()
        while True:
            while self._queue:
                entry = self._pop()
                if self._alive(entry, loop.time()):
                    return entry
            if self._closed:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()

    async def _fill(self, batch: list[_Entry]) -> None:
        """Adds queued unary items to ``batch`` until it is full or its delay is over.

        While it waits, submit() wakes it only once enough items for a full batch are queued
        (or a whole-batch request, which ends the batch), and one timer wakes it at the flush
        time: not once per arriving item.
        """
        loop = asyncio.get_running_loop()
        # Count the delay from the oldest item: time it spent waiting for a free core slot
        # already counts against it.
        flush_at = batch[0].enqueued + self._delay
        while True:
            while self._queue and len(batch) < self._max_batch:
                if self._queue[0].solo is not None:
                    return  # a whole batch request is never merged into a unary batch
                entry = self._pop()
                if self._alive(entry, loop.time()):
                    batch.append(entry)
            if len(batch) >= self._max_batch or self._closed or loop.time() >= flush_at:
                return
            self._wake_at = self._max_batch - len(batch)
            self._wakeup.clear()
            timer = loop.call_at(flush_at, self._wakeup.set)
            try:
                await self._wakeup.wait()
            finally:
                timer.cancel()
                self._wake_at = 1

    async def _collect(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if self._closed and not self._queue:
                return
            first = await self._next_alive()
            if first is None:
                if self._closed and not self._queue:
                    return
                continue
            await self._slots.acquire()
            if first.solo is not None:
                # It may have waited for the slot: its caller may be gone or its deadline past.
                if self._alive(first, loop.time()):
                    self._launch([first], self._grade_solo)
                else:
                    self._slots.release()
                continue
            batch = [first]
            await self._fill(batch)
            # Drop items that died while the batch was forming.
            now = loop.time()
            self._dispatch([e for e in batch if self._alive(e, now)])

    def _launch(
        self, batch: list[_Entry], run: Callable[[list[_Entry]], list[bytes | BaseException]]
    ) -> None:
        task = asyncio.get_running_loop().create_task(self._run(batch, run))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def _dispatch(self, batch: list[_Entry]) -> None:
        """A formed unary batch (holding one slot): graded here when small, else in the pool."""
        if not batch:
            self._slots.release()
        elif self._grade_here is not None and sum(e.size for e in batch) <= self._inline_bytes:
            self._grade_inline(batch, self._grade_here)
        else:
            self._launch(batch, self._grade_many)

    def _grade_inline(self, batch: list[_Entry], grade_here: GradeHere) -> None:
        """Grades a small batch on the event loop thread and answers it (holds one slot).

        Each item gets at most ``inline_work_units``: the loop serves nobody while it grades and
        no deadline can fire meanwhile. Items that need more go to the pool (keeping the slot),
        where they are graded from the start with the full limit: the same answer either way.
        """
        self._metrics.batch_size.observe(len(batch))
        started = time.perf_counter()
        results: Sequence[bytes | BaseException | None]
        try:
            results = grade_here(
                [e.payload for e in batch], [e.cancel for e in batch], self._inline_work_units
            )
            if len(results) != len(batch):
                raise RuntimeError(f"core returned {len(results)} results for {len(batch)} items")
        except Exception as exc:  # the whole core call failed: every item gets the error
            results = [exc] * len(batch)
        finally:
            self._metrics.grading_seconds.observe(time.perf_counter() - started)
        done = [(e, r) for e, r in zip(batch, results, strict=True) if r is not None]
        _settle([e for e, _ in done], [r for _, r in done])
        deferred = [e for e, r in zip(batch, results, strict=True) if r is None]
        if deferred:
            self._launch(deferred, self._grade_many)  # releases the slot when graded
        else:
            self._slots.release()

    def _grade_many(self, batch: list[_Entry]) -> list[bytes | BaseException]:
        cancels = [e.cancel for e in batch]
        if not any(cancels):
            return list(self._grader.grade_requests([e.payload for e in batch]))
        return list(self._grader.grade_requests([e.payload for e in batch], cancels))

    def _grade_solo(self, batch: list[_Entry]) -> list[bytes | BaseException]:
        entry = batch[0]
        assert entry.solo is not None
        try:
            return [entry.solo(entry.payload)]
        except Exception as exc:  # the per-item slot carries it to the caller's status
            return [exc]

    async def _run(
        self, batch: list[_Entry], run: Callable[[list[_Entry]], list[bytes | BaseException]]
    ) -> None:
        loop = asyncio.get_running_loop()
        self._metrics.batch_size.observe(len(batch))
        self._metrics.in_flight_batches.inc()
        started = time.perf_counter()
        try:
            results = await loop.run_in_executor(self._executor, run, batch)
            if len(results) != len(batch):
                raise RuntimeError(f"core returned {len(results)} results for {len(batch)} items")
        except Exception as exc:  # the whole core call failed: every item gets the error
            results = [exc] * len(batch)
        finally:
            self._metrics.grading_seconds.observe(time.perf_counter() - started)
            self._metrics.in_flight_batches.dec()
            self._slots.release()
        _settle(batch, results)


def _settle(batch: list[_Entry], results: Sequence[bytes | BaseException]) -> None:
    """Hands each entry its answer (or error)."""
    for entry, result in zip(batch, results, strict=True):
        if entry.future.done():
            continue  # cancelled while grading: the answer has nobody to go to
        if isinstance(result, BaseException):
            entry.future.set_exception(result)
        else:
            entry.future.set_result(result)
