"""SIGTERM on a `trajgrade serve` process (unix sockets) with an open run: it is graded as cut
off (completion `shutdown`), sent to watchers and written to the sink before the exit (0).
SIGHUP before it reloads the routes. With more open runs than the grace period can grade and a
write-back endpoint that never answers, the exit still comes within the grace period, what did
not fit is counted, and the exit code says results were lost (3). In-process: a grading thread
or a sink write still busy past the deadline is given up on, every run and row counted."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from trajgrade.live import grading
from trajgrade.live.assembly import Run
from trajgrade.live.writeback import LogWriter
from trajgrade.server.app import EXIT_DRAINED, EXIT_LIVE_LOST
from trajgrade.v1 import grader_service_pb2, grader_service_pb2_grpc

from .conftest import (
    TRACE_EXPORT,
    LiveFactory,
    Watch,
    by_trace,
    eventually,
    export_request,
    regrade_lines,
    span_items,
    strip_live,
    subprocess_env,
    write_config,
    write_pb,
)

STRICT_ROUTES = """\
routes:
  - match: {service.name: "weather-*"}
    suites: [strict.yaml]
"""


def serve_command(directory: Path, *flags: str) -> list[str]:
    """`trajgrade serve` with the API and the OTLP/gRPC receiver on unix sockets in
    `directory` (api.sock, otlp.sock), its routes.yaml, the sink out.jsonl, and runs that
    stay open (a long idle timeout) until SIGTERM."""
    return [
        sys.executable, "-m", "trajgrade", "serve",
        "--listen", f"unix:{directory / 'api.sock'}",
        "--otlp-grpc", f"unix:{directory / 'otlp.sock'}",
        "--routes", str(directory / "routes.yaml"),
        "--results-jsonl", str(directory / "out.jsonl"),
        "--live-idle-timeout-s", "600",
        *flags,
    ]  # fmt: skip


async def test_sigterm_grades_open_runs_as_cut_off(spans_file: Path, tmp_path: Path) -> None:
    write_config(tmp_path)
    api, otlp_socket, sink = tmp_path / "api.sock", tmp_path / "otlp.sock", tmp_path / "out.jsonl"
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        # Only SIGHUP reloads the routes here (the poll is an hour away).
        serve_command(tmp_path, "--live-settle-s", "0.2", "--routes-poll-s", "3600"),
        env=subprocess_env(),
        stderr=log,
    )
    channel = grpc.aio.insecure_channel(f"unix:{api}")
    otlp_channel = grpc.aio.insecure_channel(f"unix:{otlp_socket}")
    try:
        await eventually(lambda: otlp_socket.exists() and api.exists(), what="the sockets")
        stub = grader_service_pb2_grpc.GraderServiceStub(channel)
        await channel.channel_ready()
        watch = Watch(stub.WatchResults(grader_service_pb2.WatchResultsRequest()))
        reader = asyncio.get_running_loop().create_task(watch.read())
        await otlp_channel.channel_ready()
        export = otlp_channel.unary_unary(
            TRACE_EXPORT,
            request_serializer=trace_service_pb2.ExportTraceServiceRequest.SerializeToString,
            response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
        )
        first, second = by_trace(span_items(spans_file)).values()
        # A whole run first: its result shows the watcher is in place. Then a run that stays
        # open (its root never comes, the idle timeout is long).
        await export(export_request(first))
        await watch.wait(1)
        open_run = [item for item in second if item.span.parent_span_id]
        await export(export_request(open_run))
        # SIGHUP reloads the routes (the poll is an hour away): the open run goes to strict.
        (tmp_path / "routes.yaml").write_text(STRICT_ROUTES, encoding="utf-8")
        process.send_signal(signal.SIGHUP)
        serve_log = tmp_path / "serve.log"
        await eventually(lambda: "routes reloaded" in serve_log.read_text(), what="the reload")
        process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.wait, 60)
        # Every open run graded and written: nothing lost.
        assert code == EXIT_DRAINED, (tmp_path / "serve.log").read_text()
        await asyncio.wait_for(reader, 10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
        await channel.close()
        await otlp_channel.close()
    lines = sink.read_bytes().splitlines(keepends=True)
    assert len(lines) == 2
    assert lines[0].endswith(b'"completion":"settled","cut_off":false}}\n')
    assert lines[1].endswith(b'"completion":"shutdown","cut_off":true}}\n')
    pb = write_pb(tmp_path / "open.pb", export_request(open_run))
    expected = regrade_lines([pb], tmp_path / "strict.yaml", tmp_path / "e.jsonl")
    assert [strip_live(lines[1])] == expected
    # Watchers got the cut-off result, then the stream ended with UNAVAILABLE (shutting down).
    assert [(i.completion, i.cut_off) for i in watch.items] == [
        ("settled", False),
        ("shutdown", True),
    ]
    assert watch.error is not None and watch.error.code() == grpc.StatusCode.UNAVAILABLE


# Short enough that grading 6,000 open runs (~1 s on a 2-core machine) cannot finish in it.
GRACE_S = 0.4
# Past the grace period: the run being graded, the last sink write, the receivers' and gRPC
# server's stop, the interpreter's exit (a loaded 2-core CI machine).
EXIT_MARGIN_S = 3.0
OPEN_RUNS = 6000


def open_runs(spans_file: Path, count: int) -> list[trace_service_pb2.ExportTraceServiceRequest]:
    """`count` runs that stay open (a run without its root span, under new trace ids), in
    export requests of 250 runs."""
    _, second = by_trace(span_items(spans_file)).values()
    template = [item for item in second if item.span.parent_span_id]
    requests = []
    for start in range(0, count, 250):
        request = export_request(template * min(250, count - start))
        per_run = len(template)
        for index, resource_spans in enumerate(request.resource_spans):
            run = start + index // per_run
            resource_spans.scope_spans[0].spans[0].trace_id = (run + 1).to_bytes(16, "big")
        requests.append(request)
    return requests


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.timeout(180)
async def test_sigterm_drain_is_bounded_by_the_grace_period(
    spans_file: Path, tmp_path: Path, protocol: str
) -> None:
    write_config(tmp_path)
    api, otlp_socket, sink = tmp_path / "api.sock", tmp_path / "otlp.sock", tmp_path / "out.jsonl"
    # A write-back endpoint that never answers: the kernel completes the connections (backlog),
    # nothing ever reads or replies.
    silent = socket.create_server(("127.0.0.1", 0), backlog=64)
    port = silent.getsockname()[1]
    export = (
        ["--otlp-export-endpoint", f"127.0.0.1:{port}", "--otlp-export-insecure"]
        if protocol == "grpc"
        else ["--otlp-export-endpoint", f"http://127.0.0.1:{port}"]
    )
    serve_log = tmp_path / "serve.log"
    log = serve_log.open("wb")
    process = subprocess.Popen(
        serve_command(tmp_path, "--grace-period-s", str(GRACE_S), "--log-format", "json", *export),
        env=subprocess_env(),
        stderr=log,
    )
    otlp_channel = grpc.aio.insecure_channel(f"unix:{otlp_socket}")
    try:
        await eventually(lambda: otlp_socket.exists() and api.exists(), what="the sockets")
        await otlp_channel.channel_ready()
        send = otlp_channel.unary_unary(
            TRACE_EXPORT,
            request_serializer=trace_service_pb2.ExportTraceServiceRequest.SerializeToString,
            response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
        )
        for request in open_runs(spans_file, OPEN_RUNS):
            response = await send(request, timeout=30)
            assert not response.HasField("partial_success")
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.wait, 60)
        elapsed = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
        silent.close()
        await otlp_channel.close()
    lines = serve_log.read_text().splitlines()
    # The server's own calls drained, but open runs were not graded: results lost.
    assert code == EXIT_LIVE_LOST, "\n".join(lines[-20:])
    tail = "\n".join(lines[-8:])
    print(f"exit {elapsed:.2f}s after SIGTERM (grace {GRACE_S}s)")
    assert elapsed < GRACE_S + EXIT_MARGIN_S, f"exit took {elapsed:.2f}s\n{tail}"
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    summaries = [e for e in entries if "runs_not_graded" in e]
    assert len(summaries) == 1, tail
    summary = summaries[0]
    rows = [json.loads(line) for line in sink.read_bytes().splitlines()]
    assert all(row["live"]["completion"] == "shutdown" for row in rows)
    # Every open run is either graded (its row in the sink) or counted as not graded, and
    # every record of the graded ones is counted as not sent.
    assert summary["runs_open"] == OPEN_RUNS
    assert 0 < len(rows) < OPEN_RUNS, "the grace period should cut the grading short"
    assert summary["runs_not_graded"] == OPEN_RUNS - len(rows), tail
    records = sum(len(row["results"]) for row in rows)
    # Records past the write-back queue's bound were dropped as they came (dropped_queue_full);
    # the batch the sender took before the endpoint hung (at most batch_size) is held beside
    # the queue, so it is not sent either.
    defaults = inspect.signature(LogWriter).parameters
    queue_size, batch_size = defaults["queue_size"].default, defaults["batch_size"].default
    unsent = summary["writeback_unsent"]
    if records <= queue_size:
        assert unsent == records, tail
    else:
        assert queue_size <= unsent <= min(records, queue_size + batch_size), (records, tail)


@pytest.mark.parametrize("inline_bytes", [256 * 1024, 1], ids=["small", "over the bytes"])
async def test_small_trips_are_graded_on_the_loop_and_large_ones_on_the_thread(
    make_live: LiveFactory, spans_file: Path, monkeypatch: pytest.MonkeyPatch, inline_bytes: int
) -> None:
    """A trip of a few small runs is graded on the loop (no hand-off to the grading thread and
    back); a trip over --inline-grade-bytes goes to the grading thread, so the loop, which
    serves every other caller, never holds a large run's mapping and grading."""
    # No routes poll meanwhile: a trip during a reload goes to the thread by design.
    live = await make_live(inline_grade_bytes=inline_bytes, routes_poll_s=3600.0)
    grader = live.server.live
    threads: list[str] = []
    grade_runs = grader._grade_runs

    def spy(runs: list[Run], routes: Any, cap: int | None = None) -> Any:
        threads.append(threading.current_thread().name)
        return grade_runs(runs, routes, cap)

    monkeypatch.setattr(grader, "_grade_runs", spy)
    runs = by_trace(span_items(spans_file)).values()
    for items in runs:
        await live.export(export_request(items))

    def graded() -> float:
        done = "trajgrade_live_traces_assembled_total"
        return sum(live.metric(done, completion=c) for c in ("settled", "end_marker"))

    await eventually(lambda: graded() == len(runs), what="both runs graded")
    assert threads
    on_loop = threading.current_thread().name
    if inline_bytes > 1:
        assert set(threads) == {on_loop}
    else:
        assert all(name.startswith("trajgrade-live") for name in threads), threads


async def test_a_trip_over_the_inline_work_units_is_graded_again_on_the_thread(
    make_live: LiveFactory, spans_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A small trip is graded on the loop, each trace within --inline-work-units and without
    waking the core's pool. A trace that needs more sends the whole trip, nothing of it
    committed, to the grading thread with the full limit: the results are regrade's, not a
    work-limit error, and each run is counted once."""
    live = await make_live(inline_work_units=1, routes_poll_s=3600.0)
    grader = live.server.live
    calls: list[tuple[str, int | None]] = []
    grade_runs = grader._grade_runs

    def spy(runs: list[Run], routes: Any, cap: int | None = None) -> Any:
        calls.append((threading.current_thread().name, cap))
        return grade_runs(runs, routes, cap)

    monkeypatch.setattr(grader, "_grade_runs", spy)
    run = next(iter(by_trace(span_items(spans_file)).values()))
    await live.export(export_request(run))
    await eventually(lambda: len(live.sink_lines()) == 1, what="the run's row")
    on_loop = threading.current_thread().name
    assert calls[0] == (on_loop, 1)
    assert len(calls) == 2 and calls[1][0].startswith("trajgrade-live"), calls
    assert calls[1][1] is None
    expected = regrade_lines(
        [write_pb(tmp_path / "run.pb", export_request(run))],
        live.suite("weather"),
        tmp_path / "e.jsonl",
    )
    assert [strip_live(line) for line in live.sink_lines()] == expected
    assert live.metric("trajgrade_live_traces_assembled_total", completion="settled") == 1
    assert live.metric("trajgrade_live_spans_total", outcome="graded") == len(run)


async def test_a_run_settling_while_the_worker_grades_waits_for_it(
    make_live: LiveFactory, spans_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settle timer grades a small trip itself only while the worker waits idle: a run
    that settles while the worker has a trip on the grading thread is queued behind it, so
    results come out in the order their runs completed."""
    live = await make_live(routes_poll_s=3600.0)
    grader = live.server.live
    watch = await live.watch()
    first, second = by_trace(span_items(spans_file)).values()
    slow_key = first[0].trace_id
    inline = grader._inline
    # The first run's trip goes to the grading thread, where it takes a second.
    monkeypatch.setattr(
        grader, "_inline", lambda trip: inline(trip) and trip.runs[0].key != slow_key
    )
    calls: list[tuple[str, str]] = []
    grade_runs = grader._grade_runs

    def spy(runs: list[Run], routes: Any, cap: int | None = None) -> Any:
        if runs[0].key == slow_key:
            time.sleep(1.0)
        calls.append((runs[0].key, threading.current_thread().name))
        return grade_runs(runs, routes, cap)

    monkeypatch.setattr(grader, "_grade_runs", spy)
    await live.export(export_request(first))
    await eventually(lambda: grader._trip is not None, what="the first run on the thread")
    await live.export(export_request(second))  # settles (0.3 s) while the thread sleeps
    items = await watch.wait(2)
    assert [item.trace_id for item in items] == [slow_key, second[0].trace_id]
    on_loop = threading.current_thread().name
    assert calls[0][0] == slow_key and calls[0][1].startswith("trajgrade-live")
    assert calls[1:] == [(second[0].trace_id, on_loop)]


async def test_worker_busy_past_the_deadline_accounts_for_every_run(
    make_live: LiveFactory, spans_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drain abandons a grading thread still busy past its deadline and margin: what it
    graded of its trip is still published, the run it is on and the rest are grace_expired,
    and the thread, when it finishes, counts nothing more."""
    monkeypatch.setattr(grading, "_GRADING_MARGIN_S", 0.2)
    live = await make_live()
    grader = live.server.live
    (request,) = open_runs(spans_file, 3)
    await live.export(request)
    assert grader.assembler.open_runs == 3
    slow_key = (2).to_bytes(16, "big").hex()
    grade_runs = grader._grade_runs

    def slow(runs: list[Run], routes: Any, cap: int | None = None) -> Any:
        if any(run.key == slow_key for run in runs):
            time.sleep(2.0)  # the grading thread, stuck on one run
        return grade_runs(runs, routes, cap)

    monkeypatch.setattr(grader, "_grade_runs", slow)
    started = time.monotonic()
    report = await grader.drain(0.3)
    assert time.monotonic() - started < 0.3 + 0.2 + 0.5
    assert report == grading.DrainReport(runs_open=3, runs_not_graded=2) and report.lost

    def counts() -> tuple[float, ...]:
        return (
            live.metric("trajgrade_live_traces_assembled_total", completion="shutdown"),
            live.metric("trajgrade_live_traces_dropped_total", reason="grace_expired"),
            live.metric("trajgrade_live_spans_total", outcome="graded"),
            live.metric("trajgrade_live_sink_rows_total"),
        )

    spans_per_run = len(request.resource_spans) // 3
    expected = (3.0, 2.0, float(spans_per_run), 1.0)
    assert counts() == expected
    assert len(live.sink_lines()) == 1
    await asyncio.sleep(2.0)  # the thread finishes the slow run: committed nowhere
    assert counts() == expected


async def test_sink_last_writes_are_bounded_by_the_grace_period(
    make_live: LiveFactory,
    spans_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A sink whose disk hangs does not hold the drain past its deadline and margin: the rows
    not written by then are counted and logged, and the writer counts nothing more later."""
    monkeypatch.setattr(grading, "_GRADING_MARGIN_S", 0.2)
    live = await make_live()
    grader = live.server.live
    assert grader.sink is not None
    (request,) = open_runs(spans_file, 3)
    await live.export(request)

    def hung(lines: list[bytes]) -> None:
        time.sleep(2.0)  # a disk that does not answer in time; nothing reaches the file

    monkeypatch.setattr(grader.sink, "write", hung)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "trajgrade.live"):
        report = await grader.drain(0.3)
    assert time.monotonic() - started < 0.3 + 0.2 + 0.5
    assert report == grading.DrainReport(runs_open=3, sink_unwritten=3) and report.lost
    # The three runs were graded and published, their rows never written.
    assert live.metric("trajgrade_live_traces_assembled_total", completion="shutdown") == 3
    assert live.metric("trajgrade_live_sink_rows_unwritten_total") == 3
    (summary,) = [r for r in caplog.records if hasattr(r, "sink_unwritten")]
    assert (summary.runs_not_graded, summary.sink_unwritten) == (0, 3)  # type: ignore[attr-defined]
    await asyncio.sleep(2.0)  # the write returns: not counted as written
    assert live.metric("trajgrade_live_sink_rows_total") == 0


class RefusingLogs(logs_service_pb2_grpc.LogsServiceServicer):
    """A write-back endpoint that refuses every export for good (INVALID_ARGUMENT: never
    retried under the OTLP rules)."""

    def __init__(self) -> None:
        self.calls = 0

    async def Export(  # noqa: N802 (the generated servicer's name)
        self, request: logs_service_pb2.ExportLogsServiceRequest, context: Any
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        self.calls += 1
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not these records")
        raise AssertionError("abort returns no answer")


async def test_writeback_refused_during_the_drain_is_a_loss(
    make_live: LiveFactory, spans_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every open run is graded in time, but the endpoint refuses their records: the drain
    reports them as lost (exit 3), and its warning names the endpoint, not the grace period."""
    endpoint = grpc.aio.server()
    refusing = RefusingLogs()
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(  # type: ignore[no-untyped-call]
        refusing, endpoint
    )
    port = endpoint.add_insecure_port("127.0.0.1:0")
    await endpoint.start()
    try:
        live = await make_live(otlp_export_endpoint=f"127.0.0.1:{port}", otlp_export_insecure=True)
        grader = live.server.live
        (request,) = open_runs(spans_file, 3)
        await live.export(request)
        with caplog.at_level(logging.WARNING, "trajgrade.live"):
            report = await grader.drain(10.0)
        failed = live.metric("trajgrade_live_writeback_records_total", outcome="failed")
        assert refusing.calls >= 1 and failed >= 3  # at least one record per run
        assert report == grading.DrainReport(runs_open=3, writeback_failed=int(failed))
        assert report.lost and not report.out_of_time
        assert len(live.sink_lines()) == 3  # graded and written: only the write-back lost
        (summary,) = [r for r in caplog.records if hasattr(r, "writeback_failed")]
        assert summary.writeback_failed == failed
        assert summary.getMessage().startswith("draining: results were lost: 0 of 3 open runs")
    finally:
        await endpoint.stop(0)
