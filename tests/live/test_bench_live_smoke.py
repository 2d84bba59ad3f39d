"""bench/bench_live.py runs end to end with tiny durations and prints its table (a smoke run:
no timing is asserted; the figures are in docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_live.py"

pytestmark = pytest.mark.timeout(300)


def test_bench_live_smoke_run_prints_the_table() -> None:
    command = [
        sys.executable, str(BENCH), "--repeats", "1", "--senders", "1", "--traces", "20",
        "--latency-s", "0.5", "--rate", "50", "--rss-rate", "20",
        "--rss-short-s", "0.5", "--rss-long-s", "1",
        "--rows", "throughput,latency,rss,early", "--early-rate", "20", "--early-s", "0.5",
        "--latency-senders", "2", "--split",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for row in (
        "floor: decode and discard",
        "trajgrade serve: ingest, assemble, grade (to the sink)",
        "... + one WatchResults follower",
        "root end -> WatchResults, minus settle",
        "floor: the same paced stream, echoed, Go SDK senders",
        "floor: the same paced stream, echoed, Python SDK senders",
        "root end -> WatchResults, minus settle, Python SDK senders",
        "the senders' CPU (2 goroutines in one process)",
        "the senders' CPU (2 processes)",
        "sender: root end -> export call",
        "server: handler -> published, minus settle",
        "published -> WatchResults reader",
        "of which: in the watcher's queue",
        "the same, WatchResults written by grpc.aio (--no-core-front)",
        "server: generation 2 collections",
        "peak RSS after 0.5 s",
        "peak RSS after 1 s",
        "server CPU per run, early verdicts off",
        "server CPU per run, early verdicts on",
    ):
        assert row in out, out
    assert "targets: throughput >= 70% of floor:" in out
    assert "p99 < 5 ms, Go SDK senders:" in out and "p99 < 5 ms, Python SDK senders:" in out
    assert "steal" in out
    assert "us/run" in out  # the server CPU column
    assert "load average" in out


@pytest.mark.parametrize("mode", [[], ["--paced"]])
def test_live_stages_smoke_run_accounts_for_the_stages(mode: list[str]) -> None:
    """bench/live_stages.py grades every run in-process and prints CPU per run by stage."""
    command = [sys.executable, str(BENCH.with_name("live_stages.py")), "--runs", "30", *mode]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for stage in (
        "loop thread, all of it",
        "loop: intake",
        "loop: publish (all of it)",
        "grading thread: route, map, grade (per trip) (",
        "grading thread:   mapping (map_otlp_runs)",
        "sink thread: write and fsync",
    ):
        assert stage in out, out


def test_live_intake_smoke_run_takes_every_run() -> None:
    """bench/live_intake.py takes every span in and completes every run (it asserts the count)
    and prints the cost per span and per run."""
    command = [
        sys.executable,
        str(BENCH.with_name("live_intake.py")),
        *("--runs", "40", "--batch", "64", "--passes", "3"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "40 runs, 200 spans in 4 exports, median of 3 passes" in done.stdout, done.stdout
    assert "us a span" in done.stdout and "us a run" in done.stdout
