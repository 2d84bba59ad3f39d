"""Live grading: received spans → assembled runs → the importer's mapping → routed suites →
results on WatchResults, in the metrics and in the JSONL sink.

Everything runs on the server's event loop except the mapping and grading of trips of more
than a few completed runs (one worker thread, so results leave in completion order) and the
sink's writes (another). One loop timer drives every run's settle time and idle timeout.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import itertools
import json
import logging
import operator
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTracePartialSuccess
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

from trajgrade import _core
from trajgrade.importers import otlp
from trajgrade.importers.otlp import EventRecord
from trajgrade.importers.report import ImportReport
from trajgrade.live import early, timing
from trajgrade.live.assembly import AddOutcome, Assembler, AssemblyConfig, Run
from trajgrade.live.deadline import LoopDeadline
from trajgrade.live.early import EarlySuite, EarlySuites
from trajgrade.live.intake import Done, Intake, Steps, run_through, slices
from trajgrade.live.records import LiveSpan, SpanRow, picked
from trajgrade.live.routes import Routes, RoutesError, RoutesFile, SuiteRef
from trajgrade.live.sink import JsonlSink, SinkWriter
from trajgrade.live.watch import Published, WatchHub
from trajgrade.live.writeback import LogWriter, now_ns, records
from trajgrade.server.metrics import LiveMetrics
from trajgrade.server.settings import Settings
from trajgrade.v1 import grader_service_pb2, result_pb2
from trajgrade.wire import LENGTH_DELIMITED, encode_varint, length_delimited

log = logging.getLogger("trajgrade.live")

# Drain: the write-back's flush without a grace period; what the end of grading may take past
# the grace period (the run being graded, the publishing of its trip).
_DEFAULT_FLUSH_S = 5.0
_GRADING_MARGIN_S = 1.0
# Runs graded in one trip to the grading thread, whose results are then published on the loop
# at once (bounds the time the drain spends past its deadline).
_RUNS_PER_TRIP = 128
# Trips of at most this many runs are graded on the loop itself (tens of µs a run) rather
# than on the grading thread: its two hand-offs (a wake-up of another thread, then of the
# loop, and the GIL handed over each way) cost milliseconds on a busy machine.
_INLINE_RUNS = 16
# Late runs logged one line each per export; the rest of an export's in one line.
_LATE_LINES = 5
# ... and of at most the server's --inline-grade-bytes of spans and events (0: never), as
# for a unary batch: a run's mapping and grading work grows with its size, and the loop also
# serves every other caller (GradeTrace, the exporters), so a large trip goes to the thread.
_VERDICT_NAME = {v.number: v.name for v in result_pb2.Verdict.DESCRIPTOR.values}
_PASS = result_pb2.AssertionStatus.Name(result_pb2.ASSERTION_STATUS_PASS)
_FAIL = result_pb2.AssertionStatus.Name(result_pb2.ASSERTION_STATUS_FAIL)


class LiveResult:
    """One run graded against one suite. Its `TraceOutcome` is decoded only when read (the
    write-back, early verdicts' settling): the metrics count the core's tally, the sink and
    WatchResults take the core's bytes."""

    __slots__ = (
        "_outcome",
        "completion",
        "cut_off",
        "outcome_bytes",
        "root_span_id",
        "root_trace_id",
        "row",
        "run_key",
        "score",
        "service",
        "suite_id",
        "verdict",
    )

    def __init__(  # noqa: PLR0917 - a record's fields, positional as the callers pass them
        self,
        run_key: str,
        suite_id: str,
        service: str,
        cut_off: bool,
        completion: str,
        outcome: result_pb2.TraceOutcome | None = None,
        # The run's root span (hex ids), which write-back records point at (empty without
        # write-back).
        root_trace_id: str = "",
        root_span_id: str = "",
        # The outcome as the core encoded it (empty: encode `outcome`).
        outcome_bytes: bytes = b"",
        # Its regrade row, without the newline (empty: made by sink_line).
        row: bytes = b"",
        # Its verdict number (0: an error) and score, from the core's tally (None: read them
        # from the outcome).
        verdict: int | None = None,
        score: float = 0.0,
    ) -> None:
        if outcome is None and not outcome_bytes:
            raise ValueError("a LiveResult needs its outcome or the outcome's bytes")
        self.run_key, self.suite_id, self.service = run_key, suite_id, service
        self.cut_off, self.completion = cut_off, completion
        self._outcome = outcome
        self.root_trace_id, self.root_span_id = root_trace_id, root_span_id
        self.outcome_bytes, self.row = outcome_bytes, row
        if verdict is None:
            decoded = self.outcome
            is_result = decoded.WhichOneof("outcome") == "result"
            verdict = decoded.result.verdict if is_result else 0
            score = decoded.result.score if is_result else 0.0
        self.verdict, self.score = verdict, score

    @property
    def outcome(self) -> result_pb2.TraceOutcome:
        if self._outcome is None:
            self._outcome = result_pb2.TraceOutcome.FromString(self.outcome_bytes)
        return self._outcome

    def sink_line(self) -> bytes:
        """The regrade row (byte for byte what `trajgrade regrade` writes for the same spans:
        the core writes both) with one more key, `live`, that regrade readers ignore: how the
        run was completed."""
        row = self.row
        if not row:
            raw = self.outcome_bytes or self.outcome.SerializeToString()
            row = _core.outcome_block(self.suite_id, [raw], 0).rows[:-1]
        return row[:-1] + b',"live":' + _live_json(self.service, self.completion, self.cut_off)

    def response(self) -> bytes:
        """The encoded WatchResultsResponse: its own fields, then the outcome's `result` or
        `error` as the core encoded it, re-tagged as the response's field (fields may come in
        any order on the wire), instead of copying the decoded result into a new message and
        encoding it again."""
        raw = self.outcome_bytes
        tag = _RESPONSE_TAG.get(raw[:1])
        if tag is not None:
            head = _response_head(self.suite_id, self.service, self.cut_off, self.completion)
            key = length_delimited(_RUN_KEY_FIELD, self.run_key.encode())
            return key + head + tag + raw[1:]
        message = grader_service_pb2.WatchResultsResponse(
            trace_id=self.run_key,
            suite_id=self.suite_id,
            service_name=self.service,
            cut_off=self.cut_off,
            completion=self.completion,
        )
        if self.outcome.WhichOneof("outcome") == "error":
            message.error.CopyFrom(self.outcome.error)
        else:
            message.result.CopyFrom(self.outcome.result)
        return message.SerializeToString()


def _len_tag(message: Any, field: str) -> bytes:
    """A length-delimited field's tag (one byte: field numbers below 16)."""
    return encode_varint(message.DESCRIPTOR.fields_by_name[field].number << 3 | LENGTH_DELIMITED)


# A TraceOutcome's one field (result or error) -> the same field's tag in WatchResultsResponse.
_RESPONSE_TAG = {
    _len_tag(result_pb2.TraceOutcome, name): _len_tag(grader_service_pb2.WatchResultsResponse, name)
    for name in ("result", "error")
}
_RUN_KEY_FIELD = grader_service_pb2.WatchResultsResponse.DESCRIPTOR.fields_by_name[
    "trace_id"
].number


@functools.lru_cache(maxsize=1024)
def _response_head(suite_id: str, service: str, cut_off: bool, completion: str) -> bytes:
    """A WatchResultsResponse's fields but the run's key and outcome (few distinct ones)."""
    return grader_service_pb2.WatchResultsResponse(
        suite_id=suite_id, service_name=service, cut_off=cut_off, completion=completion
    ).SerializeToString()


@functools.lru_cache(maxsize=1024)
def _live_json(service: str, completion: str, cut_off: bool) -> bytes:
    """A sink row's `live` value and the row's end (few distinct ones: made once each)."""
    live = {"service": service, "completion": completion, "cut_off": cut_off}
    return json.dumps(live, ensure_ascii=False, separators=(",", ":")).encode() + b"}\n"


def root_span(run: Run) -> tuple[str, str]:
    """(trace id, span id) of the run's root: the first trace's parentless span (with
    --live-group-by, the run's first trace), else its earliest span (a run cut off early)."""
    if not run.spans:
        return "", ""
    first = run.trace_ids[0] if run.trace_ids else run.spans[0].trace_id
    roots = [s for s in run.spans if s.trace_id == first and s.parent == ""]
    span = min(roots or run.spans, key=lambda s: (s.start, s.order))
    return span.trace_id, span.span_id


@dataclass(frozen=True)
class DrainReport:
    """What the SIGTERM drain left undone: all 0 when every open run was graded, and its
    results published, written to the sink and written back."""

    runs_open: int = 0
    runs_not_graded: int = 0  # grace_expired
    writeback_unsent: int = 0  # dropped_shutdown
    sink_unwritten: int = 0
    # Records the endpoint failed or rejected during the drain (never retried after it).
    writeback_failed: int = 0

    @property
    def lost(self) -> bool:
        """Results were lost: the server exits with EXIT_LIVE_LOST (server/app.py)."""
        return bool(
            self.runs_not_graded or self.writeback_unsent or self.sink_unwritten
            or self.writeback_failed
        )  # fmt: skip

    @property
    def out_of_time(self) -> bool:
        """The loss is the grace period's (not a disk's or an endpoint's failure)."""
        return bool(self.runs_not_graded or self.writeback_unsent)


@dataclass
class Trip:
    """Runs sent to the grading thread at once. The thread commits each graded run (its
    results and counts) under `lock`; once the loop `closed` it (the trip is published, or
    abandoned by the drain) nothing more is committed, so every run is counted once: graded
    (`runs[:done]`) or by the loop (the rest)."""

    runs: list[Run]
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: int = 0
    results: list[LiveResult] = field(default_factory=list)
    # The committed results' assertions, counted by the core: (suite id, name, passed, failed).
    assertions: list[tuple[str, str, int, int]] = field(default_factory=list)
    closed: bool = False


# (suite id, assertion name, passed, failed) of a batch of results, from `_core.outcome_tally`.
AssertionCounts = list[tuple[str, str, int, int]]


@dataclass(frozen=True)
class EarlyCheck:
    """An open run as it stood when its early check was taken (copies: the loop goes on
    adding to the run while the grading thread maps these)."""

    run: Run
    spans: list[Any]
    events: list[Any]


@dataclass(frozen=True)
class EarlyVerdict:
    """One early failure, ready to publish."""

    suite_id: str
    service: str
    payload: bytes


class _NeedsPoolError(Exception):
    """A trace of a trip graded on the loop needed more than inline_work_units."""


class LiveGrader:
    """The live grading of one server process."""

    def __init__(self, settings: Settings, grader: _core.Grader, metrics: LiveMetrics) -> None:
        assert settings.routes is not None
        self.settings = settings
        self.grader = grader
        self.metrics = metrics
        self.routes = RoutesFile(settings.routes, grader, early=settings.early_verdicts)
        self.early_suites = EarlySuites(grader)
        # Open runs waiting for an early check, by key (a run is checked once however many
        # requests touched it meanwhile); those checked less than --live-early-interval-ms
        # ago wait in _early_later for the one timer that moves them here.
        self._early_due: dict[str, Run] = {}
        self._early_later: dict[str, Run] = {}
        self._early_timer: asyncio.TimerHandle | None = None
        self._early_interval_s = settings.live_early_interval_ms / 1000
        self.assembler = Assembler(
            AssemblyConfig(
                group_by=settings.live_group_by,
                settle_s=settings.live_settle_s,
                idle_timeout_s=settings.live_idle_timeout_s,
                max_open_traces=settings.live_max_open_traces,
                max_spans_per_trace=settings.live_max_spans_per_trace,
                max_bytes=settings.live_max_bytes,
                on_cap=settings.live_on_cap,
                late_window_s=settings.late_window_s,
                late_memory=settings.live_late_memory,
            )
        )
        self.hub = WatchHub(settings.watch_queue_size)
        self.intake = Intake()
        # Gauges read at scrape, not set on every export, timer and trip.
        assembler = self.assembler
        metrics.open_traces.set_function(lambda: assembler.open_runs)
        metrics.held_bytes.set_function(lambda: assembler.bytes_held)
        metrics.exports_waiting.set_function(self.intake.__len__)
        metrics.graded_ids.set_function(lambda: assembler.graded_ids)
        metrics.watchers.set_function(self.hub.__len__)
        self.sink = (
            None
            if settings.results_jsonl is None
            else JsonlSink(
                settings.results_jsonl,
                max_bytes=settings.results_jsonl_max_bytes,
                keep=settings.results_jsonl_keep,
            )
        )
        self._sink_writer = None if self.sink is None else SinkWriter(self.sink, metrics)
        self.writer = (
            None
            if settings.otlp_export_endpoint is None
            else LogWriter(settings.export_target(), metrics)
        )
        self._grading = concurrent.futures.ThreadPoolExecutor(1, "trajgrade-live")
        self._completed: asyncio.Queue[list[Run] | None] = asyncio.Queue()
        # The one timer of every open run (see _arm_timer), made on the loop when first armed.
        self._timer: LoopDeadline | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._report = DrainReport()
        # intake_keys(): the routes they were made for, the keys, and what the core's intake
        # takes with them (their set, and the conversion of a key that holds no string).
        self._keys_for: Routes | None = None
        self._keys_list: list[str] = []
        self._keys_taken: frozenset[str] = frozenset()
        self._keys_convert = _converter([])
        # A routes reload is compiling on the grading thread: trips go there too, after it.
        self._reloading = False
        # Set by drain(): the grading thread grades no run after it (monotonic time).
        self._deadline: float | None = None
        self._past_deadline = 0
        # The trip on the grading thread (the drain's to settle if it abandons the worker).
        self._trip: Trip | None = None
        # The worker waits for completed runs (a settle timer may then grade a trip itself).
        self._worker_idle = False
        # _grade_now found a trace over --inline-work-units: the worker's next trip goes
        # straight to the grading thread.
        self._to_thread = False
        # Result metrics' children by (metric, labels): see _child.
        self._children: dict[tuple[Any, ...], Any] = {}
        # TRAJGRADE_LIVE_TIMING: each run's times, written at the drain (debug only).
        self._timing = timing.from_env()
        self.hub.timing = self._timing

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Load the routes (an error stops startup) and start the timer, worker and poller."""
        try:
            routes = self.routes.load()
        except RoutesError as exc:
            raise RoutesError(f"--routes: {exc}") from exc
        self.metrics.routes_reloads.labels("ok").inc()
        log.info("live grading: %d routes from %s", len(routes.routes), self.routes.path)
        loop = asyncio.get_running_loop()
        if self.writer is not None:
            self.writer.start()
        self._tasks = [
            loop.create_task(self._worker(), name="trajgrade-live-worker"),
            loop.create_task(self._poll_routes(), name="trajgrade-live-routes"),
        ]

    def reload_routes(self) -> None:
        """SIGHUP: load the routes file again, changed or not."""
        self.metrics.routes_reloads.labels(self.routes.reload(force=True)).inc()

    async def _close_intake(self, deadline: float | None) -> None:
        """The exports already accepted are taken first (their runs are then open and graded
        by the drain); any the grace period leaves no time for are answered UNAVAILABLE."""
        untaken = await self.intake.close(_left(deadline, 0.0))
        if untaken:
            log.warning("draining: %d exports not taken in time: answered UNAVAILABLE", untaken)

    async def drain(self, grace_s: float | None = None) -> DrainReport:
        """SIGTERM: every open run graded as cut off (completion `shutdown`), its results
        published, written to the sink and written back, then the watchers' streams end.

        With `grace_s` (the server's grace period) all of that ends by then: runs not graded
        in time are counted as dropped (`grace_expired`), records not sent as
        `dropped_shutdown`, both logged; nothing is waited for past it. Returns what was
        left undone (the same report on a second call).
        """
        if self._closed:
            return self._report
        deadline = None if grace_s is None else time.monotonic() + grace_s
        await self._close_intake(deadline)
        self._closed = True
        self._deadline = deadline
        failed_before = 0 if self._sink_writer is None else self._sink_writer.failed_rows
        refused_before = 0 if self.writer is None else self.writer.lost
        runs = self.assembler.close_all()
        if runs:
            log.info("draining: grading %d open runs as cut off", len(runs))
            # In trips, each published as it is graded: what is graded by the deadline is out.
            for start in range(0, len(runs), _RUNS_PER_TRIP):
                self._completed.put_nowait(runs[start : start + _RUNS_PER_TRIP])
        self._completed.put_nowait(None)
        if self._early_timer is not None:
            self._early_timer.cancel()
        if self._timer is not None:
            self._timer.close()
        for task in self._tasks:
            if task.get_name() != "trajgrade-live-worker":
                task.cancel()
        await self._finish_grading(deadline)
        unwritten = 0
        if self._sink_writer is not None:
            # The sink's last writes: until the grading's end (the deadline and its margin).
            unwritten = await self._sink_writer.finish(_left(deadline, _GRADING_MARGIN_S))
            unwritten += self._sink_writer.failed_rows - failed_before
        self._count_forgotten()
        unsent = refused = 0
        if self.writer is not None:
            unsent = await self.writer.close(
                _DEFAULT_FLUSH_S if deadline is None else max(deadline - time.monotonic(), 0.0)
            )
            refused = self.writer.lost - refused_before
        report = DrainReport(len(runs), self._past_deadline, unsent, unwritten, refused)
        self._report = report
        if report.lost:
            log.warning(
                "draining: %s: %d of %d open runs not graded "
                '(trajgrade_live_traces_dropped_total{reason="grace_expired"}), %d write-back '
                "records not sent (dropped_shutdown), %d failed or rejected by the endpoint "
                '(trajgrade_live_writeback_records_total{outcome="failed"/"rejected"}), '
                "%d sink rows not written (trajgrade_live_sink_rows_unwritten_total)",
                "the grace period ran out" if report.out_of_time else "results were lost",
                report.runs_not_graded,
                report.runs_open,
                report.writeback_unsent,
                report.writeback_failed,
                report.sink_unwritten,
                extra={
                    "runs_open": report.runs_open,
                    "runs_not_graded": report.runs_not_graded,
                    "writeback_unsent": report.writeback_unsent,
                    "writeback_failed": report.writeback_failed,
                    "sink_unwritten": report.sink_unwritten,
                },
            )
        self.hub.close()
        # Never block the loop: the threads are idle by now, or were given up on.
        self._grading.shutdown(wait=False)
        if self._sink_writer is not None:
            self._sink_writer.close()
        if self._timing is not None:
            self.hub.collect_timing()
            self._timing.write()
        return self._report

    async def _finish_grading(self, deadline: float | None) -> None:
        """Wait for the worker: the grading thread stops at the deadline between two runs, the
        margin covers the run it is on and the publishing of its trip."""
        if not self._tasks:
            return
        _, late = await asyncio.wait(self._tasks, timeout=_left(deadline, _GRADING_MARGIN_S))
        for task in late:
            log.error("draining: grading still busy past the grace period; abandoned")
            task.cancel()
        if late:
            await asyncio.wait(late)
            if self._trip is not None:
                # What the thread graded of its trip is published; the rest counted.
                self._close_trip(self._trip)
        # Runs the worker did not get to, if it was abandoned: counted all the same.
        while not self._completed.empty():
            left = self._completed.get_nowait()
            if left is not None:
                self._expired(left)

    # --- intake -------------------------------------------------------------------------------

    def take_traces(self, request: bytes | _core.OtlpExport, done: Done) -> None:
        """Take one traces export (protobuf bytes, or the core transport's export, decoded as
        it arrived) in the intake's order (live/intake.py): `done` gets its partial success
        (what was not accepted), now or once taken, or the exception that ended it
        (ValueError: malformed, before anything was taken; ShuttingDownError)."""
        self.intake.submit(self._traces_steps(request), done)

    async def traces(self, request: bytes | _core.OtlpExport) -> ExportTracePartialSuccess:
        """take_traces(), awaited (raises what it would pass to `done`)."""
        return await self.intake.run(self._traces_steps(request))

    def export_traces(self, request: bytes | _core.OtlpExport) -> ExportTracePartialSuccess:
        """take_traces() in one piece, here, outside the intake's order (bench/live_stages.py
        times the intake's cost with it)."""
        return run_through(self._traces_steps(request))

    def _traces_steps(self, request: bytes | _core.OtlpExport) -> Steps[ExportTracePartialSuccess]:
        keys = self.intake_keys()
        taken, convert = self._keys_taken, self._keys_convert  # made once per routes load
        if isinstance(request, bytes):
            spans, rows = _incoming(request, keys, taken, convert)
        else:
            spans, rows = request.spans(keys, taken, convert)
        # Slices of a request's rows; with --live-group-by one piece (a run is then not one
        # trace, and a slice could end inside it).
        pieces = slices(rows) if self.settings.live_group_by is None else iter([rows])
        total = AddOutcome()
        for index, piece in enumerate(pieces):
            if index:
                yield  # the loop's other work, then the next slice
            outcome = self.assembler.add_spans(spans, time.monotonic(), piece)
            self._after(outcome)
            total.add(outcome)
        rejected = total.rejected + total.late
        if not rejected:
            return ExportTracePartialSuccess()
        return ExportTracePartialSuccess(rejected_spans=rejected, error_message=_why(total))

    def intake_keys(self) -> list[str]:
        """The attributes assembly and routing read of each span (one list per routes load:
        the same object until the routes change)."""
        routes = self.routes.current
        if self._keys_for is not routes:
            keys = {"service.name", *routes.keys}
            if self.settings.live_group_by is not None:
                keys.add(self.settings.live_group_by)
            self._keys_for, self._keys_list = routes, sorted(keys)
            self._keys_taken = frozenset(self._keys_list)
            self._keys_convert = _converter(self._keys_list)
        return self._keys_list

    def take_logs(self, request: ExportLogsServiceRequest, done: Done) -> None:
        """Take one logs export (the GenAI events of runs being assembled) in the intake's
        order, as take_traces()."""
        self.intake.submit(self._logs_steps(request), done)

    async def logs(self, request: ExportLogsServiceRequest) -> ExportLogsPartialSuccess:
        """take_logs(), awaited."""
        return await self.intake.run(self._logs_steps(request))

    def export_logs(self, request: ExportLogsServiceRequest) -> ExportLogsPartialSuccess:
        """take_logs() in one piece, here, outside the intake's order."""
        return run_through(self._logs_steps(request))

    def _logs_steps(self, request: ExportLogsServiceRequest) -> Steps[ExportLogsPartialSuccess]:
        yield from ()  # one step (a generator: taken in the intake's order, when its turn comes)
        report = ImportReport()
        events = otlp.event_records(request, report)
        outcome = self.assembler.add_events(events, time.monotonic())
        self._after(outcome)
        rejected = outcome.rejected + outcome.late
        if not rejected:
            return ExportLogsPartialSuccess()
        return ExportLogsPartialSuccess(rejected_log_records=rejected, error_message=_why(outcome))

    def _after(self, outcome: AddOutcome) -> None:
        if self._timing is not None:
            self._timing.arrived(r.key for r in (*outcome.complete, *outcome.open_touched))
            self._timing.completed(r.key for r in outcome.complete)
        for name, count in outcome.counts.items():
            self._child(self.metrics.spans, name).inc(count)
        late = outcome.late_runs
        if late:
            self.metrics.late_traces.inc(len(late))
        # A line per late run, up to a few an export (a replayed export can name thousands):
        # then one line for the rest, with their counts.
        for key, count in itertools.islice(late.items(), _LATE_LINES):
            log.warning(
                "%d late spans for run %s, already graded: counted, not merged",
                count,
                key,
                extra={"trace_id": key, "late_spans": count},
            )
        if len(late) > _LATE_LINES:
            rest = list(late.values())[_LATE_LINES:]
            log.warning(
                "%d late spans for %d more runs of the same export, already graded: counted, "
                "not merged",
                sum(rest),
                len(rest),
                extra={"late_runs": len(rest), "late_spans": sum(rest)},
            )
        if outcome.complete:
            self._completed.put_nowait(outcome.complete)
        if self.settings.early_verdicts:
            self._schedule_early(outcome.open_touched)
        self._count_forgotten()
        self._arm_timer()

    def _schedule_early(self, runs: list[Run]) -> None:
        """Runs due for an early check now, or (checked less than the interval ago) later:
        each open run is checked at most once per interval, whatever its spans' pace."""
        wake = not self._early_due
        now = asyncio.get_running_loop().time()
        for run in runs:
            if len(run.spans) > self.settings.live_early_max_spans:
                continue
            if now - run.early_at >= self._early_interval_s:
                self._early_due[run.key] = run
            else:
                self._early_later[run.key] = run
        self._arm_early()
        if wake and self._early_due:
            self._completed.put_nowait([])  # wakes the worker

    def _arm_early(self) -> None:
        if self._early_timer is not None or not self._early_later or self._closed:
            return
        at = min(run.early_at for run in self._early_later.values()) + self._early_interval_s
        self._early_timer = asyncio.get_running_loop().call_at(at, self._early_tick)

    def _early_tick(self) -> None:
        """The interval of some waiting runs is over: due now (the rest wait on)."""
        self._early_timer = None
        now, interval = asyncio.get_running_loop().time(), self._early_interval_s
        ready = [r for r in self._early_later.values() if now - r.early_at >= interval]
        for run in ready:
            del self._early_later[run.key]
        self._schedule_early([run for run in ready if not run.completion])

    def _take_early(self) -> list[EarlyCheck]:
        """The due checks of runs still open that changed since their last check."""
        due, self._early_due = self._early_due, {}
        checks = []
        for run in due.values():
            if run.completion or run.early_checked == run.version:
                continue
            if len(run.spans) > self.settings.live_early_max_spans:
                continue
            run.early_checked = run.version
            run.early_at = asyncio.get_running_loop().time()
            checks.append(EarlyCheck(run, list(run.spans), list(run.events)))
        return checks

    def _count_forgotten(self) -> None:
        """The graded ids assembly forgot since the last call (the gauges are read at scrape)."""
        for reason, count in self.assembler.take_forgotten().items():
            self.metrics.graded_ids_forgotten.labels(reason).inc(count)

    # --- timers and grading -------------------------------------------------------------------

    def _arm_timer(self) -> None:
        """Arm the one timer of every open run for the next settle time or idle timeout: a
        loop callback at that time (to the microsecond: live/deadline.py), moved only when a
        deadline comes earlier (a span only pushes its run's later), so an export costs no
        wake-up and the deadline no task."""
        deadline = self.assembler.next_deadline()
        if deadline is None or self._closed:
            return
        timer = self._timer
        if timer is None:
            timer = self._timer = LoopDeadline(asyncio.get_running_loop(), self._on_timer)
        elif timer.at is not None and timer.at <= deadline:
            return
        timer.arm(deadline)

    def _on_timer(self) -> None:
        due = self.assembler.due(time.monotonic())
        if due:
            if self._timing is not None:
                self._timing.completed(r.key for r in due)
            self._count_forgotten()
        self._arm_timer()
        if due and not self._grade_now(due):
            self._completed.put_nowait(due)

    def _grade_now(self, runs: list[Run]) -> bool:
        """Grade a small trip right here, in the settle timer's callback, when the worker
        waits idle with nothing queued (it would take the same trip one loop iteration later,
        behind whatever else is ready); False: the worker's (a trip over the inline bounds, a
        trace over --inline-work-units, early checks waiting, a reload, the drain)."""
        idle = self._worker_idle and self._completed.empty() and not self._early_due
        if not idle or self._closed:
            return False
        trip = Trip(runs)
        if not self._inline(trip):
            return False
        self._trip = trip
        try:
            if not self._grade_inline(trip, self.routes.current):
                # The worker's next trip (these runs first: nothing was queued) goes to the
                # thread without trying the loop again.
                self._to_thread = True
                return False
        except Exception:
            log.exception("live grading failed for %d runs", len(runs))
        finally:
            self._trip = None
        self._close_trip(trip)
        return True

    def _grade_inline(self, trip: Trip, routes: Any) -> bool:
        """Grade the trip here, each trace within --inline-work-units, without waking the
        core's pool; False when a trace needs more (nothing was committed: grade it on the
        thread, with the full limit)."""
        try:
            self._grade(trip, routes, self.settings.inline_work_units)
        except _NeedsPoolError:
            return False
        return True

    def _inline(self, trip: Trip) -> bool:
        """The trip may be graded on the loop: a few small runs, no drain, no reload."""
        small = len(trip.runs) <= _INLINE_RUNS and sum(r.size for r in trip.runs) <= (
            self.settings.inline_grade_bytes
        )
        return small and self._deadline is None and not self._reloading

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._worker_idle = True
            try:
                runs = await self._completed.get()
            finally:
                self._worker_idle = False
            if runs is None:
                return
            if self._past(runs):
                continue
            # Take the runs already completed: one trip to the grading thread for up to
            # _RUNS_PER_TRIP (their results are published between trips).
            while not self._completed.empty() and len(runs) < _RUNS_PER_TRIP:
                more = self._completed.get_nowait()
                if more is None:
                    self._completed.put_nowait(None)
                    break
                runs.extend(more)
            checks = self._take_early()
            if not runs and not checks:
                continue
            routes = self.routes.current
            if checks:
                # Before the completed runs: a run's early verdicts precede its result.
                try:
                    verdicts = await loop.run_in_executor(
                        self._grading, self._check_early, checks, routes
                    )
                except Exception:
                    log.exception("early checks failed for %d runs", len(checks))
                else:
                    self._publish_early(verdicts)
            if not runs:
                continue
            trip = self._trip = Trip(runs)
            try:
                await self._run_trip(trip, routes)
            except Exception:
                log.exception("live grading failed for %d runs", len(runs))
            # Cancelled (the drain abandoned it): the drain closes the trip.
            self._trip = None
            self._close_trip(trip)

    async def _run_trip(self, trip: Trip, routes: Any) -> None:
        to_thread, self._to_thread = self._to_thread, False
        if not to_thread and self._inline(trip) and self._grade_inline(trip, routes):
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._grading, self._grade, trip, routes)

    def _close_trip(self, trip: Trip) -> None:
        """On the loop: publish what the thread committed; the runs it did not are counted,
        as grace_expired past the drain's deadline (else as errors: the trip failed)."""
        with trip.lock:
            trip.closed = True
            results, rest = trip.results, trip.runs[trip.done :]
        self._publish(results, trip.assertions)
        if self._deadline is not None:
            self._expired(rest)
            return
        for run in rest:
            self.metrics.traces.labels(run.completion).inc()
            self._drop(run, "error")

    def _grade(self, trip: Trip, routes: Any, cap: int | None = None) -> None:
        """On the grading thread (on the loop for a small trip, each trace within `cap` work
        units, else _NeedsPoolError before anything is committed): map, route and grade the trip's
        runs (all at once; one by one once the drain has begun, so that its deadline falls
        between two runs) and commit each (one failing run is logged and counted, and the
        others go on)."""
        step = len(trip.runs) if self._deadline is None else 1
        for start in range(0, len(trip.runs), step):
            if self._deadline is not None and time.monotonic() >= self._deadline:
                return
            runs = trip.runs[start : start + step]
            try:
                graded, counts = self._grade_runs(runs, routes, cap)
            except _NeedsPoolError:
                raise
            except Exception:
                # Find the failing run: the others are graded.
                graded, counts = [], []
                for run in runs:
                    outcome, more = self._grade_alone(run, routes, cap)
                    graded.append(outcome)
                    counts.extend(more)
            if not self._commit(trip, start, runs, graded, counts):
                return

    def _grade_alone(
        self, run: Run, routes: Any, cap: int | None
    ) -> tuple[list[LiveResult] | str, AssertionCounts]:
        try:
            graded, counts = self._grade_runs([run], routes, cap)
        except _NeedsPoolError:
            raise
        except Exception:
            log.exception("run %s could not be graded", run.key, extra={"trace_id": run.key})
            return "error", []
        return graded[0], counts

    def _commit(
        self,
        trip: Trip,
        start: int,
        runs: list[Run],
        graded: list[list[LiveResult] | str],
        counts: AssertionCounts,
    ) -> bool:
        """Commit graded runs and their assertions' counts to the trip, in order (False: the
        drain abandoned the trip)."""
        with trip.lock:
            if trip.closed:
                return False  # abandoned by the drain, which counted these runs and the rest
            trip.assertions.extend(counts)
            # Counted per batch: a label set's child is incremented once, not once a run.
            completions: collections.Counter[str] = collections.Counter()
            spans: collections.Counter[str] = collections.Counter()
            for index, (run, outcome) in enumerate(zip(runs, graded, strict=True)):
                trip.done = start + index + 1
                completions[run.completion] += 1
                results = [] if isinstance(outcome, str) else outcome
                if isinstance(outcome, str):
                    self._drop(run, outcome)
                else:
                    spans["graded" if results else "unrouted"] += len(run.spans)
                if run.early_sent:
                    self._settle_early(run, results)
                trip.results.extend(results)
            for completion, count in completions.items():
                self._child(self.metrics.traces, completion).inc(count)
            for outcome_name, count in spans.items():
                self._child(self.metrics.spans, outcome_name).inc(count)
        return True

    def _settle_early(self, run: Run, graded: list[LiveResult]) -> None:
        """Count what the final results made of the run's early verdicts."""
        finals = {
            r.suite_id: r.outcome.result
            for r in graded
            if r.outcome.WhichOneof("outcome") == "result"
        }
        for suite_id, index in run.early_sent:
            final = finals.get(suite_id)
            if final is None or index >= len(final.results):
                outcome = "not_graded"
            elif final.results[index].status == result_pb2.ASSERTION_STATUS_FAIL:
                outcome = "confirmed"
            else:
                outcome = "overturned"
            self.metrics.early_outcomes.labels(outcome).inc()

    def _check_early(self, checks: list[EarlyCheck], routes: Any) -> list[EarlyVerdict]:
        """On the grading thread: grade each open run's spans so far against the early
        sub-suites of its routed suites; each new early failure once per run, suite and
        assertion."""
        out: list[EarlyVerdict] = []
        for check in checks:
            try:
                out.extend(self._check_run(check, routes))
            except Exception:
                run = check.run
                log.exception("early check of run %s failed", run.key, extra={"trace_id": run.key})
        return out

    def _check_run(self, check: EarlyCheck, routes: Any) -> list[EarlyVerdict]:
        run = check.run
        subs = [sub for ref in routes.suites_for(check.spans) if (sub := self._early(ref, routes))]
        if not subs:
            return []
        self.metrics.early_checks.inc()
        group_by = self.settings.live_group_by
        # The run's flag only goes from in order to not: read now, it holds for the copy.
        parts = _parts(check.spans, check.events, run.in_order)
        (payload,) = _core.map_otlp_runs([parts], group_by)
        if isinstance(payload, str):
            raise ValueError(payload)  # logged by _check_early
        if payload is None:
            return []
        out = []
        for sub in subs:
            outcome = result_pb2.TraceOutcome.FromString(sub.compiled.grade_batch([payload])[0])
            for index, item in sub.failures(outcome):
                if (sub.suite_id, index) in run.early_sent:
                    continue
                run.early_sent.add((sub.suite_id, index))
                body = early.response(run.key, run.service, sub.suite_id, outcome.result, item)
                out.append(EarlyVerdict(sub.suite_id, run.service, body))
        return out

    def _early(self, ref: SuiteRef, routes: Routes) -> EarlySuite | None:
        if ref.early is not None:
            return ref.early
        if ref.compiled is not None:
            return None  # a suite file with no early-capable assertion
        suite = ref.resolve(self.grader)
        return None if suite is None else self.early_suites.get(suite, routes.registered_ids)

    def _grade_runs(
        self, runs: list[Run], routes: Any, cap: int | None = None
    ) -> tuple[list[list[LiveResult] | str], AssertionCounts]:
        """Each run's results, or why it was not graded (counted when the trip commits it),
        and their assertions' counts: the runs mapped in one core call, then graded in one
        call per suite (on this thread within `cap` work units a trace, when given: one that
        needs more raises _NeedsPoolError), and counted in one more."""
        out: list[list[LiveResult] | str] = ["unrouted"] * len(runs)
        routed = [(i, refs) for i, run in enumerate(runs) if (refs := routes.suites_for(run.spans))]
        mapped = _core.map_otlp_runs(
            [_parts(runs[i].spans, runs[i].events, runs[i].in_order) for i, _ in routed],
            self.settings.live_group_by,
        )
        # Per suite (by identity): the suite and the runs' indices and Trace bytes it grades.
        batches: dict[int, tuple[Any, list[int], list[bytes]]] = {}
        suites_of: list[tuple[int, list[Any]]] = []
        for (i, refs), trace in zip(routed, mapped, strict=True):
            if isinstance(trace, str):
                run = runs[i]
                log.error(
                    "run %s could not be mapped: %s", run.key, trace, extra={"trace_id": run.key}
                )
                out[i] = "error"
                continue
            if trace is None:
                out[i] = "unmapped"
                continue
            suites = [suite for ref in refs if (suite := self._suite(ref)) is not None]
            for suite in suites:
                batch = batches.setdefault(id(suite), (suite, [], []))
                batch[1].append(i)
                batch[2].append(trace)
            suites_of.append((i, suites))
        outcomes: dict[tuple[int, int], tuple[bytes, bytes, int, float]] = {}
        counts: AssertionCounts = []
        for key, (suite, indices, traces) in batches.items():
            if cap is None:
                graded = suite.grade_batch(traces)
            else:
                here = suite.grade_here(traces, cap)
                if any(outcome is None for outcome in here):
                    raise _NeedsPoolError
                graded = cast("list[bytes]", here)
            # The sink's rows, by the core, in one call per suite.
            rows = (
                _core.outcome_block(suite.suite_id, graded, 0).rows.split(b"\n")
                if self.sink is not None
                else [b""] * len(graded)
            )
            verdicts, scores, assertions = _core.outcome_tally(graded)
            counts.extend((suite.suite_id, *named) for named in assertions)
            for i, outcome, row, verdict, score in zip(
                indices, graded, rows, verdicts, scores, strict=False
            ):
                outcomes[key, i] = outcome, row, verdict, score
        # The root's ids are what write-back records point at: found only for write-back.
        write_back = self.writer is not None
        for i, suites in suites_of:
            run = runs[i]
            root_trace, root_id = root_span(run) if write_back else ("", "")
            out[i] = [
                LiveResult(
                    run.key,
                    suite.suite_id,
                    run.service,
                    run.cut_off,
                    run.completion,
                    None,
                    root_trace,
                    root_id,
                    *outcomes[id(suite), i],
                )
                for suite in suites
            ]
        return out, counts

    def _suite(self, ref: SuiteRef) -> Any:
        suite = ref.resolve(self.grader)
        if suite is None:
            self.metrics.dropped.labels("suite_not_found").inc()
            log.error("routes name %s, which is not registered: not graded", ref.label)
        return suite

    def _past(self, runs: list[Run]) -> bool:
        """Past the drain's deadline: the runs are counted here, without a trip to the thread."""
        if self._deadline is None or time.monotonic() < self._deadline:
            return False
        self._expired(runs)
        return True

    def _expired(self, runs: list[Run]) -> None:  # on the loop only
        """Runs the drain's grace period left no time for: counted (one log line, in drain)."""
        for run in runs:
            self.metrics.traces.labels(run.completion).inc()
            self.metrics.dropped.labels("grace_expired").inc()
            self.metrics.spans.labels("grace_expired").inc(len(run.spans))
        self._past_deadline += len(runs)

    def _drop(self, run: Run, reason: str) -> None:
        self.metrics.dropped.labels(reason).inc()
        self.metrics.spans.labels(reason).inc(len(run.spans))
        log.info(
            "run %s not graded: %s (%d spans, service %r)",
            run.key,
            reason,
            len(run.spans),
            run.service,
            extra={"trace_id": run.key, "reason": reason},
        )

    def _publish_early(self, verdicts: list[EarlyVerdict]) -> None:
        """Early verdicts go to the watchers only: the final result is the one counted,
        written to the sink and written back."""
        for verdict in verdicts:
            self.metrics.early_verdicts.inc()
            item = Published(
                verdict.suite_id, result_pb2.VERDICT_FAIL, verdict.service, verdict.payload
            )
            self.hub.publish(item)
        self._note_watchers()

    def _note_watchers(self) -> None:
        dropped = self.hub.take_dropped()
        if dropped:
            self.metrics.watchers_cut.inc(dropped)

    def _publish(
        self, results: list[LiveResult], assertions: AssertionCounts | None = None
    ) -> None:
        """Results out: the metrics (verdicts and scores per result, `assertions` as the core
        counted them), the watchers, the write-back and the sink."""
        if self._timing is not None:
            self._timing.published(r.run_key for r in results)
        counts: collections.Counter[tuple[str, int]] = collections.Counter()
        watched = len(self.hub) > 0
        metrics = self.metrics
        for result in results:
            counts[result.suite_id, result.verdict] += 1
            if result.verdict:  # a result, not an error
                self._child(metrics.score, result.suite_id).observe(result.score)
            if watched:  # the message only for watchers
                self.hub.publish(
                    Published(
                        result.suite_id,
                        result.verdict,
                        result.service,
                        result.response(),
                        result.run_key,
                    )
                )
        for (suite_id, verdict), count in counts.items():
            name = _VERDICT_NAME[verdict] if verdict else "ERROR"
            self._child(metrics.results, suite_id, name).inc(count)
        for suite_id, name, passed, failed in assertions or ():
            if passed:
                self._child(metrics.assertions, suite_id, name, _PASS).inc(passed)
            if failed:
                self._child(metrics.assertions, suite_id, name, _FAIL).inc(failed)
        self._note_watchers()
        if self.writer is not None:
            stamp = now_ns()
            for result in results:
                self.writer.add(
                    records(
                        result.outcome,
                        result.suite_id,
                        result.root_trace_id,
                        result.root_span_id,
                        stamp,
                    )
                )
        if self._sink_writer is not None and results:
            self._sink_writer.submit([result.sink_line() for result in results])

    def _child(self, metric: Any, *labels: str) -> Any:
        """A metric's child for these labels, looked up once (labels() validates and locks on
        every call; a run counts several)."""
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    async def _poll_routes(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.settings.routes_poll_s)
            # Compiling suite files can take a while: not on the loop.
            self._reloading = True
            try:
                result = await loop.run_in_executor(self._grading, self.routes.reload)
            finally:
                self._reloading = False
            if result != "unchanged":
                self.metrics.routes_reloads.labels(result).inc()


def _left(deadline: float | None, margin: float) -> float | None:
    """Seconds from now to `deadline` plus `margin` (None: no deadline, wait as long)."""
    return None if deadline is None else max(deadline - time.monotonic(), 0.0) + margin


def _incoming(
    request: bytes,
    keys: list[str],
    taken: frozenset[str] | None = None,
    convert: Callable[[bytes, bool], dict[str, Any]] | None = None,
) -> tuple[list[LiveSpan], list[SpanRow]]:
    """The spans of one traces export request (protobuf bytes) as assembly holds them, and
    their rows (the spans of one trace in a row), made in the core: ids, flags, the end-of-run
    marker, the bytes the core maps at completion, and of the attributes only `keys` (routing,
    grouping, the service name). `taken` and `convert` as made for `keys` (by default, made
    here)."""
    taken = frozenset(keys) if taken is None else taken
    convert = _converter(keys) if convert is None else convert
    return _core.otlp_spans(request, keys, taken, convert)


def _converter(keys: list[str]) -> Callable[[bytes, bool], dict[str, Any]]:
    """How the intake reads `keys` when one holds another type than a string (rare: routing
    keys are strings): the importer's conversion of the attributes, decoded here."""

    def convert(raw: bytes, resource: bool) -> dict[str, Any]:
        return picked((Resource if resource else OtlpSpan).FromString(raw).attributes, keys)

    return convert


def _parts(
    spans: list[LiveSpan], events: list[EventRecord], in_order: bool = False
) -> tuple[list[bytes], list[bytes], list[bytes]]:
    """A run as `_core.map_otlp_runs` reads it: its spans' resources' and spans' bytes, and its
    events' bytes, in arrival order (the order the mapping keeps for ties); sorted into it
    unless `in_order` says they are held so (Run.in_order)."""
    if not in_order:
        spans = sorted(spans, key=_ORDER)
        events = sorted(events, key=_ORDER)
    return (
        [span.resource_raw for span in spans],
        [span.raw for span in spans],
        [event.raw for event in events],
    )


_ORDER = operator.attrgetter("order")


def _why(outcome: AddOutcome) -> str:
    parts = []
    for name, count in sorted(outcome.counts.items()):
        if name.startswith("refused"):
            parts.append(f"{count} refused ({name.removeprefix('refused_')} cap)")
    if outcome.late:
        parts.append(f"{outcome.late} late (their run was already graded; counted, not merged)")
    return "; ".join(parts)
