"""End-to-end gRPC benchmark: trajgrade serve vs a no-op echo server vs the in-process core.

Everything is measured in one run on one machine, so the ratios are what to read: the echo
server (same grpc.aio, same message sizes, no work) is the framework ceiling; the in-process
core figure is the grading ceiling. Clients run in several processes. Every answer is compared
with the library's bytes for the same request (the `correct` column).

    .venv/bin/python bench/bench_server.py                 # 3 rounds (about 2 minutes)
    .venv/bin/python bench/bench_server.py --duration 1    # quicker, noisier

Both servers run for the whole benchmark and the rows take turns, round after round, so every
ratio compares medians taken under the same load (the load average is printed per row).
Unary calls go to a no-op grpc.aio echo server with the same request bytes; batches and
chunked streams are compared with the in-process core; one-trace-per-message streams with the
unary echo. With h2load installed (Debian: nghttp2-client), the unary rows are also driven by
h2load, whose client side costs far less CPU than Python's.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import multiprocessing
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads
from _report import rate, ratio, table
from trajgrade import _core
from trajgrade._core import bench
from trajgrade.commands import health as health_command
from trajgrade.v1 import grader_service_pb2 as g
from trajgrade.v1 import suite_pb2, trace_pb2
from trajgrade.wire import length_delimited

SERVICE = "/trajgrade.v1.GraderService/"
MAX_BATCH_DELAY_US = 500


# --- workload ------------------------------------------------------------------------------------


@dataclass
class Workload:
    suite: bytes
    suite_id: str
    traces: list[bytes]
    unary: list[bytes]  # GradeTraceRequest by suite_id
    unary_expected: list[bytes]


def build_workload(n: int = 1000) -> Workload:
    suite = json_format.ParseDict(workloads.suite(), suite_pb2.Suite())
    traces = [json_format.ParseDict(t, trace_pb2.Trace()) for t in workloads.traces(n)]
    grader = _core.Grader()
    suite_bytes = suite.SerializeToString()
    suite_id = grader.register_suite(suite_bytes)
    unary = [
        g.GradeTraceRequest(trace=t, suite_id=suite_id).SerializeToString() for t in traces[:256]
    ]
    expected = grader.grade_requests(unary)
    assert all(isinstance(e, bytes) for e in expected)
    return Workload(
        suite_bytes,
        suite_id,
        [t.SerializeToString() for t in traces],
        unary,
        [bytes(e) for e in expected],
    )


def stream_messages(work: Workload, size: int) -> tuple[list[bytes], list[bytes]]:
    """StreamGradeTracesRequests of `size` traces each (1: the single-trace form), each naming
    the suite, and the library's answer to each."""
    reference = _core.Grader()
    compiled = reference.compile_suite(work.suite)
    suite_ref = length_delimited(3, work.suite_id.encode())
    messages: list[bytes] = []
    expected: list[bytes] = []
    for start in range(0, len(work.traces) - size + 1, size):
        chunk = work.traces[start : start + size]
        if size == 1:
            messages.append(length_delimited(1, chunk[0]) + suite_ref)
            expected.append(length_delimited(1, bench.grade_traces(compiled, chunk)[0]))
            continue
        messages.append(b"".join(length_delimited(4, t) for t in chunk) + suite_ref)
        outcomes = bench.grade_traces(compiled, chunk)
        expected.append(b"".join(length_delimited(2, o) for o in outcomes))
        if len(messages) == 8:
            break
    return messages, expected


def in_process_rate(work: Workload, seconds: float) -> float:
    """Traces/s of the core alone: big grade_requests calls, as the batcher makes them."""
    grader = _core.Grader()
    grader.register_suite(work.suite)
    batch = work.unary * 4
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        grader.grade_requests(batch)
        done += len(batch)
    return done / (time.perf_counter() - started)


# --- servers -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _echo_main(port: int, response: bytes) -> None:
    """No-op server: same framework, same identity handlers, same response size, no work."""

    async def unary(request: bytes, context: Any) -> bytes:
        return response

    handler = grpc.method_handlers_generic_handler(
        "trajgrade.v1.GraderService", {"GradeTrace": grpc.unary_unary_rpc_method_handler(unary)}
    )
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def start_echo(port: int, response: bytes) -> subprocess.Popen[bytes]:
    code = (
        "import asyncio, sys; sys.path.insert(0, sys.argv[1]); import bench_server as b; "
        "asyncio.run(b._echo_main(int(sys.argv[2]), bytes.fromhex(sys.argv[3])))"
    )
    here = str(Path(__file__).resolve().parent)
    return subprocess.Popen([sys.executable, "-c", code, here, str(port), response.hex()])


def start_trajgrade(port: int, *flags: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJGRADE_")}
    command = [
        sys.executable,
        "-m",
        "trajgrade",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--max-batch-delay-us",
        str(MAX_BATCH_DELAY_US),
        "--log-level",
        "WARNING",
        *flags,
    ]
    return subprocess.Popen(command, env=env)


def wait_ready(port: int, process: subprocess.Popen[bytes], echo: bool = False) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("server exited")
        try:
            if echo:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            elif health_command.check(f"127.0.0.1:{port}", timeout=1) == "SERVING":
                return
        except (OSError, grpc.RpcError):
            pass
        time.sleep(0.1)
    raise RuntimeError("server never became ready")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# --- clients (each in its own process) -----------------------------------------------------------

_BIG = [("grpc.max_receive_message_length", 512 << 20), ("grpc.max_send_message_length", 512 << 20)]


async def _unary_client(  # noqa: PLR0917 - passed positionally through Pool.map
    port: int,
    method: str,
    requests: list[bytes],
    expected: list[bytes] | None,
    callers: int,
    seconds: float,
) -> tuple[int, list[float], bool]:
    latencies: list[float] = []
    correct = True
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=_BIG) as channel:
        call = channel.unary_unary(SERVICE + method)
        await call(requests[0])  # connect and warm
        end = time.perf_counter() + seconds

        async def caller(k: int) -> None:
            nonlocal correct
            i = k
            while time.perf_counter() < end:
                started = time.perf_counter()
                answer = await call(requests[i % len(requests)], timeout=60)
                latencies.append(time.perf_counter() - started)
                if expected is not None and answer != expected[i % len(expected)]:
                    correct = False
                i += callers

        await asyncio.gather(*(caller(k) for k in range(callers)))
    return len(latencies), latencies, correct


async def _stream_client(
    port: int, messages: list[bytes], expected: list[bytes], seconds: float, per_message: int
) -> tuple[int, list[float], bool]:
    """One stream for `seconds`; counts traces (`per_message` per answer)."""
    correct = True
    done = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=_BIG) as channel:
        call = channel.stream_stream(SERVICE + "StreamGradeTraces")
        end = time.perf_counter() + seconds

        async def feed():  # type: ignore[no-untyped-def]
            i = 0
            while time.perf_counter() < end:
                yield messages[i % len(messages)]
                i += 1

        async for answer in call(feed()):
            if answer != expected[done % len(expected)]:
                correct = False
            done += 1
    return done * per_message, [], correct


def _client_process(args: tuple[Any, ...]) -> tuple[int, list[float], bool]:
    kind, *rest = args
    if kind == "unary":
        return asyncio.run(_unary_client(*rest))
    return asyncio.run(_stream_client(*rest))


@dataclass
class Result:
    calls: int
    seconds: float
    latencies: list[float]
    correct: bool

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def run_clients(pool: Any, jobs: list[tuple[Any, ...]], seconds: float) -> Result:
    started = time.perf_counter()
    results = pool.map(_client_process, jobs)
    elapsed = max(seconds, time.perf_counter() - started - 0.0)
    calls = sum(r[0] for r in results)
    latencies = [x for r in results for x in r[1]]
    return Result(calls, min(elapsed, seconds), latencies, all(r[2] for r in results))


def unary_jobs(  # noqa: PLR0917
    port: int,
    callers: int,
    procs: int,
    requests: list[bytes],
    expected: list[bytes] | None,
    seconds: float,
) -> list[tuple[Any, ...]]:
    procs = max(1, min(procs, callers))
    share = [callers // procs + (1 if i < callers % procs else 0) for i in range(procs)]
    return [("unary", port, "GradeTrace", requests, expected, n, seconds) for n in share]


# --- h2load (optional: a C client, so the client side costs little CPU) ---------------------


def h2load_rate(port: int, method: str, request: bytes, callers: int, seconds: float) -> float:
    """Requests/s of h2load sending one gRPC request body `callers` at a time (4 connections).

    h2load cannot check answers; the Python client rows do that for the same server.
    """
    framed = b"\x00" + len(request).to_bytes(4, "big") + request  # gRPC length prefix
    with tempfile.NamedTemporaryFile(suffix=".bin") as body:
        body.write(framed)
        body.flush()
        connections = min(4, callers)
        command = [
            "h2load",
            f"--duration={int(seconds * 1000)}ms",
            "--warm-up-time=500ms",
            f"--clients={connections}",
            f"--max-concurrent-streams={max(1, callers // connections)}",
            "--header=content-type: application/grpc",
            "--header=te: trailers",
            f"--data={body.name}",
            f"http://127.0.0.1:{port}{SERVICE}{method}",
        ]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    found = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if found is None:
        raise RuntimeError(f"h2load output not understood:\n{out}")
    return float(found.group(1))


# --- main ----------------------------------------------------------------------------------------


@dataclass
class Scenario:
    label: str
    unit: str  # "req/s", "traces/s" or "msgs/s"
    reference: str | None  # the label of the row this one is compared with
    run: Callable[[], Result | float]
    scale: int = 1  # traces per call (a BatchGradeTraces call of 100 traces: 100)
    server: int | None = None  # the serving process's pid, for its CPU time per call
    rates: list[float] = field(default_factory=list)
    cpu_per_call: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    last: Result | None = None

    def measure(self) -> None:
        cpu = None if self.server is None else cpu_seconds(self.server)
        started = time.perf_counter()
        got = self.run()
        elapsed = time.perf_counter() - started
        if isinstance(got, Result):
            self.last = got
            calls = float(got.calls * self.scale)  # in the row's unit (x100 rows: traces)
            got = got.per_second * self.scale
        else:  # h2load: its rate held over the warm-up too
            calls = got * elapsed
        self.rates.append(got)
        self.loads.append(os.getloadavg()[0])
        if cpu is not None and self.server is not None and calls > 0:
            self.cpu_per_call.append((cpu_seconds(self.server) - cpu) / calls * 1e6)

    @property
    def median(self) -> float:
        return statistics.median(self.rates)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def register(port: int, work: Workload) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        channel.unary_unary(SERVICE + "RegisterSuite")(
            g.RegisterSuiteRequest(suite=suite_pb2.Suite.FromString(work.suite)).SerializeToString()
        )


def main() -> int:  # noqa: PLR0915 - one linear script
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per row and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--callers", type=int, default=64, help="concurrent unary calls")
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument(
        "--h2load",
        choices=("auto", "yes", "no"),
        default="auto",
        help="also drive the unary rows with h2load (auto: when it is installed)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=FLAGS",
        help="another trajgrade server with these serve flags, for its own unary rows in the "
        "same rounds (e.g. 'no-inline=--inline-grade-bytes 0'); repeatable",
    )
    args = parser.parse_args()
    seconds, callers = args.duration, args.callers
    use_h2load = args.h2load == "yes" or (args.h2load == "auto" and shutil.which("h2load"))
    variants = [v.partition("=")[::2] for v in args.variant]

    work = build_workload()
    response_size = statistics.median(len(e) for e in work.unary_expected)
    echo_response = work.unary_expected[0][: int(response_size)]
    batch100 = g.BatchGradeTracesRequest(suite_id=work.suite_id).SerializeToString() + b"".join(
        length_delimited(3, t) for t in work.traces[:100]
    )
    reference = _core.Grader()
    reference.register_suite(work.suite)
    batch100_expected = reference.grade_batch_request(batch100)
    stream100, stream100_expected = stream_messages(work, 100)
    stream1, stream1_expected = stream_messages(work, 1)

    context = multiprocessing.get_context("spawn")
    echo_port, port = free_port(), free_port()
    echo = start_echo(echo_port, echo_response)
    server = start_trajgrade(port)
    others = [(name, free_port(), flags.split()) for name, flags in variants]
    servers = [server] + [start_trajgrade(p, *f) for _, p, f in others]
    try:
        wait_ready(echo_port, echo, echo=True)
        for p, process in zip([port] + [p for _, p, _ in others], servers, strict=True):
            wait_ready(p, process)
            register(p, work)
        with context.Pool(max(args.client_procs, 2)) as pool:

            def unary(target: int, expected: list[bytes] | None) -> Callable[[], Result]:
                def run() -> Result:
                    jobs = unary_jobs(
                        target, callers, args.client_procs, work.unary, expected, seconds
                    )
                    return run_clients(pool, jobs, seconds)

                return run

            def batch() -> Result:
                jobs = [
                    ("unary", port, "BatchGradeTraces", [batch100], [batch100_expected], 2, seconds)
                    for _ in range(args.client_procs)
                ]
                return run_clients(pool, jobs, seconds)

            def stream(
                messages: list[bytes], expected: list[bytes], size: int
            ) -> Callable[[], Result]:
                def run() -> Result:
                    jobs = [
                        ("stream", port, messages, expected, seconds, size)
                        for _ in range(args.client_procs)
                    ]
                    return run_clients(pool, jobs, seconds)

                return run

            scenarios = [
                Scenario(
                    f"echo unary @{callers} (no-op grpc.aio)",
                    "req/s",
                    None,
                    unary(echo_port, None),
                    server=echo.pid,
                ),
                Scenario(
                    f"GradeTrace unary @{callers}",
                    "req/s",
                    f"echo unary @{callers} (no-op grpc.aio)",
                    unary(port, work.unary_expected),
                    server=server.pid,
                ),
                Scenario(
                    "StreamGradeTraces, one trace per message",
                    "msgs/s",
                    f"echo unary @{callers} (no-op grpc.aio)",
                    stream(stream1, stream1_expected, 1),
                    server=server.pid,
                ),
                Scenario(
                    "in-process core (grade_requests x1024)",
                    "traces/s",
                    None,
                    lambda: in_process_rate(work, seconds),
                ),
                Scenario(
                    "BatchGradeTraces x100",
                    "traces/s",
                    "in-process core (grade_requests x1024)",
                    batch,
                    scale=100,
                    server=server.pid,
                ),
                Scenario(
                    "StreamGradeTraces x100 (chunks)",
                    "traces/s",
                    "in-process core (grade_requests x1024)",
                    stream(stream100, stream100_expected, 100),
                    server=server.pid,
                ),
            ]
            if use_h2load:
                scenarios += [
                    Scenario(
                        f"echo unary @{callers} (h2load)",
                        "req/s",
                        None,
                        lambda: h2load_rate(
                            echo_port, "GradeTrace", work.unary[0], callers, seconds
                        ),
                        server=echo.pid,
                    ),
                    Scenario(
                        f"GradeTrace unary @{callers} (h2load)",
                        "req/s",
                        f"echo unary @{callers} (h2load)",
                        lambda: h2load_rate(port, "GradeTrace", work.unary[0], callers, seconds),
                        server=server.pid,
                    ),
                ]
            for (name, other, _), process in zip(others, servers[1:], strict=True):
                scenarios.append(
                    Scenario(
                        f"GradeTrace unary @{callers}, {name}",
                        "req/s",
                        f"echo unary @{callers} (no-op grpc.aio)",
                        unary(other, work.unary_expected),
                        server=process.pid,
                    )
                )
                if use_h2load:
                    scenarios.append(
                        Scenario(
                            f"GradeTrace unary @{callers} (h2load), {name}",
                            "req/s",
                            f"echo unary @{callers} (h2load)",
                            functools.partial(
                                h2load_rate, other, "GradeTrace", work.unary[0], callers, seconds
                            ),
                            server=process.pid,
                        )
                    )
            for _ in range(args.rounds):
                for scenario in scenarios:
                    scenario.measure()
    finally:
        stop(echo)
        for process in servers:
            stop(process)

    by_label = {s.label: s for s in scenarios}
    rows = []
    for s in scenarios:
        versus = ""
        if s.reference is not None:
            versus = ratio(s.median / by_label[s.reference].median)
        last = s.last
        rows.append(
            [
                s.label,
                s.unit,
                rate(s.median),
                versus,
                " ".join(rate(r) for r in s.rates),
                f"{statistics.median(s.loads):.2f}",
                f"{statistics.median(s.cpu_per_call):.0f}" if s.cpu_per_call else "",
                "" if last is None or not last.latencies else f"{last.pct(0.5):.2f}",
                "" if last is None or not last.latencies else f"{last.pct(0.99):.2f}",
                "n/a" if last is None or s.label.startswith("echo") else str(last.correct),
            ]
        )
    header = [
        "scenario",
        "unit",
        "median",
        "vs reference",
        "rounds",
        "load avg",
        "server CPU us/unit",
        "p50 ms",
        "p99 ms",
        "correct",
    ]
    title = (
        f"bench_server: {os.cpu_count()} cores, {args.client_procs} client processes, "
        f"{args.rounds} interleaved rounds of {seconds:.1f}s per row, max_batch_delay "
        f"{MAX_BATCH_DELAY_US}us, trajgrade {_core.__version__} ({_core.build_profile}); "
        "ratios are of same-run medians"
    )
    print(table(title, header, rows))

    def versus(label: str) -> float:
        s = by_label[label]
        assert s.reference is not None
        return s.median / by_label[s.reference].median

    targets = [
        (f"unary @{callers} >= 0.85x echo req/s", f"GradeTrace unary @{callers}", 0.85),
        ("BatchGradeTraces x100 >= 0.5x core", "BatchGradeTraces x100", 0.5),
        ("StreamGradeTraces x100 >= 0.5x core", "StreamGradeTraces x100 (chunks)", 0.5),
        ("one-trace stream >= 0.8x unary echo", "StreamGradeTraces, one trace per message", 0.8),
    ]
    if use_h2load:
        targets.append(
            (
                f"unary @{callers} (h2load) >= 0.85x echo",
                f"GradeTrace unary @{callers} (h2load)",
                0.85,
            )
        )
    print(
        table(
            "targets",
            ["target", "met", "measured"],
            [
                [t, "yes" if versus(label) >= bound else "NO", ratio(versus(label))]
                for t, label, bound in targets
            ],
        )
    )
    return 0 if all(s.last is None or s.last.correct for s in scenarios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
