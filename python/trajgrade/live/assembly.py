"""Trace assembly: spans arriving in any order and any split, grouped into runs, and when a run
is complete (docs/live-grading.md, "Assembly").

Pure bookkeeping with the clock passed in: no I/O, no asyncio. One driver (live/grading.py)
calls `add_spans` / `add_events` as requests arrive and `due(now)` from its single timer task.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from trajgrade.importers.otlp import EventRecord
from trajgrade.live.graded import GradedIds
from trajgrade.live.records import LiveSpan, SpanRow

# Why a run was taken as complete. Only SETTLED and END_MARKER are whole runs.
SETTLED = "settled"
END_MARKER = "end_marker"
IDLE_TIMEOUT = "idle_timeout"
OPEN_TRACES_CAP = "open_traces_cap"
BYTES_CAP = "bytes_cap"
SHUTDOWN = "shutdown"

# Span outcomes, as counted in trajgrade_live_spans_total{outcome}.
ACCEPTED = "accepted"
DUPLICATE = "duplicate"
LATE = "late"
REFUSED_SPANS_PER_TRACE = "refused_spans_per_trace"
REFUSED_OPEN_TRACES = "refused_open_traces"
REFUSED_BYTES = "refused_bytes"


@dataclass(frozen=True)
class AssemblyConfig:
    """The assembly rules and caps (Settings.live_*)."""

    group_by: str | None = None
    settle_s: float = 2.0
    idle_timeout_s: float = 300.0
    max_open_traces: int = 10_000
    max_spans_per_trace: int = 10_000
    max_bytes: int = 256 * 1024 * 1024
    on_cap: str = "grade"  # or "refuse"
    # Graded trace ids are remembered (their spans are late) for this long since their last
    # span, and at most this many: whichever comes first forgets an id.
    late_window_s: float = 900.0
    late_memory: int = 20_000


@dataclass
class Run:
    """A run being assembled (then handed out as complete)."""

    key: str
    first_seen: float
    last_seen: float
    spans: list[LiveSpan] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    seen: set[tuple[str, str]] = field(default_factory=set)
    trace_ids: list[str] = field(default_factory=list)
    # Trace ids whose root span (no parent) has arrived: OTLP exports only ended spans.
    rooted: set[str] = field(default_factory=set)
    size: int = 0
    refused: int = 0
    ended: bool = False
    service: str = ""
    # Bumped on every change: a timer entry of an older version is stale.
    version: int = 0
    completion: str = ""
    # Early verdicts (live/early.py): the version last checked, and the (suite id, assertion
    # index) pairs already reported (added to on the grading thread only).
    early_checked: int = -1
    early_at: float = float("-inf")  # when its last check was taken (loop time)
    early_sent: set[tuple[str, int]] = field(default_factory=set)
    # Spans and events held in arrival order: always, until _regroup merges two runs (the
    # mapping's input is then sorted by `order`).
    in_order: bool = True

    @property
    def complete_when_quiet(self) -> bool:
        """Every trace of the run has its root: the settle time, not the idle timeout, runs."""
        return bool(self.trace_ids) and self.rooted.issuperset(self.trace_ids)

    @property
    def cut_off(self) -> bool:
        """Graded without its whole self: not settled nor ended, or spans were refused."""
        return self.completion not in (SETTLED, END_MARKER) or self.refused > 0


@dataclass
class AddOutcome:
    """What became of the spans of one export request."""

    counts: dict[str, int] = field(default_factory=dict)
    complete: list[Run] = field(default_factory=list)
    late_runs: dict[str, int] = field(default_factory=dict)
    # Runs still open that this request touched (candidates for an early check).
    open_touched: list[Run] = field(default_factory=list)

    def count(self, outcome: str, n: int = 1) -> None:
        self.counts[outcome] = self.counts.get(outcome, 0) + n

    def add(self, other: AddOutcome) -> None:
        """Count `other` in too (the slices of one request: live/intake.py)."""
        for outcome, n in other.counts.items():
            self.count(outcome, n)
        self.complete += other.complete
        for key, n in other.late_runs.items():
            self.late_runs[key] = self.late_runs.get(key, 0) + n
        self.open_touched += other.open_touched

    @property
    def rejected(self) -> int:
        """Spans the exporter is told were not accepted (OTLP partial success)."""
        return sum(n for outcome, n in self.counts.items() if outcome.startswith("refused"))

    @property
    def late(self) -> int:
        return self.counts.get(LATE, 0)


class Assembler:
    """Open runs by key, a timer heap over them, and the recently graded keys."""

    def __init__(self, config: AssemblyConfig) -> None:
        self.config = config
        # Insertion order is age: the first entry is the oldest open run (evicted at a cap).
        self._open: OrderedDict[str, Run] = OrderedDict()
        # trace id -> run key (differs from the trace id only with group_by).
        self._key_of_trace: dict[str, str] = {}
        # Graded trace ids -> the key they were graded under: their spans are late.
        self._graded = GradedIds(config.late_window_s, config.late_memory)
        self._now = 0.0
        self._timers: list[tuple[float, int, str]] = []
        self.bytes_held = 0
        # Arrival sequence: the mapping's `order` (ties in time keep arrival order).
        self._arrivals = 0

    @property
    def open_runs(self) -> int:
        return len(self._open)

    @property
    def graded_ids(self) -> int:
        """Graded trace ids remembered now (for late spans)."""
        return len(self._graded)

    def take_forgotten(self) -> dict[str, int]:
        """Graded ids forgotten since the last call, by reason (the window or the cap)."""
        forgotten = self._graded.forgotten
        if not forgotten:
            return {}
        out = dict(forgotten)
        forgotten.clear()
        return out

    def add_spans(
        self, spans: list[LiveSpan], now: float, rows: list[SpanRow] | None = None
    ) -> AddOutcome:
        """Take the spans of one request (and their rows, as `_core.otlp_spans` gives them:
        made here when not given); returns what became of them, and the runs that an end
        marker or a cap completed."""
        out = AddOutcome()
        self._tick(now)
        touched: dict[str, Run] = {}
        accepted = 0
        if self.config.group_by is None:
            # A request's spans come grouped by trace: each row of one trace's spans is taken
            # at once (not with group_by, whose attribute may move a trace to another run).
            for row in span_rows(spans) if rows is None else rows:
                run, taken = self._add_group(spans, row, now, out)
                accepted += taken
                if run is not None:
                    touched[run.key] = run
        else:
            for span in spans:
                run, taken = self._add_span(span, now, out)
                accepted += taken
                if run is not None:
                    touched[run.key] = run
        if accepted:
            out.count(ACCEPTED, accepted)
        for key, run in touched.items():
            if run.ended and key in self._open:
                out.complete.append(self._close(key, END_MARKER))
            elif key in self._open:
                self._arm(run)
                out.open_touched.append(run)
        return out

    def add_events(self, events: Iterable[EventRecord], now: float) -> AddOutcome:
        """Take GenAI log events (OTLP logs); an event for a graded trace is late."""
        out = AddOutcome()
        self._tick(now)
        touched: dict[str, Run] = {}
        for event in events:
            if self._late(event.trace_id, out):
                continue
            run = self._run_for(event.trace_id, None, now, out)
            if run is None:
                out.count(REFUSED_OPEN_TRACES)
                continue
            event.order = self._next_arrival()
            run.events.append(event)
            run.last_seen = now
            run.version += 1
            touched[run.key] = run
            out.count(ACCEPTED)
        for key, run in touched.items():
            if key in self._open:
                self._arm(run)
                out.open_touched.append(run)
        return out

    def _add_group(
        self, spans: list[LiveSpan], row: SpanRow, now: float, out: AddOutcome
    ) -> tuple[Run | None, int]:
        """The spans of one trace in a row of one request (no group_by): taken together when
        none is a duplicate and no cap is near, else one by one (the same outcome)."""
        trace_id, first, end, size, ends, rooted, keys, service = row
        group = spans[first:end]
        key = self._key_of_trace.get(trace_id)
        run = None if key is None else self._open[key]
        if run is None:
            if len(group) == 1 or self._graded.key_of(trace_id) is not None:
                return self._add_each(group, now, out)  # late spans, counted one by one
            run = self._run_for(trace_id, None, now, out)
            if run is None:
                out.count(REFUSED_OPEN_TRACES, len(group))
                return None, 0
        config = self.config
        if (
            len(keys) < len(group)
            or not run.seen.isdisjoint(keys)
            or len(run.spans) + len(group) > config.max_spans_per_trace
            or self.bytes_held + size > config.max_bytes
        ):
            return self._add_each(group, now, out)
        order = self._arrivals
        for record in group:
            order += 1
            record.order = order
        self._arrivals = order
        if ends:
            run.ended = True
        if rooted:
            run.rooted.add(trace_id)
        run.spans += group
        run.seen |= keys
        run.size += size
        self.bytes_held += size
        run.last_seen = now
        run.version += len(group)
        if not run.service:
            run.service = service
        return run, len(group)

    def _add_each(
        self, group: list[LiveSpan], now: float, out: AddOutcome
    ) -> tuple[Run | None, int]:
        """The spans of one trace one by one: the run of the first is taken again for the
        rest, without the late and run lookups, unless a cap closed it meanwhile."""
        run, taken = self._add_span(group[0], now, out)
        last = run
        for record in group[1:]:
            if run is not None and not run.completion:
                taken += self._take(record, run, now, out)
            else:
                run, more = self._add_span(record, now, out)
                taken += more
            last = run or last
        return last, taken

    def _add_span(self, record: LiveSpan, now: float, out: AddOutcome) -> tuple[Run | None, int]:
        """A span's run (None: late, or refused by the open-runs cap), and 1 if it was taken."""
        config = self.config
        if self._late(record.trace_id, out):
            return None, 0
        group = None
        if config.group_by is not None:
            value = record.attrs.get(config.group_by, record.resource.get(config.group_by))
            group = None if value is None else str(value)
        run = self._run_for(record.trace_id, group, now, out)
        if run is None:
            out.count(REFUSED_OPEN_TRACES)
            return None, 0
        return run, self._take(record, run, now, out)

    def _take(self, record: LiveSpan, run: Run, now: float, out: AddOutcome) -> int:
        """Add a span to its open run unless it is a duplicate or over a cap: 1 if taken."""
        config = self.config
        key = record.key
        if key in run.seen:
            out.count(DUPLICATE)  # an exporter's retry: the span is already held
            return 0
        if len(run.spans) >= config.max_spans_per_trace:
            run.refused += 1
            out.count(REFUSED_SPANS_PER_TRACE)
            return 0
        size = record.size
        if self.bytes_held + size > config.max_bytes and (
            config.on_cap == "refuse" or not self._evict(BYTES_CAP, size, run, out)
        ):
            run.refused += 1
            out.count(REFUSED_BYTES)
            return 0
        record.order = self._next_arrival()
        run.spans.append(record)
        run.seen.add(key)
        run.size += size
        self.bytes_held += size
        run.last_seen = now
        run.version += 1
        if record.is_root:
            run.rooted.add(record.trace_id)
        if record.ends_run:
            run.ended = True
        if not run.service:
            service = record.resource.get("service.name")
            run.service = service if isinstance(service, str) else ""
        return 1

    def _late(self, trace_id: str, out: AddOutcome) -> bool:
        """A span or event of a graded trace still remembered: counted late, remembered anew."""
        key = self._graded.key_of(trace_id)
        if key is None:
            return False
        self._graded.remember(trace_id, key, self._now)
        out.count(LATE)
        out.late_runs[key] = out.late_runs.get(key, 0) + 1
        return True

    def _tick(self, now: float) -> None:
        """The clock moves on: forget the graded ids last seen more than the window ago."""
        self._now = max(self._now, now)
        self._graded.expire(self._now)

    def _run_for(self, trace_id: str, group: str | None, now: float, out: AddOutcome) -> Run | None:
        """The open run of a trace id, made (or merged, when its group becomes known) as
        needed; None when the open-runs cap refuses a new one."""
        key = self._key_of_trace.get(trace_id)
        if key is not None and group is not None and key == trace_id and group != trace_id:
            # The trace's first spans came without the grouping attribute: move them.
            return self._regroup(trace_id, group, now, out)
        if key is not None:
            return self._open[key]
        key = trace_id if group is None else group
        run = self._open.get(key)
        if run is None:
            if not self._room_for_run(out):
                return None
            run = self._open[key] = Run(key, first_seen=now, last_seen=now)
        self._key_of_trace[trace_id] = key
        run.trace_ids.append(trace_id)
        return run

    def _regroup(self, trace_id: str, group: str, now: float, out: AddOutcome) -> Run | None:
        provisional = self._open.pop(trace_id)
        run = self._open.get(group)
        if run is None:
            run = provisional
            run.key = group
            self._open[group] = run
        else:
            run.spans.extend(provisional.spans)
            run.events.extend(provisional.events)
            run.seen |= provisional.seen
            run.rooted |= provisional.rooted
            run.size += provisional.size
            run.refused += provisional.refused
            run.ended = run.ended or provisional.ended
            run.trace_ids.append(trace_id)
            run.service = run.service or provisional.service
            run.early_sent |= provisional.early_sent
            run.in_order = False
        self._key_of_trace[trace_id] = group
        run.version += 1
        return run

    def _next_arrival(self) -> int:
        self._arrivals += 1
        return self._arrivals

    def _room_for_run(self, out: AddOutcome) -> bool:
        if len(self._open) < self.config.max_open_traces:
            return True
        if self.config.on_cap == "refuse":
            return False
        oldest = next(iter(self._open))
        out.complete.append(self._close(oldest, OPEN_TRACES_CAP))
        return True

    def _evict(self, reason: str, need: int, keep: Run, out: AddOutcome) -> bool:
        """Grade the oldest open runs (not `keep`) as cut off until `need` more bytes fit."""
        for key in list(self._open):
            if self.bytes_held + need <= self.config.max_bytes:
                break
            if key != keep.key:
                out.complete.append(self._close(key, reason))
        return self.bytes_held + need <= self.config.max_bytes

    def _arm(self, run: Run) -> None:
        wait = self.config.settle_s if run.complete_when_quiet else self.config.idle_timeout_s
        heapq.heappush(self._timers, (run.last_seen + wait, run.version, run.key))

    def next_deadline(self) -> float | None:
        """When `due` next has something to do (None: no open run)."""
        while self._timers:
            at, version, key = self._timers[0]
            run = self._open.get(key)
            if run is not None and run.version == version:
                return at
            heapq.heappop(self._timers)  # stale: the run changed or is gone
        return None

    def due(self, now: float) -> list[Run]:
        """The runs whose settle time or idle timeout has passed."""
        self._tick(now)
        done: list[Run] = []
        while self._timers and self._timers[0][0] <= now:
            _, version, key = heapq.heappop(self._timers)
            run = self._open.get(key)
            if run is None or run.version != version:
                continue
            done.append(self._close(key, SETTLED if run.complete_when_quiet else IDLE_TIMEOUT))
        return done

    def close_all(self, reason: str = SHUTDOWN) -> list[Run]:
        """Every open run, oldest first, as cut off (the drain on SIGTERM)."""
        return [self._close(key, reason) for key in list(self._open)]

    def _close(self, key: str, reason: str) -> Run:
        run = self._open.pop(key)
        run.completion = reason
        self.bytes_held -= run.size
        for trace_id in run.trace_ids:
            self._key_of_trace.pop(trace_id, None)
            self._graded.remember(trace_id, key, self._now)
        return run


def span_rows(spans: list[LiveSpan]) -> list[SpanRow]:
    """The rows of a request's spans as `_core.otlp_spans` makes them: per run of consecutive
    spans of one trace, (trace id, first, end, encoded size, one ends the run, one is a root,
    their keys, the first non-empty string service.name of their resources or "")."""
    rows: list[SpanRow] = []
    for at, span in enumerate(spans):
        if not rows or rows[-1][0] != span.trace_id:
            rows.append((span.trace_id, at, at, 0, False, False, set(), ""))
        trace_id, first, _, size, ends, rooted, keys, service = rows[-1]
        keys.add(span.key)
        if not service:
            name = span.resource.get("service.name")
            service = name if isinstance(name, str) else ""
        rows[-1] = (
            trace_id, first, at + 1, size + span.size, ends or span.ends_run,
            rooted or span.is_root, keys, service,
        )  # fmt: skip
    return rows
