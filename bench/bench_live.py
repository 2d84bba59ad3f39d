"""Live grading benchmark: `trajgrade serve --otlp-grpc` against a decode-and-discard floor.

Every ratio is measured in one run on one machine; rows take turns, repeat after repeat, and
each figure is the median of the repeats (the load average is printed per row).

- throughput: spans/s that the real Python OTLP exporter (opentelemetry-exporter-otlp-proto-grpc,
  spans pre-built with the OTel SDK, in `--senders` processes) gets ingested, assembled and
  graded by one server process (until the last result is on WatchResults; each root span
  carries the end marker, so no settle time), against a grpc.aio TraceService that only decodes
  the request and discards it (until the last export returned). Target: >= 70% of the floor.
- latency: spans made live by the SDK at a paced `--rate` traces/s; time from each root span's
  end (its `end_time`) to its result on WatchResults, minus `--settle-s`. Target: p99 < 5 ms.
- RSS: peak RSS (VmHWM) of a fresh server after a `--rss-short-s` and a `--rss-long-s`
  sustained stream at `--rss-rate` traces/s. Target: flat within 10%.
- early (`--rows early`): server CPU seconds per run (utime + stime of the server process over
  the stream, until the last result is on WatchResults) at `--early-rate` traces/s for
  `--early-s`, each run's spans spread over one export per 10 ms tick as they end (so a run
  is open across several requests), with `--early-verdicts` off and on, rows interleaved.

    .venv/bin/python bench/bench_live.py                     # ~4 minutes (10 s / 30 s RSS)
    .venv/bin/python bench/bench_live.py --rss-short-s 60 --rss-long-s 300 --repeats 3
    .venv/bin/python bench/bench_live.py --rows early --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
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
    """Latency and RSS sender (own process): runs made live by the SDK every 10 ms tick and
    exported at once; sends back each root's end time (wall clock, ns) by trace id. With
    `spread`, each run ends one span per tick (trace_steps) instead of all at once."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: PLC0415
        InMemorySpanExporter,
    )

    memory = InMemorySpanExporter()
    tracer = _provider(memory).get_tracer("bench")
    sink = exporter(port)
    ends: dict[str, int] = {}
    barrier.wait()
    start = time.perf_counter()
    sent = 0
    tick = 0.01
    running: list[Any] = []
    while (elapsed := time.perf_counter() - start) < seconds or running:
        due = int(elapsed * traces_per_s) + 1 - sent if elapsed < seconds else 0
        for _ in range(max(due, 0)):
            if spread:
                running.append(trace_steps(tracer))
            else:
                make_trace(tracer, end_marker=False)
        # One step of every run in flight (a finished run leaves the list).
        running = [steps for steps in running if next(steps, StopIteration) is None]
        spans = memory.get_finished_spans()
        memory.clear()
        if spans:
            sink.export(list(spans))
            for span in spans:
                if span.parent is None:
                    ends[format(span.context.trace_id, "032x")] = span.end_time
            sent += max(due, 0)
        pause = start + (int(elapsed / tick) + 1) * tick - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    out.put((ends, sent / (time.perf_counter() - start)))
    sink.shutdown()


# --- the servers -------------------------------------------------------------------------------


def floor_main(port: int) -> None:
    """The floor: a grpc.aio TraceService that decodes each request and discards it."""
    from opentelemetry.proto.collector.trace.v1 import (  # noqa: PLC0415
        trace_service_pb2,
        trace_service_pb2_grpc,
    )

    class Discard(trace_service_pb2_grpc.TraceServiceServicer):
        async def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
            return trace_service_pb2.ExportTraceServiceResponse()

    async def serve() -> None:
        server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Discard(), server)
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


def _ready(port: int, timeout: float = 60.0) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)


def start_floor() -> Server:
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, "--floor-server", str(port)])
    _ready(port)
    return Server(process, port)


def start_trajgrade(
    workdir: Path, settle_s: float, early: bool = False, late_window_s: float | None = None
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
    ]  # fmt: skip
    if late_window_s is not None:
        command += ["--live-late-window-s", str(late_window_s)]
    process = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    server = Server(process, otlp_port, grpc_port, metrics_port)
    _ready(grpc_port)
    _ready(otlp_port)
    return server


class Watcher:
    """Follows WatchResults on a thread, noting when each run's result arrived."""

    def __init__(self, server: Server) -> None:
        from trajgrade.v1 import grader_service_pb2, grader_service_pb2_grpc  # noqa: PLC0415

        self.arrived: dict[str, int] = {}
        self.count = 0
        self._channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = grader_service_pb2_grpc.GraderServiceStub(self._channel)
        self._call = stub.WatchResults(grader_service_pb2.WatchResultsRequest())
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()
        # Results only reach a watcher registered before they are published: wait for it.
        deadline = time.monotonic() + 30
        while _metric(server, "trajgrade_live_watchers") < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("WatchResults watcher never registered")
            time.sleep(0.02)

    def _follow(self) -> None:
        try:
            for response in self._call:
                self.arrived[response.trace_id] = time.time_ns()
                self.count += 1
        except grpc.RpcError:
            pass

    def wait_for(self, n: int, timeout: float) -> float:
        """Wait until `n` results arrived; the perf_counter time when the n-th was seen."""
        deadline = time.monotonic() + timeout
        while self.count < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {self.count} of {n} results arrived")
            time.sleep(0.001)
        return time.perf_counter()

    def close(self) -> None:
        self._call.cancel()
        self._channel.close()


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


def throughput(server: Server, args: argparse.Namespace, graded: bool) -> float:
    """Spans/s from the senders' start to the last export answered (floor) or the last result
    on WatchResults (trajgrade)."""
    watcher = Watcher(server) if graded else None
    procs, barrier, out = _spawn(
        burst_sender, (server.otlp_port, args.traces, args.batch), args.senders
    )
    barrier.wait(timeout=300)
    start = time.perf_counter()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    if not all(ok for _, _, ok in results):
        raise RuntimeError("an export failed")
    spans = sum(n for n, _, _ in results)
    if watcher is None:
        end = start + max(seconds for _, seconds, _ in results)
    else:
        end = watcher.wait_for(args.traces * args.senders, timeout=600)
        watcher.close()
    return spans / (end - start)


def paced(
    server: Server, traces_per_s: float, seconds: float, watch: bool, spread: bool = False
) -> tuple[Any, float]:
    """A paced stream; with `watch`, the root-end-to-result latencies (ms, settle included)."""
    watcher = Watcher(server) if watch else None
    procs, barrier, out = _spawn(paced_sender, (server.otlp_port, traces_per_s, seconds, spread), 1)
    barrier.wait(timeout=300)
    ends, achieved = out.get(timeout=seconds + 600)
    for p in procs:
        p.join()
    if watcher is None:
        return None, achieved
    watcher.wait_for(len(ends), timeout=120)
    watcher.close()
    latencies = [(watcher.arrived[t] - end) / 1e6 for t, end in ends.items()]
    return latencies, achieved


def cpu_per_run(workdir: Path, args: argparse.Namespace, early: bool) -> tuple[float, float]:
    """Server CPU seconds per run over a spread stream, until every result arrived, and the
    early checks per run."""
    server = start_trajgrade(workdir, args.settle_s, early)
    try:
        before = server.cpu_s()
        latencies, _ = paced(server, args.early_rate, args.early_s, watch=True, spread=True)
        runs = len(latencies)
        checks = _metric(server, "trajgrade_live_early_checks_total")
        return (server.cpu_s() - before) / runs, checks / runs
    finally:
        server.stop()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floor-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--senders", type=int, default=2, help="exporter processes")
    parser.add_argument("--traces", type=int, default=2000, help="runs per throughput sender")
    parser.add_argument("--batch", type=int, default=512, help="spans per export (SDK default)")
    parser.add_argument("--rate", type=float, default=1000.0, help="latency: traces/s")
    parser.add_argument("--latency-s", type=float, default=5.0)
    parser.add_argument("--settle-s", type=float, default=0.05)
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
        help="comma-separated rows to run: throughput (with its floor), latency, rss, early",
    )
    parser.add_argument("--early-rate", type=float, default=200.0, help="early rows: traces/s")
    parser.add_argument("--early-s", type=float, default=10.0, help="early rows: seconds")
    args = parser.parse_args()
    args.rows = set(args.rows.split(","))
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
        measure_once(args, workdir, m)
    report(args, m)
    return 0


@dataclass
class Measurements:
    floor: list[float] = field(default_factory=list)
    live: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    achieved: list[float] = field(default_factory=list)
    rss_short: list[int] = field(default_factory=list)
    rss_long: list[int] = field(default_factory=list)
    cpu_off: list[float] = field(default_factory=list)
    cpu_on: list[float] = field(default_factory=list)
    checks_per_run: list[float] = field(default_factory=list)
    loads: dict[str, list[str]] = field(default_factory=dict)

    def row_done(self, name: str) -> None:
        self.loads.setdefault(name, []).append(loadavg())


def measure_once(args: argparse.Namespace, workdir: Path, m: Measurements) -> None:
    """One repeat: every row once, in the same order each time (interleaved with the others)."""
    if "throughput" in args.rows:
        floor = start_floor()
        try:
            m.floor.append(throughput(floor, args, graded=False))
        finally:
            floor.stop()
        m.row_done("floor")
        server = start_trajgrade(workdir, args.settle_s)
        try:
            m.live.append(throughput(server, args, graded=True))
        finally:
            server.stop()
        m.row_done("throughput")
    if "latency" in args.rows:
        server = start_trajgrade(workdir, args.settle_s)
        try:
            latencies, achieved = paced(server, args.rate, args.latency_s, watch=True)
        finally:
            server.stop()
        m.row_done("latency")
        latencies = [x - args.settle_s * 1000 for x in latencies]
        m.p50.append(pct(latencies, 0.5))
        m.p99.append(pct(latencies, 0.99))
        m.achieved.append(achieved)
    if "rss" in args.rows:
        for name, seconds, into in (
            ("rss_short", args.rss_short_s, m.rss_short),
            ("rss_long", args.rss_long_s, m.rss_long),
        ):
            server = start_trajgrade(workdir, args.settle_s, late_window_s=args.late_window_s)
            try:
                paced(server, args.rss_rate, seconds, watch=False)
                into.append(server.peak_rss_kib())
            finally:
                server.stop()
            m.row_done(name)
    if "early" in args.rows:
        m.cpu_off.append(cpu_per_run(workdir, args, early=False)[0])
        m.row_done("cpu_off")
        cpu, checks = cpu_per_run(workdir, args, early=True)
        m.cpu_on.append(cpu)
        m.checks_per_run.append(checks)
        m.row_done("cpu_on")


def _core_profile() -> str:
    from trajgrade import _core  # noqa: PLC0415

    return str(_core.build_profile)


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def report(args: argparse.Namespace, m: Measurements) -> None:
    med = statistics.median
    last = {name: loads[-1] for name, loads in m.loads.items()}
    rows: list[list[str]] = []
    floor_rate = live_rate = 0.0
    if m.live:
        floor_rate, live_rate = med(m.floor), med(m.live)
        rows += [
            ["floor: decode and discard", f"{rate(floor_rate)} spans/s", ratio(1.0), last["floor"]],
            [
                "trajgrade serve: ingest, assemble, grade",
                f"{rate(live_rate)} spans/s",
                ratio(live_rate / floor_rate),
                last["throughput"],
            ],
        ]
    p99 = achieved = 0.0
    if m.p99:
        p99, achieved = med(m.p99), med(m.achieved)
        rows.append(
            [
                f"root end -> WatchResults, minus settle, at {rate(achieved)} traces/s",
                f"p50 {med(m.p50):.2f} ms, p99 {p99:.2f} ms",
                "",
                last["latency"],
            ]
        )
    short = long_ = 0.0
    if m.rss_short:
        short, long_ = med(m.rss_short), med(m.rss_long)
        rows += [
            [
                f"peak RSS after {args.rss_short_s:g} s at {rate(args.rss_rate)} traces/s"
                + ("" if args.late_window_s is None else f", late window {args.late_window_s:g} s"),
                f"{short / 1024:,.1f} MiB",
                ratio(1.0),
                last["rss_short"],
            ],
            [
                f"peak RSS after {args.rss_long_s:g} s",
                f"{long_ / 1024:,.1f} MiB",
                ratio(long_ / short),
                last["rss_long"],
            ],
        ]
    if m.cpu_on:
        off, on = med(m.cpu_off), med(m.cpu_on)
        where = (
            f"{rate(args.early_rate)} traces/s, spans over exports, "
            f"{med(m.checks_per_run):.1f} checks/run when on"
        )
        for name, value, base in (("off", off, off), ("on", on, off)):
            rows.append(
                [
                    f"server CPU per run, early verdicts {name}, {where}",
                    f"{value * 1e3:.3f} ms",
                    ratio(value / base),
                    last[f"cpu_{name}"],
                ]
            )
    print()
    print(
        table(
            f"Live grading: medians of {args.repeats} repeats, {args.senders} exporter "
            f"processes, {SPANS_PER_TRACE} spans per run, {args.batch} spans per export, "
            f"core build {_core_profile()}",
            ["row", "median", "ratio", "load average (1/5/15 min)"],
            rows,
        )
    )
    if m.live:
        print(f"targets: throughput >= 70% of floor: {met(live_rate >= 0.7 * floor_rate)}", end="")
        print(f" ({live_rate / floor_rate:.0%})")
    if m.p99:
        sustained = (
            "" if achieved >= args.rate * 0.95 else "; the sender could not sustain the rate"
        )
        print(f"p99 < 5 ms: {met(p99 < 5)} ({p99:.2f} ms at {rate(achieved)} traces/s{sustained})")
    if m.rss_short:
        change = long_ / short - 1
        print(f"RSS flat within 10%: {met(abs(change) <= 0.10)} ({change:+.1%})")
    print(f"load average at the end: {loadavg()}")


if __name__ == "__main__":
    sys.exit(main())
