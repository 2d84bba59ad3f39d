"""WatchResults: fan-out of live results to watchers, each with a bounded queue.

Publishing never waits: a watcher whose queue is full is cut (its stream ends with
RESOURCE_EXHAUSTED / WATCHER_TOO_SLOW) and the others go on.

On TCP addresses the core's front serves the streams (`core_hub`, rust/py/src/watch_hub.rs:
written off the event loop); `watch_handler` serves them on grpc.aio otherwise (a unix-socket
address, or `--core-front false`). The hub publishes to both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from trajgrade import _core
from trajgrade.errors import (
    InvalidRequestError,
    LiveGradingOffError,
    ServiceError,
    ShuttingDownError,
    UnauthenticatedError,
    WatcherTooSlowError,
)
from trajgrade.live.timing import RunTiming
from trajgrade.server.auth import UNAUTHENTICATED
from trajgrade.server.status import invalid_request, to_status
from trajgrade.v1 import grader_service_pb2

SERVICE_NAME: str = grader_service_pb2.DESCRIPTOR.services_by_name["GraderService"].full_name
DECODE_ERROR = "its bytes do not parse (protobuf)"


@dataclass(frozen=True)
class Published:
    """One live result: its filter keys and its encoded WatchResultsResponse (and its run's
    key, for the debug timing)."""

    suite_id: str
    verdict: int
    service: str
    payload: bytes
    run_key: str = ""


class _End:
    def __init__(self, reason: str) -> None:
        self.reason = reason


TOO_SLOW = _End("too_slow")
CLOSED = _End("closed")


@dataclass(eq=False)
class Watcher:
    """One WatchResults call: its filter and its queue."""

    suite_ids: frozenset[str]
    verdicts: frozenset[int]
    services: frozenset[str]
    queue: asyncio.Queue[Published | _End] = field(default_factory=asyncio.Queue)

    def wants(self, item: Published) -> bool:
        return (
            (not self.suite_ids or item.suite_id in self.suite_ids)
            and (not self.verdicts or item.verdict in self.verdicts)
            and (not self.services or item.service in self.services)
        )


def _too_slow(queue_size: int) -> WatcherTooSlowError:
    return WatcherTooSlowError(
        f"this watcher fell {queue_size} results behind (--watch-queue-size) and was cut; "
        "grading did not wait. Call again, and read faster or filter more"
    )


def _shutting_down() -> ShuttingDownError:
    return ShuttingDownError("the server is shutting down; watch another replica")


def _not_a_request() -> InvalidRequestError:
    # The same words from both servers (protobuf's and prost's details differ).
    return invalid_request(f"not a WatchResultsRequest: {DECODE_ERROR}")


def core_hub(queue_size: int) -> _core.WatchHub:
    """The core's hub for the front's WatchResults streams, refusing with the statuses this
    module's handler sends (one table: server/status.py)."""

    def status(exc: BaseException) -> tuple[int, str, bytes]:
        made = to_status(exc, rpc="WatchResults")
        details = dict(made.trailing_metadata).get("grpc-status-details-bin", b"")
        return made.code.value[0], made.details, details

    return _core.WatchHub(
        queue_size,
        status(_too_slow(queue_size)),
        status(_shutting_down()),
        status(_not_a_request()),
        status(UnauthenticatedError(UNAUTHENTICATED)),
    )


class WatchHub:
    """The watchers of one server process (and the core's, when its front serves them)."""

    def __init__(self, queue_size: int) -> None:
        self.queue_size = queue_size
        self._watchers: set[Watcher] = set()
        self.closed = False
        self._dropped = 0
        # The core's streams (GradingServer attaches it when the front serves WatchResults).
        self.core: _core.WatchHub | None = None
        self._core_dropped = 0
        # TRAJGRADE_LIVE_TIMING (live/timing.py): each result's dequeue and write, when set
        # (on grpc.aio's streams only).
        self.timing: RunTiming | None = None

    def __len__(self) -> int:
        core = 0 if self.core is None else self.core.watchers()
        return len(self._watchers) + core

    def take_dropped(self) -> int:
        """Watchers cut as too slow since the last call."""
        dropped, self._dropped = self._dropped, 0
        if self.core is not None:
            total = self.core.dropped
            dropped += total - self._core_dropped
            self._core_dropped = total
        return dropped

    def watch(self, request: grader_service_pb2.WatchResultsRequest) -> Watcher:
        watcher = Watcher(
            frozenset(request.suite_ids),
            frozenset(int(v) for v in request.verdicts),
            frozenset(request.service_names),
            # One slot more than the bound, kept for the end marker.
            asyncio.Queue(self.queue_size + 1),
        )
        if self.closed:
            watcher.queue.put_nowait(CLOSED)
        else:
            self._watchers.add(watcher)
        return watcher

    def leave(self, watcher: Watcher) -> None:
        self._watchers.discard(watcher)

    def publish(self, item: Published) -> None:
        if self.core is not None:
            key = item.run_key if self.timing is not None else None
            self.core.publish(item.suite_id, item.verdict, item.service, item.payload, key)
        for watcher in list(self._watchers):
            if not watcher.wants(item):
                continue
            if watcher.queue.qsize() >= self.queue_size:
                self._watchers.discard(watcher)
                self._dropped += 1
                watcher.queue.put_nowait(TOO_SLOW)
                continue
            watcher.queue.put_nowait(item)

    def close(self) -> None:
        """Drain: every watcher's stream ends after what it was already sent."""
        self.closed = True
        if self.core is not None:
            self.core.close()
        for watcher in self._watchers:
            watcher.queue.put_nowait(CLOSED)
        self._watchers.clear()

    def collect_timing(self) -> None:
        """The core's streams' dequeue stamps, into the debug timing."""
        if self.core is not None and self.timing is not None:
            for key, at in self.core.take_dequeued():
                self.timing.dequeued(key, at)


def watch_handler(hub_of: Callable[[], WatchHub | None], metrics: Any) -> grpc.GenericRpcHandler:
    """GraderService/WatchResults, registered beside the other handlers (it is long-lived, so
    outside admission's count of calls that the drain waits for: the drain ends it)."""

    async def watch_results(request: bytes, context: Any) -> AsyncIterator[bytes]:
        started = time.perf_counter()
        hub = hub_of()
        try:
            if hub is None:
                raise LiveGradingOffError(
                    "live grading is off on this server: start it with --otlp-grpc/--otlp-http "
                    "and --routes"
                )
            try:
                message = grader_service_pb2.WatchResultsRequest.FromString(request)
            except DecodeError as exc:
                raise _not_a_request() from exc
            watcher = hub.watch(message)  # the watchers gauge reads the hub at scrape
            timing = hub.timing
            try:
                while True:
                    item = await watcher.queue.get()
                    if item is TOO_SLOW:
                        raise _too_slow(hub.queue_size)
                    if isinstance(item, _End):
                        raise _shutting_down()
                    if timing is None:
                        yield item.payload
                        continue
                    timing.dequeued(item.run_key)
                    yield item.payload
                    timing.written(item.run_key)
            finally:
                hub.leave(watcher)
        except asyncio.CancelledError:
            metrics.count("WatchResults", grpc.StatusCode.CANCELLED, time.perf_counter() - started)
            raise
        except (ServiceError, InvalidRequestError) as exc:
            status = to_status(exc, rpc="WatchResults")
            metrics.count("WatchResults", status.code, time.perf_counter() - started)
            await context.abort_with_status(status)

    return grpc.method_handlers_generic_handler(
        SERVICE_NAME, {"WatchResults": grpc.unary_stream_rpc_method_handler(watch_results)}
    )
