"""End-to-end gRPC benchmark: trajgrade serve vs a no-op echo server vs the in-process core.

Everything is measured in one run on one machine, so the ratios are what to read: the echo
server (same grpc.aio, same message sizes, no work) is the framework ceiling; the in-process
core figure is the grading ceiling. Clients run in several processes. Every answer is compared
with the library's bytes for the same request (the `correct` column).

    .venv/bin/python bench/bench_server.py                 # full table (about 2 minutes)
    .venv/bin/python bench/bench_server.py --duration 1    # quicker, noisier

StreamGradeTraces is measured with one trace per message and with chunks of 100 and 1000
traces per message (`traces`), in traces/s against the in-process core.
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import json_format

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads
from _report import rate, ratio, table
from trajgrade import _core
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
            expected.append(length_delimited(1, reference.grade_traces(compiled, chunk)[0]))
            continue
        messages.append(b"".join(length_delimited(4, t) for t in chunk) + suite_ref)
        outcomes = reference.grade_traces(compiled, chunk)
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


# --- main ----------------------------------------------------------------------------------------


def main() -> int:  # noqa: PLR0915 - one linear script
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per scenario")
    parser.add_argument("--callers", default="1,16,64,256")
    parser.add_argument("--client-procs", type=int, default=2)
    args = parser.parse_args()
    callers_list = [int(c) for c in args.callers.split(",")]
    seconds = args.duration

    work = build_workload()
    core_rate = in_process_rate(work, seconds)
    response_size = statistics.median(len(e) for e in work.unary_expected)
    echo_response = work.unary_expected[0][: int(response_size)]
    context = multiprocessing.get_context("spawn")
    rows: list[list[str]] = []
    summary: dict[str, Any] = {}

    with context.Pool(max(args.client_procs, 2)) as pool:
        # 1. The framework ceiling.
        port = free_port()
        echo = start_echo(port, echo_response)
        try:
            wait_ready(port, echo, echo=True)
            for callers in callers_list:
                r = run_clients(
                    pool,
                    unary_jobs(port, callers, args.client_procs, work.unary, None, seconds),
                    seconds,
                )
                summary[("echo", callers)] = r
                rows.append(
                    [
                        "echo (no-op)",
                        str(callers),
                        rate(r.per_second),
                        "",
                        f"{r.pct(0.5):.2f}",
                        f"{r.pct(0.99):.2f}",
                        "n/a",
                    ]
                )
        finally:
            stop(echo)

        # 2. GradeTrace with batching on and off.
        for label, flags in (
            ("GradeTrace batching", ()),
            ("GradeTrace no-batching", ("--no-batching",)),
        ):
            port = free_port()
            server = start_trajgrade(port, *flags)
            try:
                wait_ready(port, server)
                # Register the suite the unary requests name.
                with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                    channel.unary_unary(SERVICE + "RegisterSuite")(
                        g.RegisterSuiteRequest(
                            suite=suite_pb2.Suite.FromString(work.suite)
                        ).SerializeToString()
                    )
                for callers in callers_list:
                    r = run_clients(
                        pool,
                        unary_jobs(
                            port,
                            callers,
                            args.client_procs,
                            work.unary,
                            work.unary_expected,
                            seconds,
                        ),
                        seconds,
                    )
                    summary[(label, callers)] = r
                    echo_r = summary[("echo", callers)]
                    rows.append(
                        [
                            label,
                            str(callers),
                            rate(r.per_second),
                            ratio(r.per_second / echo_r.per_second),
                            f"{r.pct(0.5):.2f}",
                            f"{r.pct(0.99):.2f}",
                            str(r.correct),
                        ]
                    )
                if not flags:
                    # 3. Batch and stream throughput on the batching server, in traces/s.
                    for size in (100, 1000):
                        envelope = g.BatchGradeTracesRequest(
                            suite_id=work.suite_id
                        ).SerializeToString()
                        envelope += b"".join(length_delimited(3, t) for t in work.traces[:size])
                        reference = _core.Grader()
                        reference.register_suite(work.suite)
                        expected = reference.grade_batch_request(envelope)
                        jobs = [
                            ("unary", port, "BatchGradeTraces", [envelope], [expected], 2, seconds)
                            for _ in range(args.client_procs)
                        ]
                        r = run_clients(pool, jobs, seconds)
                        traces_per_s = r.per_second * size
                        summary[("batch", size)] = traces_per_s
                        rows.append(
                            [
                                f"BatchGradeTraces x{size}",
                                str(2 * args.client_procs),
                                rate(traces_per_s),
                                ratio(traces_per_s / core_rate) + " core",
                                f"{r.pct(0.5):.2f}",
                                f"{r.pct(0.99):.2f}",
                                str(r.correct),
                            ]
                        )
                    # 4. StreamGradeTraces: one trace per message, then chunks of 100 / 1000.
                    for size in (1, 100, 1000):
                        messages, stream_expected = stream_messages(work, size)
                        jobs = [
                            ("stream", port, messages, stream_expected, seconds, size)
                            for _ in range(args.client_procs)
                        ]
                        r = run_clients(pool, jobs, seconds)
                        summary[("stream", size)] = r.per_second
                        rows.append(
                            [
                                "StreamGradeTraces" + ("" if size == 1 else f" x{size}"),
                                str(args.client_procs),
                                rate(r.per_second),
                                ratio(r.per_second / core_rate) + " core",
                                "",
                                "",
                                str(r.correct),
                            ]
                        )
            finally:
                stop(server)

    rows.append(
        [
            "in-process core (grade_requests x1024)",
            "",
            rate(core_rate),
            "1.00x core",
            "",
            "",
            "True",
        ]
    )
    header = [
        "scenario",
        "callers",
        "req/s or traces/s",
        "vs echo / core",
        "p50 ms",
        "p99 ms",
        "correct",
    ]
    title = (
        f"bench_server: {os.cpu_count()} cores, {args.client_procs} client processes, "
        f"{seconds:.0f}s per row, max_batch_delay {MAX_BATCH_DELAY_US}us, "
        f"core as installed (trajgrade {_core.__version__}); unary = req/s, batch/stream = traces/s"
    )
    print(table(title, header, rows))

    if 64 in callers_list:
        on, echo64 = summary[("GradeTrace batching", 64)], summary[("echo", 64)]
        targets = [
            (
                "unary@64 >= 85% of echo req/s",
                on.per_second / echo64.per_second >= 0.85,
                ratio(on.per_second / echo64.per_second),
            ),
            (
                "p99@64 <= echo p99 + max_batch_delay",
                on.pct(0.99) <= echo64.pct(0.99) + MAX_BATCH_DELAY_US / 1000,
                f"{on.pct(0.99):.2f} vs {echo64.pct(0.99) + MAX_BATCH_DELAY_US / 1000:.2f} ms",
            ),
        ]
        for size in (100, 1000):
            v = summary[("batch", size)] / core_rate
            targets.append((f"batch x{size} >= 50% of core traces/s", v >= 0.5, ratio(v)))
        for size in (100, 1000):
            v = summary[("stream", size)] / core_rate
            targets.append((f"stream x{size} >= 50% of core traces/s", v >= 0.5, ratio(v)))
        print(
            table(
                "targets",
                ["target", "met", "measured"],
                [[t, "yes" if ok else "NO", m] for t, ok, m in targets],
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
