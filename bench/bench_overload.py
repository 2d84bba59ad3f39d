"""Burst overload against a live `trajgrade serve` on 127.0.0.1: answers counted by status.

A burst of --calls concurrent GradeTrace calls (one channel, all issued at once) hits a server
with a small grading queue, so most calls must be refused. With the pending backlog sized by
max_pending_rpcs (the default), every refusal is our RESOURCE_EXHAUSTED / QUEUE_FULL; with a
backlog smaller than the burst, gRPC cancels calls before any handler runs (CANCELLED).
The rows are interleaved and repeated; the table gives the median count of each status.

    .venv/bin/python bench/bench_overload.py                    # 10,000 calls, 3 rounds
    .venv/bin/python bench/bench_overload.py --calls 3000 --rounds 1
"""

from __future__ import annotations

import argparse
import collections
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc
from google.protobuf import json_format

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads
from _report import table
from trajgrade import _core
from trajgrade.commands import health as health_command
from trajgrade.v1 import grader_service_pb2 as g
from trajgrade.v1 import suite_pb2, trace_pb2

ROWS = {
    "backlog = max_pending_rpcs (default 16384)": [],
    "backlog 1000 (smaller than the burst)": ["--max-pending-rpcs", "1000"],
}
STATUSES = ("OK", "RESOURCE_EXHAUSTED", "CANCELLED", "UNAVAILABLE", "other")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serve(port: int, extra: list[str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAJGRADE_")}
    command = [sys.executable, "-m", "trajgrade", "serve", "--listen", f"127.0.0.1:{port}",
               "--max-queue-size", "64", "--log-level", "WARNING", *extra]  # fmt: skip
    process = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if health_command.check(f"127.0.0.1:{port}", timeout=1) == "SERVING":
                return process
        except grpc.RpcError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the server never became SERVING")


def _burst(port: int, request: bytes, expected: bytes, calls: int) -> collections.Counter[str]:
    """Answers of `calls` concurrent calls by status; `wrong` counts OK answers that differ
    from the library's bytes."""
    counts: collections.Counter[str] = collections.Counter()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary("/trajgrade.v1.GraderService/GradeTrace")
        futures = [call.future(request, timeout=120) for _ in range(calls)]
        for future in futures:
            try:
                answer = future.result()
                counts["OK"] += 1
                counts["wrong"] += answer != expected
            except grpc.RpcError as error:
                name = error.code().name
                counts[name if name in STATUSES else "other"] += 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    suite = json_format.ParseDict(workloads.suite(), suite_pb2.Suite())
    trace = json_format.ParseDict(workloads.traces(1)[0], trace_pb2.Trace())
    request = g.GradeTraceRequest(trace=trace, suite=suite).SerializeToString()
    (expected,) = _core.Grader().grade_requests([request])
    assert isinstance(expected, bytes)
    seen: dict[str, list[collections.Counter[str]]] = {name: [] for name in ROWS}
    for _ in range(args.rounds):
        for name, extra in ROWS.items():  # interleaved: each round runs every row once
            port = _free_port()
            process = _serve(port, extra)
            try:
                seen[name].append(_burst(port, request, expected, args.calls))
            finally:
                process.terminate()
                process.wait(30)
    rows = [
        [
            name,
            *(f"{statistics.median(c[s] for c in counts):,.0f}" for s in STATUSES),
            "yes" if all(c["wrong"] == 0 for c in counts) else "NO",
        ]
        for name, counts in seen.items()
    ]
    title = f"{args.calls:,} concurrent GradeTrace calls, max_queue_size 64, {args.rounds} rounds"
    print(table(title, ["server", *STATUSES, "correct"], rows))
    print(f"load average: {os.getloadavg()}")
    if any(row[-1] != "yes" for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
