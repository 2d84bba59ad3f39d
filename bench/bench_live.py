"""Live grading benchmark: `trajgrade serve --otlp-grpc` against a decode-and-discard floor.

Every ratio is measured in one run on one machine; rows take turns, repeat after repeat, and
each figure is the median of the repeats (the load average is printed per row, and the
server process's CPU seconds over the row, from /proc, with its share per run).

- throughput: spans/s that the real Python OTLP exporter (opentelemetry-exporter-otlp-proto-grpc,
  spans pre-built with the OTel SDK, in `--senders` processes, `--batch` spans per export) gets
  ingested, assembled and graded by one server process, until the last run's result is in the
  server's JSONL results sink (every run graded; results go to the sink and the metrics as in
  production, no watcher), against a grpc.aio TraceService that only decodes the request and
  discards it (until the last export returned). Each root span carries the end marker, so no
  settle time. Target: >= 70% of the floor. A second row adds one WatchResults follower and
  ends at its last result: what following costs (one gRPC message per result), not the target.
- latency: the sender model of a live agent host: each run is made live by an OpenTelemetry
  SDK and its spans exported as soon as its root ends, one export per run, by
  `--latency-senders` senders that share the paced `--rate` (each export waits for its
  answer, as the SDKs' exporters do). Two SDKs in turn (`--latency-sdk`): the Go SDK's
  OTLP/gRPC exporter (bench/live_sender, goroutines of one process; about 0.3 ms of CPU per
  run) and the Python SDK's (processes; about 1.1-1.5 ms of CPU per run, so at 1,000 runs/s
  the Python senders alone take most of a 2-core machine and every row waits for a CPU).
  Time from each root span's end (its `end_time`) to its result at a WatchResults reader in
  its own process, minus `--settle-s`. Target: p99 < 5 ms. Before it, the floor takes the same
  paced stream (its server CPU per run is gRPC's own cost of one export per run) and echoes
  each root's trace id at once to the same kind of reader on a WatchResults stream of its own:
  the latency of the senders, the transport both ways and the reader, with nothing graded.
  With the first SDK, after it, the same stream to a server started with `--no-core-front`
  (grpc.aio writing the WatchResults stream, as before 2026-12-06; its ratio is its p99 over
  the front's). With `--split`, the server's debug timing (TRAJGRADE_LIVE_TIMING,
  trajgrade/live/timing.py) splits each run's time (first SDK): sender (root end -> export
  call), encode and gRPC (-> the server's handler), server (handler -> published, minus
  settle: the settle timer's lateness, then the grading), and the watcher (published ->
  read), plus the server's collections during the stream. Each row also shows the CPU time
  the hypervisor gave to other guests meanwhile (steal).
  (Before 2026-12-06 the paced sender ended all runs due in a 10 ms tick and exported them in
  one request, so a run's root had ended several ms before its spans left the sender.)
- RSS: peak RSS (VmHWM) of a fresh server after a `--rss-short-s` and a `--rss-long-s`
  sustained stream at `--rss-rate` traces/s (the latency senders). Target: flat within 10%.
- early (`--rows early`): server CPU seconds per run (utime + stime of the server process over
  the stream, until the last result is on WatchResults) at `--early-rate` traces/s for
  `--early-s`, each run's spans spread over one export per 10 ms tick as they end (so a run
  is open across several requests), with `--early-verdicts` off and on, rows interleaved.

    .venv/bin/python bench/bench_live.py                     # ~4 minutes (10 s / 30 s RSS)
    .venv/bin/python bench/bench_live.py --rows latency --split --repeats 3
    .venv/bin/python bench/bench_live.py --rss-short-s 60 --rss-long-s 300 --repeats 3
    .venv/bin/python bench/bench_live.py --rows early --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import rate, ratio, table

SUITE = """\
name: bench
assertions:
  - tool_sequence:
      steps:
        - tool: get_weather
        - tool: get_time
  - forbidden_tools:
      tools: ["delete_*"]
  - step_count:
      max: 10
"""
ROUTES = """\
routes:
  - name: all
    match: {}
    suites: [bench.yaml]
"""
TOOLS = ("get_weather", "get_time", "get_weather", "get_time")
ROWS = {"throughput", "latency", "rss", "early"}
SPANS_PER_TRACE = 1 + len(TOOLS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_ticks() -> tuple[int, int]:
    """All CPUs' steal and total time so far (/proc/stat), in ticks; zeros where unknown."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return 0, 0
    # user nice system idle iowait irq softirq steal (guest times are within user and nice)
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


# --- spans, by the OTel SDK ---------------------------------------------------------------------


def _provider(exporter: Any) -> Any:
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: PLC0415

    provider = TracerProvider(resource=Resource.create({"service.name": "bench-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def make_trace(tracer: Any, end_marker: bool) -> None:
    """One agent run: an `invoke_agent` root with an `execute_tool` span per tool call."""
    for _ in trace_steps(tracer, end_marker):
        pass


def trace_steps(tracer: Any, end_marker: bool = False) -> Iterator[None]:
    """make_trace as it happens: one span ends per step (the tools, then the root), so the
    spans of a run reach the exporter over several ticks."""
    from opentelemetry import trace  # noqa: PLC0415

    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "bench_agent",
    }
    if end_marker:
        attributes["trajgrade.run.end"] = True
    root = tracer.start_span("invoke_agent bench_agent", attributes=attributes)
    context = trace.set_span_in_context(root)
    for i, tool in enumerate(TOOLS):
        yield
        span = tracer.start_span(
            f"execute_tool {tool}",
            context=context,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": f"call_{i}",
                "gen_ai.tool.call.arguments": '{"city": "Paris"}',
                "gen_ai.tool.call.result": "ok",
            },
        )
        span.end()
    yield
    root.end()


def prebuilt_spans(traces: int, end_marker: bool) -> list[Any]:
    """ReadableSpans of `traces` runs, children before their root (the order they end in)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: PLC0415
        InMemorySpanExporter,
    )

    memory = InMemorySpanExporter()
    tracer = _provider(memory).get_tracer("bench")
    for _ in range(traces):
        make_trace(tracer, end_marker)
    return list(memory.get_finished_spans())


def exporter(port: int) -> Any:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )

    return OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=30)


def burst_sender(port: int, traces: int, batch: int, barrier: Any, out: Any) -> None:
    """Throughput sender (own process): pre-built spans, exported in batches as fast as the
    receiver answers, after every sender is ready."""
    from opentelemetry.sdk.trace.export import SpanExportResult  # noqa: PLC0415

    spans = prebuilt_spans(traces, end_marker=True)
    sink = exporter(port)
    barrier.wait()
    start = time.perf_counter()
    ok = True
    for i in range(0, len(spans), batch):
        ok &= sink.export(spans[i : i + batch]) is SpanExportResult.SUCCESS
    out.put((len(spans), time.perf_counter() - start, ok))
    sink.shutdown()


def paced_sender(  # noqa: PLR0917 - a multiprocessing target: positional arguments
    port: int, traces_per_s: float, seconds: float, spread: bool, barrier: Any, out: Any
) -> None:
    """Latency and RSS sender (own process): runs made live by the SDK at `traces_per_s`, each
    exported as its root ends (one export per run, as an agent host's exporter sends a run's
    spans when they end); sends back each root's end time (wall clock, ns) and when its export
    began, by trace id. With `spread` (the early rows), every run in flight ends one span per
    10 ms tick (trace_steps) and each tick's ended spans go in one export, so a run is open
    across several requests."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: PLC0415
        InMemorySpanExporter,
    )

    memory = InMemorySpanExporter()
    tracer = _provider(memory).get_tracer("bench")
    sink = exporter(port)
    ends: dict[str, tuple[int, int]] = {}
    barrier.wait()
    start, cpu = time.perf_counter(), time.process_time()
    sent = 0
    tick = 0.01 if spread else 1 / traces_per_s
    running: list[Any] = []
    while (elapsed := time.perf_counter() - start) < seconds or running:
        due = int(elapsed * traces_per_s) + 1 - sent if elapsed < seconds else 0
        for _ in range(max(due, 0)):
            if spread:
                running.append(trace_steps(tracer))
                continue
            make_trace(tracer, end_marker=False)
            _export(sink, memory, ends)
        if spread:
            # One step of every run in flight (a finished run leaves the list).
            running = [steps for steps in running if next(steps, StopIteration) is None]
            _export(sink, memory, ends)
        sent += max(due, 0)
        pause = start + (int(elapsed / tick) + 1) * tick - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    out.put((ends, sent / (time.perf_counter() - start), time.process_time() - cpu))
    sink.shutdown()


def _export(sink: Any, memory: Any, ends: dict[str, tuple[int, int]]) -> None:
    """Export the spans ended so far; note each root's end and the export's start."""
    spans = memory.get_finished_spans()
    memory.clear()
    if not spans:
        return
    began = time.time_ns()
    sink.export(list(spans))
    for span in spans:
        if span.parent is None:
            ends[format(span.context.trace_id, "032x")] = (span.end_time, began)


def watch_main(grpc_port: int, ready: Any, expected: Any, out: Any, hello: bool = False) -> None:
    """The WatchResults reader (own process, so that neither the senders nor the bench
    delay its reads): notes when each run's result arrived (wall clock, ns) until it has the
    number of results the bench then sends it, and sends the arrivals back. With `hello` (the
    floor), it is ready once the server's first, empty message came: it is registered."""
    from trajgrade.v1 import grader_service_pb2, grader_service_pb2_grpc  # noqa: PLC0415

    arrived: dict[str, int] = {}
    target = [2**62]
    enough = threading.Event()
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    stub = grader_service_pb2_grpc.GraderServiceStub(channel)
    call = stub.WatchResults(grader_service_pb2.WatchResultsRequest())

    def follow() -> None:
        try:
            for response in call:
                if not response.trace_id:  # the floor's hello
                    ready.set()
                    continue
                arrived[response.trace_id] = time.time_ns()
                if len(arrived) >= target[0]:
                    enough.set()
        except grpc.RpcError:
            enough.set()

    threading.Thread(target=follow, daemon=True).start()
    if not hello:
        ready.set()
    target[0], timeout = expected.get()
    if len(arrived) >= target[0]:
        enough.set()
    enough.wait(timeout)
    out.put(dict(arrived))
    call.cancel()
    channel.close()


# --- the servers -------------------------------------------------------------------------------


def floor_main(port: int) -> None:
    """The floor: a grpc.aio TraceService that decodes each request and discards it. With a
    WatchResults reader connected (the latency floor), each root span's trace id is also
    echoed to it at once, on a GraderService/WatchResults stream of the same server: the
    transport both ways, with no assembly, settle time or grading."""
    from opentelemetry.proto.collector.trace.v1 import (  # noqa: PLC0415
        trace_service_pb2,
        trace_service_pb2_grpc,
    )
    from trajgrade.v1 import grader_service_pb2  # noqa: PLC0415

    watchers: list[asyncio.Queue[str]] = []

    class Discard(trace_service_pb2_grpc.TraceServiceServicer):
        async def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
            if watchers:
                for resource_spans in request.resource_spans:
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            if not span.parent_span_id:
                                for queue in watchers:
                                    queue.put_nowait(span.trace_id.hex())
            return trace_service_pb2.ExportTraceServiceResponse()

    async def watch(request: bytes, context: Any) -> AsyncIterator[bytes]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        watchers.append(queue)
        try:
            yield b""  # the hello: the reader knows it is registered
            while True:
                trace_id = await queue.get()
                yield grader_service_pb2.WatchResultsResponse(trace_id=trace_id).SerializeToString()
        finally:
            watchers.remove(queue)

    async def serve() -> None:
        server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            Discard(), server
        )
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "trajgrade.v1.GraderService",
                    {"WatchResults": grpc.unary_stream_rpc_method_handler(watch)},
                ),
            )
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    otlp_port: int
    grpc_port: int | None = None
    metrics_port: int | None = None
    sink: Path | None = None

    def peak_rss_kib(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")
        )

    def cpu_s(self) -> float:
        """utime + stime of the server process so far, in seconds."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ServerExitedError(RuntimeError):
    """A server process ended before it listened (e.g. its port was taken meanwhile)."""


def _ready(port: int, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    """Wait until the server of `process` listens on `port`; at once if the process ended."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        ready = grpc.channel_ready_future(channel)
        while True:
            try:
                ready.result(timeout=0.5)
                return
            except grpc.FutureTimeoutError:
                if process.poll() is not None:
                    raise ServerExitedError(f"exit code {process.returncode}") from None
                if time.monotonic() > deadline:
                    raise


def start_floor() -> Server:
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--floor-server", str(port)])
    _ready(port, process)
    return Server(process, port, grpc_port=port)


START_ATTEMPTS = 3


def start_trajgrade(
    workdir: Path,
    settle_s: float,
    early: bool = False,
    late_window_s: float | None = None,
    *,
    sink: Path | None = None,
    timing: Path | None = None,
    front: bool = True,
) -> Server:
    """A `trajgrade serve` process; with `sink`, its JSONL results sink; with `timing`, its
    per-run debug timing (trajgrade/live/timing.py) written there when it stops; without
    `front`, grpc.aio serves its address itself (--no-core-front). A start
    whose process ends before it listens (a port free when picked, taken before the server
    bound it) is tried again on new ports; the third failure raises with the server's log."""
    failure = ServerExitedError("not started")
    for _ in range(START_ATTEMPTS):
        try:
            return _start_trajgrade(workdir, settle_s, early, late_window_s, sink, timing, front)
        except ServerExitedError as exc:
            failure = exc
    raise RuntimeError(f"trajgrade serve did not start in {START_ATTEMPTS} attempts: {failure}")


def _start_trajgrade(  # noqa: PLR0917 - start_trajgrade's arguments, passed on
    workdir: Path,
    settle_s: float,
    early: bool,
    late_window_s: float | None,
    sink: Path | None,
    timing: Path | None,
    front: bool,
) -> Server:
    otlp_port, grpc_port, metrics_port = free_port(), free_port(), free_port()
    trajgrade = Path(sys.executable).with_name("trajgrade")
    command = [
        str(trajgrade),
        "serve",
        "--listen", f"127.0.0.1:{grpc_port}",
        "--otlp-grpc", f"127.0.0.1:{otlp_port}",
        "--routes", str(workdir / "routes.yaml"),
        "--live-settle-s", str(settle_s),
        "--metrics-port", str(metrics_port),
        "--watch-queue-size", "1000000",
        "--early-verdicts" if early else "--no-early-verdicts",
        "--core-front" if front else "--no-core-front",
    ]  # fmt: skip
    if late_window_s is not None:
        command += ["--live-late-window-s", str(late_window_s)]
    if sink is not None:
        command += ["--results-jsonl", str(sink)]
    env = dict(os.environ)
    if timing is not None:
        env["TRAJGRADE_LIVE_TIMING"] = str(timing)
    log = workdir / f"serve-{grpc_port}.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(command, stderr=stderr, env=env)
    server = Server(process, otlp_port, grpc_port, metrics_port, sink)
    try:
        _ready(grpc_port, process)
        _ready(otlp_port, process)
    except ServerExitedError as exc:
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise ServerExitedError(f"{exc}; its log ends:\n{tail}") from None
    return server


class Watcher:
    """A WatchResults reader in its own process (watch_main), registered before it returns."""

    def __init__(self, server: Server) -> None:
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        self._expected, self._out = ctx.Queue(), ctx.Queue()
        # The floor has no metrics: it greets a registered reader with an empty message.
        hello = server.metrics_port is None
        self._process = ctx.Process(
            target=watch_main, args=(server.grpc_port, ready, self._expected, self._out, hello)
        )
        self._process.start()
        if not ready.wait(60):
            raise RuntimeError("the WatchResults reader did not start")
        # Results only reach a watcher registered before they are published: wait for it.
        deadline = time.monotonic() + 30
        while not hello and _metric(server, "trajgrade_live_watchers") < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("WatchResults watcher never registered")
            time.sleep(0.02)

    def results(self, n: int, timeout: float) -> dict[str, int]:
        """Wait until `n` results arrived; when each arrived (wall clock, ns) by trace id."""
        self._expected.put((n, timeout))
        arrived: dict[str, int] = self._out.get(timeout=timeout + 60)
        self._process.join()
        if len(arrived) < n:
            raise RuntimeError(f"only {len(arrived)} of {n} results arrived")
        return arrived


def _metric(server: Server, name: str) -> float:
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


# --- rows --------------------------------------------------------------------------------------


def _spawn(target: Any, args: tuple[Any, ...], senders: int) -> tuple[list[Any], Any, Any]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(senders + 1)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, barrier, out)) for _ in range(senders)]
    for p in procs:
        p.start()
    return procs, barrier, out


def wait_rows(sink: Path, n: int, timeout: float) -> int:
    """Wait until the JSONL sink holds `n` rows (read as it grows, every millisecond; no cost
    to the server); the wall clock (ns) when the n-th was seen."""
    deadline = time.monotonic() + timeout
    rows = 0
    with contextlib.ExitStack() as stack:
        f = None
        while True:
            if f is None and sink.exists():
                f = stack.enter_context(sink.open("rb"))
            if f is not None:
                rows += f.read().count(b"\n")
            if rows >= n:
                return time.time_ns()
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {rows} of {n} results reached the sink")
            time.sleep(0.001)


def throughput(server: Server, args: argparse.Namespace, mode: str) -> tuple[float, float]:
    """Spans/s from the senders' start to the last export answered (`floor`), the last
    result in the JSONL sink (`graded`: every run graded, as in production) or the last
    result on a WatchResults follower (`follow`); and the server's CPU seconds meanwhile."""
    watcher = Watcher(server) if mode == "follow" else None
    cpu = server.cpu_s()
    procs, barrier, out = _spawn(
        burst_sender, (server.otlp_port, args.traces, args.batch), args.senders
    )
    barrier.wait(timeout=300)
    start = time.time_ns()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    if not all(ok for _, _, ok in results):
        raise RuntimeError("an export failed")
    spans = sum(n for n, _, _ in results)
    runs = args.traces * args.senders
    if mode == "floor":
        end = start + round(max(seconds for _, seconds, _ in results) * 1e9)
    elif watcher is not None:
        end = max(watcher.results(runs, timeout=600).values())
    else:
        assert server.sink is not None
        end = wait_rows(server.sink, runs, timeout=600)
    return spans / ((end - start) / 1e9), server.cpu_s() - cpu


@dataclass
class Paced:
    """A paced stream: per trace id the root's end and its export's start (sender), the
    result's arrival at the watcher (if watched), the rate achieved, the server's CPU."""

    ends: dict[str, tuple[int, int]]
    arrived: dict[str, int]
    achieved: float
    cpu_s: float
    sender_cpu_s: float = 0.0  # the senders' CPU over the stream (their own count)


def paced(
    server: Server,
    traces_per_s: float,
    seconds: float,
    watch: bool,
    *,
    spread: bool = False,
    senders: int = 1,
) -> Paced:
    """A paced stream of `traces_per_s` runs a second over `senders` processes."""
    watcher = Watcher(server) if watch else None
    cpu = server.cpu_s()
    procs, barrier, out = _spawn(
        paced_sender, (server.otlp_port, traces_per_s / senders, seconds, spread), senders
    )
    barrier.wait(timeout=300)
    ends: dict[str, tuple[int, int]] = {}
    achieved = sender_cpu = 0.0
    for _ in procs:
        sent, rate_, sender_cpu_s = out.get(timeout=seconds + 600)
        ends |= sent
        achieved += rate_
        sender_cpu += sender_cpu_s
    for p in procs:
        p.join()
    arrived = {} if watcher is None else watcher.results(len(ends), timeout=120)
    return Paced(ends, arrived, achieved, server.cpu_s() - cpu, sender_cpu)


# --- the Go SDK's sender (bench/live_sender) ---------------------------------------------------

GO_SENDER = Path(__file__).resolve().with_name("live_sender")


def go_sender() -> Path:
    """bench/live_sender built (again when its sources are newer than the binary)."""
    binary = GO_SENDER / "bin" / "live_sender"
    sources = [GO_SENDER / name for name in ("main.go", "go.mod", "go.sum")]
    newest = max(source.stat().st_mtime for source in sources)
    if not binary.exists() or binary.stat().st_mtime < newest:
        go = shutil.which("go")
        if go is None:
            raise RuntimeError("the Go SDK's sender needs Go to build; or --latency-sdk python")
        env = {**os.environ, "GOFLAGS": "-mod=readonly"}
        command = [go, "build", "-o", str(binary), "."]
        subprocess.run(command, cwd=GO_SENDER, env=env, check=True)
    return binary


def go_paced(server: Server, traces_per_s: float, seconds: float, workers: int) -> Paced:
    """paced() with the OpenTelemetry Go SDK's exporter as the agent host: one process,
    `workers` goroutines sharing the rate, each exporting one run at a time as its root ends
    (bench/live_sender/main.go), read by a WatchResults reader."""
    watcher = Watcher(server)
    command = [
        str(go_sender()),
        "-endpoint", f"127.0.0.1:{server.otlp_port}",
        "-rate", str(traces_per_s),
        "-seconds", str(seconds),
        "-workers", str(workers),
    ]  # fmt: skip
    sender = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert sender.stdin is not None and sender.stdout is not None
    if sender.stdout.readline().strip() != "ready":
        sender.kill()
        raise RuntimeError("the Go SDK's sender did not start")
    cpu = server.cpu_s()
    output, _ = sender.communicate("go\n", timeout=seconds + 600)
    if sender.returncode != 0:
        raise RuntimeError(f"the Go SDK's sender failed (exit code {sender.returncode})")
    ends: dict[str, tuple[int, int]] = {}
    achieved, failed, sender_cpu = 0.0, 0, 0.0
    for line in output.splitlines():
        first, *rest = line.split()
        if first == "achieved":
            achieved, failed, sender_cpu = float(rest[0]), int(rest[1]), float(rest[2])
        else:
            second, third = rest
            ends[first] = (int(second), int(third))
    if failed:
        raise RuntimeError(f"{failed} of the Go SDK's exports failed")
    arrived = watcher.results(len(ends), timeout=120)
    return Paced(ends, arrived, achieved, server.cpu_s() - cpu, sender_cpu)


def cpu_per_run(workdir: Path, args: argparse.Namespace, early: bool) -> tuple[float, float]:
    """Server CPU seconds per run over a spread stream, until every result arrived, and the
    early checks per run."""
    server = start_trajgrade(workdir, args.settle_s, early)
    try:
        stream = paced(server, args.early_rate, args.early_s, watch=True, spread=True)
        runs = len(stream.ends)
        checks = _metric(server, "trajgrade_live_early_checks_total")
        return stream.cpu_s / runs, checks / runs
    finally:
        server.stop()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floor-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--senders", type=int, default=2, help="throughput: exporter processes")
    # 10,000 runs a sender: the row lasts over a second, so the last trip, its fsync and the
    # processes' start-up weigh little on it (docs/performance.md, 2026-12-06).
    parser.add_argument("--traces", type=int, default=10_000, help="runs per throughput sender")
    parser.add_argument("--batch", type=int, default=512, help="spans per export (SDK default)")
    parser.add_argument("--rate", type=float, default=1000.0, help="latency: traces/s")
    parser.add_argument(
        "--latency-senders",
        type=int,
        default=4,
        help="latency and RSS: senders sharing --rate, each exporting one run at a time "
        "(Python SDK: processes; Go SDK: goroutines of one process)",
    )
    parser.add_argument(
        "--latency-sdk",
        default="go,python",
        help="latency: the senders' OpenTelemetry SDKs, in turn, comma-separated: go "
        "(bench/live_sender, goroutines), python (processes); the first also gets the "
        "grpc.aio row and --split",
    )
    parser.add_argument("--latency-s", type=float, default=5.0)
    parser.add_argument("--settle-s", type=float, default=0.05)
    parser.add_argument(
        "--split",
        action="store_true",
        help="latency: also the split sender / server / watcher (the server's debug timing "
        "on, TRAJGRADE_LIVE_TIMING)",
    )
    parser.add_argument("--rss-rate", type=float, default=500.0, help="RSS stream: traces/s")
    parser.add_argument("--rss-short-s", type=float, default=10.0)
    parser.add_argument("--rss-long-s", type=float, default=30.0)
    parser.add_argument(
        "--late-window-s",
        type=float,
        help="RSS rows: the server's --live-late-window-s (unset: its default, 3 idle timeouts; "
        "the memory of graded ids is flat once the window, or the count cap, is reached)",
    )
    parser.add_argument(
        "--rows",
        default="throughput,latency,rss",
        help="comma-separated rows to run: throughput (with its floor and the follower row), "
        "latency, rss, early",
    )
    parser.add_argument("--early-rate", type=float, default=200.0, help="early rows: traces/s")
    parser.add_argument("--early-s", type=float, default=10.0, help="early rows: seconds")
    args = parser.parse_args()
    args.rows = set(args.rows.split(","))
    args.latency_sdk = args.latency_sdk.split(",")
    if not args.latency_sdk or set(args.latency_sdk) - set(SDK_LABEL):
        parser.error(f"--latency-sdk: pick from {sorted(SDK_LABEL)}")
    unknown = args.rows - ROWS
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; pick from {sorted(ROWS)}")
    if args.floor_server:
        floor_main(args.floor_server)
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="bench-live-"))
    (workdir / "bench.yaml").write_text(SUITE)
    (workdir / "routes.yaml").write_text(ROUTES)
    m = Measurements()
    for repeat in range(args.repeats):
        print(f"repeat {repeat + 1}/{args.repeats} (load average {loadavg()})", flush=True)
        measure_once(args, workdir, m, repeat)
    report(args, m)
    return 0


@dataclass
class Measurements:
    # Per row: the medians' inputs, one per repeat.
    values: dict[str, list[float]] = field(default_factory=dict)
    # Server CPU: (seconds, runs) per repeat.
    cpu: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    loads: dict[str, list[str]] = field(default_factory=dict)

    def add(self, name: str, value: float, cpu: tuple[float, int] | None = None) -> None:
        self.values.setdefault(name, []).append(value)
        if cpu is not None:
            self.cpu.setdefault(name, []).append(cpu)

    # /proc/stat's (steal, total) CPU ticks when the last row was done (or measuring began).
    mark: tuple[int, int] = field(default_factory=cpu_ticks)

    def row_done(self, name: str) -> None:
        """The load average now, and the share of the CPU time since the last row that the
        hypervisor gave to other guests (steal: this virtual machine's CPUs were runnable
        but not running; a row measured under heavy steal is noisy)."""
        now = cpu_ticks()
        total = now[1] - self.mark[1]
        steal = (now[0] - self.mark[0]) / total if total else 0.0
        self.mark = now
        self.loads.setdefault(name, []).append(f"{loadavg()}, steal {steal:.0%}")

    def med(self, name: str) -> float:
        return statistics.median(self.values[name])


def _ms(ns: float) -> float:
    return ns / 1e6


def watched_stream(server: Server, args: argparse.Namespace, sdk: str = "python") -> Paced:
    """The latency row's paced stream to `server` with a WatchResults reader, sent by the
    `sdk`'s exporter (go: bench/live_sender; python: paced_sender); stops the server."""
    try:
        if sdk == "go":
            return go_paced(server, args.rate, args.latency_s, args.latency_senders)
        return paced(server, args.rate, args.latency_s, watch=True, senders=args.latency_senders)
    finally:
        server.stop()


def latencies_ms(stream: Paced, offset_ns: float) -> list[float]:
    """Each run's root end to its result at the reader, minus `offset_ns` (the settle time)."""
    return [_ms(stream.arrived[t] - end - offset_ns) for t, (end, _) in stream.ends.items()]


def latency_row(args: argparse.Namespace, workdir: Path, m: Measurements, repeat: int) -> None:
    """Per sender SDK, in turn: the floor, the server, and (first SDK only) the server with
    grpc.aio writing WatchResults; --split cuts the first SDK's server stream."""
    settle_ns = args.settle_s * 1e9
    for index, sdk in enumerate(args.latency_sdk):
        first = index == 0
        # The floor for the same stream: gRPC's own cost of one export per run, and the
        # latency of the transport both ways (each root echoed to a reader as its export comes).
        stream = watched_stream(start_floor(), args, sdk)
        m.row_done(f"{sdk}:paced_floor")
        floor_latencies = latencies_ms(stream, 0.0)
        m.add(f"{sdk}:paced_floor", stream.achieved, (stream.cpu_s, len(stream.ends)))
        m.add(f"{sdk}:floor_p50", pct(floor_latencies, 0.5))
        m.add(f"{sdk}:floor_p99", pct(floor_latencies, 0.99))
        timing = workdir / f"timing-{repeat}.tsv" if args.split and first else None
        stream = watched_stream(start_trajgrade(workdir, args.settle_s, timing=timing), args, sdk)
        m.row_done(f"{sdk}:latency")
        latencies = latencies_ms(stream, settle_ns)
        m.add(f"{sdk}:p50", pct(latencies, 0.5), (stream.cpu_s, len(stream.ends)))
        m.add(f"{sdk}:p99", pct(latencies, 0.99))
        m.add(f"{sdk}:achieved", stream.achieved)
        m.add(f"{sdk}:sender_us", stream.sender_cpu_s / len(stream.ends) * 1e6)
        if timing is not None:
            split_rows(timing, stream, settle_ns, m)
        if not first:
            continue
        # The same stream with grpc.aio writing the WatchResults stream (--no-core-front).
        aio = watched_stream(start_trajgrade(workdir, args.settle_s, front=False), args, sdk)
        m.row_done(f"{sdk}:latency_aio")
        aio_latencies = latencies_ms(aio, settle_ns)
        m.add(f"{sdk}:aio_p50", pct(aio_latencies, 0.5), (aio.cpu_s, len(aio.ends)))
        m.add(f"{sdk}:aio_p99", pct(aio_latencies, 0.99))


def split_rows(timing: Path, stream: Paced, settle_ns: float, m: Measurements) -> None:
    """--split: each run's latency cut at the server's debug timing (trajgrade/live/timing.py),
    and the collector's pauses during the stream."""
    server_times = {}
    collections: list[tuple[int, int, int]] = []
    for line in timing.read_text().splitlines():
        key, *fields = line.split("\t")
        if key == "gc":  # a collection: generation, start, duration
            generation, at, took = map(int, fields)
            collections.append((generation, at, took))
        else:
            # arrival, completed, published, dequeued and written by the watcher's stream
            server_times[key] = tuple(map(int, fields))
    # The collections during the stream (not startup's).
    first = min(times[0] for times in server_times.values())
    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    for generation, at, took in collections:
        if at >= first:
            pauses[generation].append(_ms(took))
    for generation, tooks in pauses.items():
        m.add(f"gc{generation}_n", len(tooks))
        m.add(f"gc{generation}_max", max(tooks, default=0.0))
    parts: dict[str, list[float]] = {name: [] for name, _ in SPLIT}
    for trace_id, (end, began) in stream.ends.items():
        arrival, completed, published, dequeued, written = server_times[trace_id]
        parts["published"].append(_ms(published - end - settle_ns))
        parts["sender"].append(_ms(began - end))
        parts["transport"].append(_ms(arrival - began))
        parts["server"].append(_ms(published - arrival - settle_ns))
        parts["timer"].append(_ms(completed - arrival - settle_ns))
        parts["grading"].append(_ms(published - completed))
        parts["watcher"].append(_ms(stream.arrived[trace_id] - published))
        if dequeued:
            parts["queue"].append(_ms(dequeued - published))
        if written:  # grpc.aio's streams only (--core-front false)
            parts["write"].append(_ms(written - dequeued))
    for name, values in parts.items():
        if values:  # the queue and write rows need a watcher's stamps
            m.add(f"{name}_p50", pct(values, 0.5))
            m.add(f"{name}_p99", pct(values, 0.99))


SPLIT = [
    ("published", "  root end -> published, minus settle (all but the watcher's leg)"),
    ("sender", "  sender: root end -> export call (SDK, one run)"),
    ("transport", "  export call -> server handler (encode, gRPC)"),
    ("server", "  server: handler -> published, minus settle"),
    ("timer", "    of which: settle timer's lateness"),
    ("grading", "    of which: complete -> published (grading)"),
    ("watcher", "  published -> WatchResults reader"),
    ("queue", "    of which: in the watcher's queue (behind earlier writes)"),
    ("write", "    of which: the stream's write, until grpc.aio completes it"),
]


def measure_once(args: argparse.Namespace, workdir: Path, m: Measurements, repeat: int) -> None:
    """One repeat: every row once, in the same order each time (interleaved with the others)."""
    if "throughput" in args.rows:
        floor = start_floor()
        try:
            spans_per_s, cpu = throughput(floor, args, "floor")
            m.add("floor", spans_per_s, (cpu, args.traces * args.senders))
        finally:
            floor.stop()
        m.row_done("floor")
        for mode in ("graded", "follow"):
            sink = workdir / f"sink-{mode}-{repeat}.jsonl"
            server = start_trajgrade(workdir, args.settle_s, sink=sink)
            try:
                spans_per_s, cpu = throughput(server, args, mode)
                m.add(mode, spans_per_s, (cpu, args.traces * args.senders))
            finally:
                server.stop()
            m.row_done(mode)
    if "latency" in args.rows:
        latency_row(args, workdir, m, repeat)
    if "rss" in args.rows:
        for name, seconds in (("rss_short", args.rss_short_s), ("rss_long", args.rss_long_s)):
            server = start_trajgrade(workdir, args.settle_s, late_window_s=args.late_window_s)
            try:
                paced(server, args.rss_rate, seconds, watch=False, senders=args.latency_senders)
                m.add(name, server.peak_rss_kib())
            finally:
                server.stop()
            m.row_done(name)
    if "early" in args.rows:
        m.add("cpu_off", cpu_per_run(workdir, args, early=False)[0])
        m.row_done("cpu_off")
        cpu, checks = cpu_per_run(workdir, args, early=True)
        m.add("cpu_on", cpu)
        m.add("checks_per_run", checks)
        m.row_done("cpu_on")


def _core_profile() -> str:
    from trajgrade import _core  # noqa: PLC0415

    return str(_core.build_profile)


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


SDK_LABEL = {"go": "Go SDK", "python": "Python SDK"}


def latency_rows(  # noqa: PLR0917 - report()'s pieces, passed on
    args: argparse.Namespace,
    m: Measurements,
    sdk: str,
    first: bool,
    cpu: Any,
    last: dict[str, str],
) -> list[list[str]]:
    """The latency rows of one sender SDK (the grpc.aio row and the split with the first)."""
    med, label = m.med, SDK_LABEL[sdk]
    p99 = med(f"{sdk}:p99")
    unit = "goroutines in one process" if sdk == "go" else "processes"
    rows = [
        [
            f"floor: the same paced stream, echoed, {label} senders, at "
            f"{rate(med(f'{sdk}:paced_floor'))} traces/s",
            f"p50 {med(f'{sdk}:floor_p50'):.2f} ms, p99 {med(f'{sdk}:floor_p99'):.2f} ms",
            "",
            cpu(f"{sdk}:paced_floor"),
            last[f"{sdk}:paced_floor"],
        ],
        [
            f"root end -> WatchResults, minus settle, {label} senders, at "
            f"{rate(med(f'{sdk}:achieved'))} traces/s",
            f"p50 {med(f'{sdk}:p50'):.2f} ms, p99 {p99:.2f} ms",
            "",
            cpu(f"{sdk}:p50"),
            last[f"{sdk}:latency"],
        ],
        [
            f"  the senders' CPU ({args.latency_senders} {unit})",
            f"{med(f'{sdk}:sender_us'):,.0f} us/run",
            "",
            "",
            "",
        ],
    ]
    if not first:
        return rows
    rows.append(
        [
            "  the same, WatchResults written by grpc.aio (--no-core-front)",
            f"p50 {med(f'{sdk}:aio_p50'):.2f} ms, p99 {med(f'{sdk}:aio_p99'):.2f} ms",
            ratio(med(f"{sdk}:aio_p99") / p99),
            cpu(f"{sdk}:aio_p50"),
            last[f"{sdk}:latency_aio"],
        ]
    )
    if "server_p99" in m.values:
        blank = ["", "", ""]
        rows += [
            [label, f"p50 {med(name + '_p50'):.2f} ms, p99 {med(name + '_p99'):.2f} ms", *blank]
            for name, label in SPLIT
            if name + "_p50" in m.values
        ]
        rows += [
            [
                f"  server: generation {g} collections",
                f"{med(f'gc{g}_n'):,.0f}, longest {med(f'gc{g}_max'):.2f} ms",
                *blank,
            ]
            for g in (0, 1, 2)
        ]
    return rows


def report(args: argparse.Namespace, m: Measurements) -> None:
    med = m.med
    last = {name: loads[-1] for name, loads in m.loads.items()}

    def cpu(name: str) -> str:
        """The server's CPU over the row: seconds and per run (medians)."""
        if name not in m.cpu:
            return ""
        seconds = statistics.median(s for s, _ in m.cpu[name])
        per_run = statistics.median(s / runs for s, runs in m.cpu[name])
        return f"{seconds:.2f} s ({per_run * 1e6:,.0f} us/run)"

    rows: list[list[str]] = []
    floor_rate = live_rate = 0.0
    if "graded" in m.values:
        floor_rate, live_rate = med("floor"), med("graded")
        rows += [
            [
                "floor: decode and discard",
                f"{rate(floor_rate)} spans/s",
                ratio(1.0),
                cpu("floor"),
                last["floor"],
            ],
            [
                "trajgrade serve: ingest, assemble, grade (to the sink)",
                f"{rate(live_rate)} spans/s",
                ratio(live_rate / floor_rate),
                cpu("graded"),
                last["graded"],
            ],
            [
                "  ... + one WatchResults follower (to its last result)",
                f"{rate(med('follow'))} spans/s",
                ratio(med("follow") / floor_rate),
                cpu("follow"),
                last["follow"],
            ],
        ]
    for index, sdk in enumerate(args.latency_sdk if "latency" in args.rows else []):
        rows += latency_rows(args, m, sdk, index == 0, cpu, last)
    short = long_ = 0.0
    if "rss_short" in m.values:
        short, long_ = med("rss_short"), med("rss_long")
        rows += [
            [
                f"peak RSS after {args.rss_short_s:g} s at {rate(args.rss_rate)} traces/s"
                + ("" if args.late_window_s is None else f", late window {args.late_window_s:g} s"),
                f"{short / 1024:,.1f} MiB",
                ratio(1.0),
                "",
                last["rss_short"],
            ],
            [
                f"peak RSS after {args.rss_long_s:g} s",
                f"{long_ / 1024:,.1f} MiB",
                ratio(long_ / short),
                "",
                last["rss_long"],
            ],
        ]
    if "cpu_on" in m.values:
        off, on = med("cpu_off"), med("cpu_on")
        where = (
            f"{rate(args.early_rate)} traces/s, spans over exports, "
            f"{med('checks_per_run'):.1f} checks/run when on"
        )
        for name, value, base in (("off", off, off), ("on", on, off)):
            rows.append(
                [
                    f"server CPU per run, early verdicts {name}, {where}",
                    f"{value * 1e3:.3f} ms",
                    ratio(value / base),
                    "",
                    last[f"cpu_{name}"],
                ]
            )
    print()
    print(
        table(
            f"Live grading: medians of {args.repeats} repeats, {args.senders} throughput "
            f"exporter processes ({args.batch} spans per export), {args.latency_senders} "
            f"latency senders (one export per run each), {SPANS_PER_TRACE} spans per "
            f"run, core build {_core_profile()}",
            ["row", "median", "ratio", "server CPU", "load average (1/5/15 min), last repeat"],
            rows,
        )
    )
    if "graded" in m.values:
        print(f"targets: throughput >= 70% of floor: {met(live_rate >= 0.7 * floor_rate)}", end="")
        print(f" ({live_rate / floor_rate:.0%})")
    for sdk in args.latency_sdk if "latency" in args.rows else []:
        p99, achieved = med(f"{sdk}:p99"), med(f"{sdk}:achieved")
        sustained = (
            "" if achieved >= args.rate * 0.95 else "; the senders could not sustain the rate"
        )
        print(
            f"p99 < 5 ms, {SDK_LABEL[sdk]} senders: {met(p99 < 5)} ({p99:.2f} ms at "
            f"{rate(achieved)} traces/s; the floor's p99 {med(f'{sdk}:floor_p99'):.2f} ms, the "
            f"senders' CPU {med(f'{sdk}:sender_us'):,.0f} us/run{sustained})"
        )
    if "rss_short" in m.values:
        change = long_ / short - 1
        print(f"RSS flat within 10%: {met(abs(change) <= 0.10)} ({change:+.1%})")
    print(f"load average at the end: {loadavg()}")


if __name__ == "__main__":
    sys.exit(main())
