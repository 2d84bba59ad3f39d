"""Write-back: each live result sent to an OTLP logs endpoint as `gen_ai.evaluation.result`
log records (OTel GenAI semantic conventions, events.yaml), one per assertion, on the graded
run's trace and root span, so grades show up in the tracing backend beside the run.

Grading never waits for it: records go into a bounded queue (full: the oldest are dropped and
counted) and one task exports them in batches over grpc.aio, retrying transient failures with
exponential backoff. Hand-written on opentelemetry-proto rather than the OTel SDK's log
exporter: the SDK's batch processor drops and fails silently, and every record here must be
accounted for in the metrics.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Iterable

import grpc
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from trajgrade.server.metrics import LiveMetrics
from trajgrade.v1 import result_pb2

log = logging.getLogger("trajgrade.live.writeback")

EVENT_NAME = "gen_ai.evaluation.result"
EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
# Retried as OTLP/gRPC says transient: the rest (e.g. INVALID_ARGUMENT) are dropped at once.
_RETRYABLE = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    }
)
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
    """The bounded, batched, retrying OTLP/gRPC logs exporter of live results."""

    def __init__(
        self,
        endpoint: str,
        metrics: LiveMetrics,
        *,
        queue_size: int = 10_000,
        batch_size: int = 512,
        max_attempts: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 10.0,
    ) -> None:
        self.endpoint = endpoint.removeprefix("http://").removeprefix("grpc://")
        self.metrics = metrics
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self._queue: collections.deque[LogRecord] = collections.deque(maxlen=queue_size)
        self._wake = asyncio.Event()
        self._closing = False
        self._channel: grpc.aio.Channel | None = None
        self._task: asyncio.Task[None] | None = None
        self._resource = Resource(attributes=[_kv("service.name", "trajgrade")])
        self._scope = InstrumentationScope(name="trajgrade.live")

    def start(self) -> None:
        """On the server's loop: the channel (grpc.aio binds to the running loop) and the task."""
        self._channel = grpc.aio.insecure_channel(self.endpoint)
        self._export = self._channel.unary_unary(
            EXPORT,
            request_serializer=ExportLogsServiceRequest.SerializeToString,
            response_deserializer=ExportLogsServiceResponse.FromString,
        )
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="trajgrade-live-writeback"
        )

    def add(self, new: Iterable[LogRecord]) -> None:
        """Queue records (never blocks; a full queue drops its oldest, counted)."""
        for record in new:
            if len(self._queue) == self._queue.maxlen:
                self.metrics.writeback.labels("dropped_queue_full").inc()
            self._queue.append(record)
        self._wake.set()

    async def close(self, timeout_s: float = 5.0) -> None:
        """Send what is queued (bounded by `timeout_s`), then stop."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout_s)
            except TimeoutError:
                self._task.cancel()
            if self._queue:
                self.metrics.writeback.labels("dropped_shutdown").inc(len(self._queue))
                log.warning("write-back: %d records not sent at shutdown", len(self._queue))
                self._queue.clear()
        if self._channel is not None:
            await self._channel.close()

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                # close() gave up waiting (e.g. mid-backoff): the batch in hand is lost too.
                self.metrics.writeback.labels("dropped_shutdown").inc(len(batch))
                raise

    async def _send(self, batch: list[LogRecord]) -> None:
        request = ExportLogsServiceRequest(
            resource_logs=[
                ResourceLogs(
                    resource=self._resource,
                    scope_logs=[ScopeLogs(scope=self._scope, log_records=batch)],
                )
            ]
        )
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = await self._export(request, timeout=self.timeout_s)
            except grpc.aio.AioRpcError as exc:
                retry = exc.code() in _RETRYABLE and attempt < self.max_attempts
                self.metrics.writeback_errors.labels(exc.code().name).inc()
                log.warning(
                    "write-back to %s failed (%s, attempt %d of %d)%s",
                    self.endpoint,
                    exc.code().name,
                    attempt,
                    self.max_attempts,
                    ": retrying" if retry else f": {len(batch)} records dropped",
                )
                if not retry:
                    self.metrics.writeback.labels("failed").inc(len(batch))
                    return
                # Exponential backoff; at shutdown, no waiting beyond close()'s bound.
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
                continue
            rejected = response.partial_success.rejected_log_records
            if rejected:
                self.metrics.writeback.labels("rejected").inc(rejected)
                log.warning(
                    "write-back: %d records rejected: %s",
                    rejected,
                    response.partial_success.error_message,
                )
            self.metrics.writeback.labels("sent").inc(len(batch) - rejected)
            return


def now_ns() -> int:
    return time.time_ns()
