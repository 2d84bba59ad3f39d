"""SPEC v2 kinds against v1 `trajectory_match` on the same 20-call workload (issue #12).

Each row grades the same traces (bench/workloads.py, plus 5 user turns, two agents, MCP
servers, call times and one model call per turn) with a one-assertion suite, through the core's
bytes-out entry point on one thread (`_core.Grader(threads=1)`: serialized traces in, outcomes
out, no Python per trace). Rows are interleaved round by round; the table gives each row's
median gradings/s and its cost relative to `trajectory_match` measured in the same rounds.
Target: every new kind costs at most 2x `trajectory_match`.

    .venv/bin/python bench/bench_v2.py [--traces N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import trajgrade
import workloads
from trajgrade import _core
from trajgrade.v1 import result_pb2

TURNS = 5
AGENTS = ["", "billing"]
SERVERS = ["orders-mcp", "payments-mcp"]


def v2_traces(n: int, seed: int = 99) -> list[dict[str, Any]]:
    """The v1 workload's traces with every SPEC v2 field a production run records."""
    rng = random.Random(seed)
    out = []
    for trace in workloads.traces(n):
        calls = trace["calls"]
        clock = 1_700_000_000_000_000_000
        for k, call in enumerate(calls):
            took = rng.randrange(50, 3_000) * 1_000_000
            call.update(
                turn=1 + k * TURNS // len(calls),
                agent=AGENTS[k % 2],
                server=SERVERS[k % 2],
                start_time_unix_nano=clock,
                end_time_unix_nano=clock + took,
            )
            clock += took
        trace["model_calls"] = [
            {
                "model": "m",
                "input_tokens": rng.randrange(1_000, 9_000),
                "output_tokens": rng.randrange(100, 900),
                "cost": 0.01,
                "turn": turn,
                "agent": AGENTS[turn % 2],
            }
            for turn in range(1, TURNS + 1)
        ]
        trace["turns"] = [{"user_input": f"q{t}", "final_answer": "ok"} for t in range(TURNS)]
        out.append(trace)
    return out


def reference(first: dict[str, Any]) -> list[dict[str, Any]]:
    """A 20-call reference: the tools of the first trace, each keeping its turn."""
    return [{"name": c["name"], "turn": c["turn"]} for c in first["calls"]]


def suites(ref: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    match = {"reference": ref, "mode": "TRAJECTORY_MODE_IN_ORDER"}
    return {
        "trajectory_match IN_ORDER (v1 baseline)": {"trajectory_match": match},
        "trajectory_match UNORDERED (v1, maximum matching)": {
            "trajectory_match": {**match, "mode": "TRAJECTORY_MODE_UNORDERED"}
        },
        "trajectory_score F1": {"trajectory_score": {"reference": ref, "min_score": 0.5}},
        "trajectory_score ORDERED_F1": {
            "trajectory_score": {
                "reference": ref,
                "metric": "SCORE_METRIC_ORDERED_F1",
                "min_score": 0.5,
            }
        },
        "trajectory_match per_turn (5 turns)": {
            "trajectory_match": match,
            "scope": {"per_turn": True},
        },
        "tool_called per_turn (5 turns)": {
            "tool_called": {"tool": "get_order"},
            "scope": {"per_turn": True},
        },
        "budget (tokens, cost, model calls)": {
            "budget": {"max_total_tokens": 40_000, "max_cost": 1.0, "max_model_calls": 10}
        },
        "duration (per call and total)": {
            "duration": {"glob": "*", "max_call_ms": 2_500, "max_total_ms": 60_000}
        },
        "expression, v1 variables only": {
            "expression": {"expr": 'calls.all(c, c.name != "") && size(calls) < 100'}
        },
        "expression with a comprehension": {
            "expression": {
                "expr": "calls.all(c, c.duration_ms == null || c.duration_ms < 5000.0) && "
                "usage.total_tokens < 100000"
            }
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    traces = v2_traces(args.traces)
    payloads = [trajgrade.trace_bytes(t) for t in traces]
    grader = _core.Grader(threads=1)
    compiled: dict[str, Callable[[], object]] = {}
    for label, assertion in suites(reference(traces[0])).items():
        suite = trajgrade.load_suite({"assertions": [assertion]})
        core_suite = grader.compile_suite(suite.SerializeToString())
        # Every row must grade, not fail every trace with an item error.
        outcome = result_pb2.TraceOutcome.FromString(core_suite.grade_batch(payloads[:1])[0])
        if outcome.WhichOneof("outcome") != "result":
            print(f"{label}: {outcome}", file=sys.stderr)
            return 1
        compiled[label] = lambda s=core_suite: s.grade_batch(payloads)
    times: dict[str, list[float]] = {label: [] for label in compiled}
    loads = []
    for _ in range(args.rounds):
        loads.append(os.getloadavg()[0])
        for label, run in compiled.items():
            start = time.perf_counter()
            run()
            times[label].append(time.perf_counter() - start)
    base = statistics.median(times[next(iter(compiled))])
    rows = []
    for label, samples in times.items():
        median = statistics.median(samples)
        rows.append(
            [
                label,
                _report.rate(len(payloads) / median),
                f"{median / len(payloads) * 1e6:.2f}",
                _report.ratio(median / base),
                "yes" if median / base <= 2.0 else "NO",
            ]
        )
    print(
        _report.table(
            f"SPEC v2 kinds vs trajectory_match: {_core.build_profile} build, 1 thread, "
            f"{len(payloads):,} traces of {workloads.CALLS_PER_TRACE} calls, median of "
            f"{args.rounds} interleaved rounds, load average {statistics.median(loads):.2f}",
            ["row", "gradings/s", "us/grading", "cost vs baseline", "<= 2x"],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
