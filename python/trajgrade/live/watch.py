"""WatchResults: fan-out of live results to watchers, each with a bounded queue.

Publishing never waits: a watcher whose queue is full is cut (its stream ends with
RESOURCE_EXHAUSTED / WATCHER_TOO_SLOW) and the others go on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from trajgrade.errors import (
    InvalidRequestError,
    LiveGradingOffError,
    ServiceError,
    ShuttingDownError,
    WatcherTooSlowError,
)
from trajgrade.live.timing import RunTiming
from trajgrade.server.status import to_status
from trajgrade.v1 import grader_service_pb2

SERVICE_NAME: str = grader_service_pb2.DESCRIPTOR.services_by_name["GraderService"].full_name


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


class WatchHub:
    """The watchers of one server process."""

    def __init__(self, queue_size: int) -> None:
        self.queue_size = queue_size
        self._watchers: set[Watcher] = set()
        self.closed = False
        self.dropped = 0
        # TRAJGRADE_LIVE_TIMING (live/timing.py): each result's dequeue and write, when set.
        self.timing: RunTiming | None = None

    def __len__(self) -> int:
        return len(self._watchers)

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
        for watcher in list(self._watchers):
            if not watcher.wants(item):
                continue
            if watcher.queue.qsize() >= self.queue_size:
                self._watchers.discard(watcher)
                self.dropped += 1
                watcher.queue.put_nowait(TOO_SLOW)
                continue
            watcher.queue.put_nowait(item)

    def close(self) -> None:
        """Drain: every watcher's stream ends after what it was already sent."""
        self.closed = True
        for watcher in self._watchers:
            watcher.queue.put_nowait(CLOSED)
        self._watchers.clear()


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
                raise InvalidRequestError(f"not a WatchResultsRequest: {exc}") from exc
            watcher = hub.watch(message)  # the watchers gauge reads the hub at scrape
            timing = hub.timing
            try:
                while True:
                    item = await watcher.queue.get()
                    if item is TOO_SLOW:
                        raise WatcherTooSlowError(
                            f"this watcher fell {hub.queue_size} results behind "
                            "(--watch-queue-size) and was cut; grading did not wait. Call "
                            "again, and read faster or filter more"
                        )
                    if isinstance(item, _End):
                        raise ShuttingDownError(
                            "the server is shutting down; watch another replica"
                        )
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
