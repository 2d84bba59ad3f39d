"""Core throughput: pure-Python reference vs the Rust core (1 thread, all threads) vs decode floor.

Run with `make bench` (release build). Every core row is checked against the reference
(`correct`): "fast but wrong" shows. Not part of the tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the reference model lives with the tests
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report  # noqa: E402
import trajgrade  # noqa: E402
import workloads  # noqa: E402
from reference import compile_suite as reference_compile  # noqa: E402
from trajgrade import _core  # noqa: E402
from trajgrade._core import bench  # noqa: E402
from trajgrade.v1 import assertion_pb2, result_pb2  # noqa: E402


def comparable(result: result_pb2.GradeResult) -> dict[str, Any]:
    return {
        "verdict": result_pb2.Verdict.Name(result.verdict),
        "score": result.score,
        "soft_failures": result.soft_failures,
        "results": [
            {
                "name": r.name,
                "status": result_pb2.AssertionStatus.Name(r.status),
                "severity": assertion_pb2.Severity.Name(r.severity),
                "reason_code": r.reason_code,
                "positions": list(r.positions),
            }
            for r in result.results
        ],
    }


def best_rate(fn: Callable[[], object], items: int, repeat: int) -> float:
    """Items per second of the fastest of `repeat` runs."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return items / best


def interleaved_rates(
    runs: dict[str, Callable[[], object]], items: int, rounds: int
) -> dict[str, tuple[float, float]]:
    """Median items per second of each run, the runs taking turns round by round, and the
    median process CPU time per item in µs (every thread's: steadier than the rate when other
    processes share the cores)."""
    times: dict[str, list[float]] = {label: [] for label in runs}
    cpu: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(rounds):
        for label, fn in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            fn()
            times[label].append(time.perf_counter() - start)
            cpu[label].append(time.process_time() - start_cpu)
    return {
        label: (items / statistics.median(t), statistics.median(cpu[label]) / items * 1e6)
        for label, t in times.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--traces", type=int, default=20_000, help="traces per core run")
    parser.add_argument("--reference-traces", type=int, default=300, help="traces for Python")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds, public API")
    args = parser.parse_args()

    suite = workloads.suite()
    dicts = workloads.traces(args.traces)
    payloads = [trajgrade.trace_bytes(t) for t in dicts]
    reference = reference_compile(suite)
    ref_dicts = dicts[: args.reference_traces]
    expected = [reference.grade(t) for t in ref_dicts]

    py_rate = best_rate(lambda: [reference.grade(t) for t in ref_dicts], len(ref_dicts), 1)
    rows: list[tuple[str, float, bool | None]] = [("python reference", py_rate, True)]
    cores = os.cpu_count() or 1
    suite_bytes = trajgrade.load_suite(suite).SerializeToString()
    for label, threads in (("core, 1 thread", 1), (f"core, {cores} threads", 0)):
        # The batch path itself: serialized Traces in, serialized TraceOutcomes out, GIL
        # released; decoding the outcomes into messages is checked below, not timed.
        compiled = _core.Grader(threads=threads).compile_suite(suite_bytes)
        outcomes: list[bytes] = []

        def run(compiled: _core.CompiledSuite = compiled, out: list[bytes] = outcomes) -> None:
            out[:] = compiled.grade_batch(payloads)

        core_rate = best_rate(run, len(payloads), args.repeat)
        decoded = [result_pb2.TraceOutcome.FromString(o) for o in outcomes[: len(expected)]]
        got = [comparable(o.result) for o in decoded if o.WhichOneof("outcome") == "result"]
        rows.append((label, core_rate, got == expected))
    # The public API against the core's bytes-out entry point on the same grader, taking turns
    # (the ratio is what to read); results are LazyGradeResults, checked decoded.
    grader = _core.Grader(threads=0)
    core_suite = grader.compile_suite(suite_bytes)
    public = trajgrade.compile_suite(suite, grader=grader)
    load_before = os.getloadavg()[0]
    public_rates = interleaved_rates(
        {
            "core": lambda: core_suite.grade_batch(payloads),
            "bytes": lambda: public.grade_batch(payloads),
            "dicts": lambda: public.grade_batch(dicts),
        },
        len(payloads),
        args.rounds,
    )
    load_after = os.getloadavg()[0]
    public_rows: list[tuple[str, tuple[float, float], bool | None]] = [
        (f"core bytes-out, {cores} threads (median of {args.rounds})", public_rates["core"], None)
    ]
    for label, inputs in (("bytes", payloads), ("dicts", dicts)):
        got = [comparable(r) for r in public.grade_batch(inputs[: len(expected)])]  # type: ignore[arg-type]
        public_rows.append(
            (f"public grade_batch from {label}", public_rates[label], got == expected)
        )
    floor = best_rate(lambda: bench.decode_only(payloads), len(payloads), args.repeat)
    rows.append(("decode-only floor (prost, 1 thread)", floor, None))

    header = ["row", "gradings/s", "vs python", "vs floor", "correct"]
    body = [
        [
            label,
            _report.rate(r),
            _report.ratio(r / py_rate),
            _report.ratio(r / floor),
            "-" if ok is None else ("yes" if ok else "NO"),
        ]
        for label, r, ok in rows
    ]
    title = (
        f"trajgrade core bench: {_core.build_profile} build, {cores} cores, "
        f"{args.traces} traces x {workloads.CALLS_PER_TRACE} calls "
        f"(~{workloads.ARGUMENT_BYTES} B arguments), 5 assertions; python on {len(ref_dicts)}"
    )
    print(_report.table(title, header, body))
    core_rate = public_rates["core"][0]
    public_body = [
        [
            label,
            _report.rate(r),
            _report.ratio(r / core_rate),
            f"{cpu_us:.2f}",
            "-" if ok is None else ("yes" if ok else "NO"),
        ]
        for label, (r, cpu_us), ok in public_rows
    ]
    print(
        _report.table(
            f"public API vs the core, interleaved rounds, load average {load_before:.2f} before, "
            f"{load_after:.2f} after (targets: bytes >= 0.80x, dicts >= 0.50x)",
            ["row", "gradings/s", "vs core", "CPU µs/trace", "correct"],
            public_body,
        )
    )
    checks = [ok for _, _, ok in rows] + [ok for _, _, ok in public_rows]
    return 0 if all(ok in (True, None) for ok in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
