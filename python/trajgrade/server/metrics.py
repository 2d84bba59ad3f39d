"""Prometheus metrics of one server process, on a registry of its own."""

from __future__ import annotations

import logging
import threading
from typing import Any

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

log = logging.getLogger("trajgrade.server")

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 10_000)
_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


_SCORE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)


class LiveMetrics:
    """Live grading (docs/live-grading.md, "Metrics"): every span and run accounted for."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.spans = Counter(
            "trajgrade_live_spans",
            "Received spans by outcome: accepted, duplicate, late, refused_* (at arrival); "
            "graded, unrouted, unmapped, grace_expired (when their run completes).",
            ["outcome"],
            registry=registry,
        )
        self.exports = Counter(
            "trajgrade_live_export_requests",
            "OTLP export requests by signal (traces, logs), transport and result (ok, "
            "partial, malformed, unsupported_media_type, unauthenticated).",
            ["signal", "transport", "result"],
            registry=registry,
        )
        self.traces = Counter(
            "trajgrade_live_traces_assembled",
            "Runs taken as complete, by completion (settled, end_marker: whole; idle_timeout, "
            "open_traces_cap, bytes_cap, shutdown: cut off).",
            ["completion"],
            registry=registry,
        )
        self.dropped = Counter(
            "trajgrade_live_traces_dropped",
            "Completed runs not graded, by reason (unrouted, unmapped, suite_not_found, error, "
            "grace_expired: open at SIGTERM and not graded within the grace period).",
            ["reason"],
            registry=registry,
        )
        self.late_traces = Counter(
            "trajgrade_live_late_traces",
            "Export requests that carried late spans for an already graded run (per run).",
            registry=registry,
        )
        self.results = Counter(
            "trajgrade_live_results",
            "Live results by suite and verdict (ERROR: the run could not be graded).",
            ["suite_id", "verdict"],
            registry=registry,
        )
        self.assertions = Counter(
            "trajgrade_live_assertions",
            "Live assertion results by suite, assertion and status (PASS, FAIL).",
            ["suite_id", "assertion", "status"],
            registry=registry,
        )
        self.score = Histogram(
            "trajgrade_live_score",
            "Live results' score (fraction of assertions passing), by suite.",
            ["suite_id"],
            buckets=_SCORE_BUCKETS,
            registry=registry,
        )
        self.open_traces = Gauge(
            "trajgrade_live_open_traces", "Runs being assembled.", registry=registry
        )
        self.exports_waiting = Gauge(
            "trajgrade_live_exports_waiting",
            "Exports accepted and not yet taken: behind a large one taken in slices.",
            registry=registry,
        )
        self.held_bytes = Gauge(
            "trajgrade_live_held_bytes", "Span bytes held by open runs.", registry=registry
        )
        self.graded_ids = Gauge(
            "trajgrade_live_graded_ids",
            "Graded run ids remembered to recognise late spans.",
            registry=registry,
        )
        self.graded_ids_forgotten = Counter(
            "trajgrade_live_graded_ids_forgotten",
            "Graded run ids forgotten, by reason (window: --live-late-window-s after their "
            "last span; cap: over --live-late-memory); a later span of one starts a new run.",
            ["reason"],
            registry=registry,
        )
        self.watchers = Gauge(
            "trajgrade_live_watchers", "WatchResults calls following results.", registry=registry
        )
        self.watchers_cut = Counter(
            "trajgrade_live_watchers_cut",
            "WatchResults calls ended because they fell behind (WATCHER_TOO_SLOW).",
            registry=registry,
        )
        self.sink_rows = Counter(
            "trajgrade_live_sink_rows", "Rows written to the JSONL results sink.", registry=registry
        )
        self.sink_errors = Counter(
            "trajgrade_live_sink_errors",
            "Batches the JSONL results sink failed to write (rows lost from the file).",
            registry=registry,
        )
        self.sink_unwritten = Counter(
            "trajgrade_live_sink_rows_unwritten",
            "Rows of results the JSONL sink had not written (fsynced) when the SIGTERM drain's "
            "grace period ended.",
            registry=registry,
        )
        self.writeback = Counter(
            "trajgrade_live_writeback_records",
            "gen_ai.evaluation.result log records of --otlp-export-endpoint by outcome: sent, "
            "rejected (by the endpoint), failed (retries exhausted or not retryable), "
            "dropped_queue_full, dropped_shutdown.",
            ["outcome"],
            registry=registry,
        )
        self.writeback_errors = Counter(
            "trajgrade_live_writeback_errors",
            "Failed write-back export attempts (retried or not) by gRPC status code, or "
            "HTTP_<status> for OTLP/HTTP.",
            ["code"],
            registry=registry,
        )
        self.early_checks = Counter(
            "trajgrade_live_early_checks",
            "Open runs graded on their spans so far for early verdicts (--early-verdicts).",
            registry=registry,
        )
        self.early_verdicts = Counter(
            "trajgrade_live_early_verdicts",
            "Early verdicts published: an assertion failed before its run ended (once per run, "
            "suite and assertion; never in the results, the sink or write-back).",
            registry=registry,
        )
        self.early_outcomes = Counter(
            "trajgrade_live_early_outcomes",
            "Early verdicts by what the final result said: confirmed (the assertion failed "
            "too), overturned (it passed), not_graded (no final result for that suite).",
            ["outcome"],
            registry=registry,
        )
        self.routes_reloads = Counter(
            "trajgrade_live_routes_reloads",
            "Routes file loads by result (ok, error: the previous routes stay).",
            ["result"],
            registry=registry,
        )


class ServerMetrics:
    """The server's metrics; a registry per instance so several servers can share a process."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "trajgrade_requests",
            "RPCs answered, by method and gRPC status code.",
            ["rpc", "code"],
            registry=self.registry,
        )
        self.rpc_latency = Histogram(
            "trajgrade_rpc_latency_seconds",
            "Time from a GraderService RPC's start to its answer, by method.",
            ["rpc"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "trajgrade_batch_size",
            "Items handed to the core in one call (BatchGradeTraces calls count as 1).",
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.grading_seconds = Histogram(
            "trajgrade_grading_seconds",
            "Wall time of one core call (one batch).",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "trajgrade_queue_depth",
            "Items waiting in the batch queue.",
            registry=self.registry,
        )
        self.in_flight_batches = Gauge(
            "trajgrade_in_flight_batches",
            "Core calls running now.",
            registry=self.registry,
        )
        self.dropped = Counter(
            "trajgrade_dropped_items",
            "Queued items dropped before grading, by reason (cancelled, deadline).",
            ["reason"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "trajgrade_rejected_items",
            "Items refused at the queue, by reason (queue_full, shutting_down).",
            ["reason"],
            registry=self.registry,
        )
        self.live = LiveMetrics(self.registry)
        self._children: dict[tuple[str, grpc.StatusCode], tuple[Any, Any]] = {}
        self._http: Any = None
        self._http_thread: threading.Thread | None = None

    def count(self, rpc: str, code: grpc.StatusCode, seconds: float) -> None:
        """Record one answered RPC."""
        # Every RPC passes here: the labelled children are looked up once, not per call.
        children = self._children.get((rpc, code))
        if children is None:
            children = (self.requests.labels(rpc, code.name), self.rpc_latency.labels(rpc))
            self._children[(rpc, code)] = children
        children[0].inc()
        children[1].observe(seconds)

    def answered(self) -> dict[str, int]:
        """RPCs answered so far by status code name (for the shutdown log line)."""
        totals: dict[str, int] = {}
        for metric in self.requests.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    code = sample.labels["code"]
                    totals[code] = totals.get(code, 0) + int(sample.value)
        return totals

    def exposition(self) -> bytes:
        """The text exposition format, as the HTTP endpoint serves it."""
        return bytes(generate_latest(self.registry))

    def serve_http(self, host: str, port: int) -> int:
        """Start the /metrics HTTP listener; returns the bound port."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._http, self._http_thread = server, thread
        bound = int(server.server_address[1])
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    def close(self) -> None:
        """Stop the HTTP listener, if any."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
