"""Write-back: each live result sent to an OTLP logs endpoint as `gen_ai.evaluation.result`
log records (OTel GenAI semantic conventions, events.yaml), one per assertion, on the graded
run's trace and root span, so grades show up in the tracing backend beside the run.

Grading never waits for it: records go into a bounded queue (full: the oldest are dropped and
counted) and one task exports them in batches over the configured transport (OTLP/gRPC or
OTLP/HTTP, trajgrade.live.export_transport), retrying transient failures with exponential
backoff or the delay the endpoint asks for. Hand-written on opentelemetry-proto rather than the
OTel SDK's log exporter: the SDK's batch processor drops and fails silently, and every record
here must be accounted for in the metrics.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Iterable

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from trajgrade.live.export_target import ExportTarget
from trajgrade.live.export_transport import ExportError, Transport, make_transport
from trajgrade.server.metrics import LiveMetrics
from trajgrade.v1 import result_pb2

log = logging.getLogger("trajgrade.live.writeback")

EVENT_NAME = "gen_ai.evaluation.result"
# The longest Retry-After / RetryInfo delay honoured: a longer one would hold every later record
# (the queue keeps filling meanwhile); past it the usual backoff applies.
MAX_RETRY_DELAY_S = 60.0
_LABEL = {
    result_pb2.ASSERTION_STATUS_PASS: "pass",
    result_pb2.ASSERTION_STATUS_FAIL: "fail",
}
_SEVERITY_INFO = 9  # SEVERITY_NUMBER_INFO


def _kv(key: str, value: str | float | bool) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def records(
    outcome: result_pb2.TraceOutcome,
    suite_id: str,
    trace_id: str,
    span_id: str,
    time_ns: int,
) -> list[LogRecord]:
    """One `gen_ai.evaluation.result` record per assertion of a graded run (none for an item
    error: there is no evaluation to report)."""
    if outcome.WhichOneof("outcome") != "result":
        return []
    trace_bytes = bytes.fromhex(trace_id) if trace_id else b""
    span_bytes = bytes.fromhex(span_id) if span_id else b""
    out = []
    for item in outcome.result.results:
        label = _LABEL.get(item.status, "unspecified")
        out.append(
            LogRecord(
                time_unix_nano=time_ns,
                observed_time_unix_nano=time_ns,
                severity_number=_SEVERITY_INFO,  # type: ignore[arg-type]
                event_name=EVENT_NAME,
                trace_id=trace_bytes,
                span_id=span_bytes,
                attributes=[
                    _kv("gen_ai.evaluation.name", item.name),
                    _kv("gen_ai.evaluation.score.value", float(item.score)),
                    _kv("gen_ai.evaluation.score.label", label),
                    _kv("gen_ai.evaluation.explanation", item.reason),
                    _kv("trajgrade.suite_id", suite_id),
                ],
            )
        )
    return out


class LogWriter:
    """The bounded, batched, retrying OTLP logs exporter of live results. Every record ends up
    counted once: sent, rejected, failed, dropped_queue_full or dropped_shutdown."""

    def __init__(
        self,
        target: ExportTarget,
        metrics: LiveMetrics,
        *,
        queue_size: int = 10_000,
        batch_size: int = 512,
        max_attempts: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 10.0,
    ) -> None:
        self.target = target
        self.metrics = metrics
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.transport: Transport = make_transport(target)
        self._queue: collections.deque[LogRecord] = collections.deque(maxlen=queue_size)
        self._in_hand = 0  # records of the batch being sent (not yet counted)
        # Records the endpoint never took (failed or rejected), for the drain's loss report.
        self.lost = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._resource = Resource(attributes=[_kv("service.name", "trajgrade")])
        self._scope = InstrumentationScope(name="trajgrade.live")

    def start(self) -> None:
        """On the server's loop: the transport (grpc.aio and aiohttp bind to it) and the task."""
        self.transport.start()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="trajgrade-live-writeback"
        )
        log.info("write-back: %s", self.target.describe())

    def add(self, new: Iterable[LogRecord]) -> None:
        """Queue records (never blocks; a full queue drops its oldest, counted)."""
        for record in new:
            if len(self._queue) == self._queue.maxlen:
                self.metrics.writeback.labels("dropped_queue_full").inc()
            self._queue.append(record)
        self._wake.set()

    async def close(self, timeout_s: float = 5.0) -> int:
        """Send what is queued for at most `timeout_s`, then stop. Returns how many records
        were not sent (counted as dropped_shutdown): never waits past the bound for them."""
        self._closing = True
        self._wake.set()
        unsent = 0
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=max(timeout_s, 0.0))
            if not done:
                # Prompt: the task only awaits an export call, a backoff sleep or its wake-up.
                self._task.cancel()
                await asyncio.wait({self._task})
            unsent = self._in_hand + len(self._queue)
            self._in_hand = 0
            self._queue.clear()
            if unsent:
                self.metrics.writeback.labels("dropped_shutdown").inc(unsent)
        await self.transport.close()
        return unsent

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
            self._in_hand = len(batch)
            try:
                await self._send(batch)
            except Exception:
                # A bug, not an endpoint's answer: count the batch, keep the task alive.
                log.exception("write-back: %d records dropped", len(batch))
                self.metrics.writeback.labels("failed").inc(len(batch))
                self.lost += len(batch)
            # Cancelled (close() gave up waiting): the batch stays in hand, counted by close().
            self._in_hand = 0

    async def _send(self, batch: list[LogRecord]) -> None:
        body = ExportLogsServiceRequest(
            resource_logs=[
                ResourceLogs(
                    resource=self._resource,
                    scope_logs=[ScopeLogs(scope=self._scope, log_records=batch)],
                )
            ]
        ).SerializeToString()
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = await self.transport.export(body, self.timeout_s)
            except ExportError as failure:
                retry = failure.retryable and attempt < self.max_attempts
                self.metrics.writeback_errors.labels(failure.code).inc()
                log.warning(
                    "write-back to %s failed (%s, attempt %d of %d)%s",
                    self.target.address,
                    failure,
                    attempt,
                    self.max_attempts,
                    ": retrying" if retry else f": {len(batch)} records dropped",
                )
                if not retry:
                    self.metrics.writeback.labels("failed").inc(len(batch))
                    self.lost += len(batch)
                    return
                await asyncio.sleep(self._delay(attempt, failure.retry_after_s))
                continue
            rejected = min(response.partial_success.rejected_log_records, len(batch))
            if rejected:
                self.metrics.writeback.labels("rejected").inc(rejected)
                self.lost += rejected
                log.warning(
                    "write-back: %d records rejected: %s",
                    rejected,
                    response.partial_success.error_message,
                )
            self.metrics.writeback.labels("sent").inc(len(batch) - rejected)
            return

    def _delay(self, attempt: int, asked_s: float | None) -> float:
        """The endpoint's Retry-After / RetryInfo when it gave one (bounded), else exponential
        backoff. At shutdown close() bounds every wait anyway."""
        if asked_s is not None and asked_s <= MAX_RETRY_DELAY_S:
            return asked_s
        return float(self.backoff_s * 2 ** (attempt - 1))


def now_ns() -> int:
    return time.time_ns()
