"""Regrade throughput vs the in-process core, and peak RSS per input size (each in a subprocess).

Reuses the core benchmark's seeded workload (bench/workloads.py): the same traces and suite,
so the "core" row here is the figure bench_core measures. Usage:

    python bench/bench_regrade.py                         # quick: 20k and 50k traces
    python bench/bench_regrade.py --sizes 100000,1000000  # `make bench-regrade`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import pyarrow as pa
import pyarrow.parquet as pq
import workloads
from google.protobuf import json_format
from trajgrade import _core
from trajgrade.importers.parquet import SCHEMA
from trajgrade.regrade import arrowcols, regrade
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.output import arrow_table_from_jsonl, jsonl_line, outcome_row
from trajgrade.regrade.summary import Summary
from trajgrade.regrade.tracejson import trace_bytes, trace_bytes_from_dict
from trajgrade.suites import suite_bytes
from trajgrade.v1 import trace_pb2

BLOCK = 5000  # traces generated at a time, so writing 1M traces needs little memory
CHUNK = 2048


def _traces(n: int) -> Iterator[dict[str, Any]]:
    for block_start in range(0, n, BLOCK):
        count = min(BLOCK, n - block_start)
        for i, trace in enumerate(workloads.traces(count, seed=1234 + block_start)):
            trace["id"] = f"bench-{block_start + i}"
            yield trace


def write_inputs(base: Path, n: int) -> dict[str, Path]:
    """The workload as native JSONL and as Parquet (the importers' schema)."""
    jsonl, parquet = base / f"traces-{n}.jsonl", base / f"traces-{n}.parquet"
    with jsonl.open("w", encoding="utf-8") as text, pq.ParquetWriter(parquet, SCHEMA) as table:
        block: list[dict[str, Any]] = []
        for trace in _traces(n):
            text.write(json.dumps(trace, ensure_ascii=False) + "\n")
            block.append(trace)
            if len(block) == BLOCK:
                table.write_table(pa.Table.from_pylist(block, schema=SCHEMA))
                block = []
        if block:
            table.write_table(pa.Table.from_pylist(block, schema=SCHEMA))
    return {"jsonl": jsonl, "parquet": parquet}


def core_rate(sample: int) -> tuple[float, list[bytes]]:
    """In-process core: pre-serialized Trace bytes through grade_batch, traces/s."""
    payloads = [trace_bytes_from_dict(t) for t in _traces(sample)]
    core = _core.Grader().compile_suite(suite_bytes(workloads.suite()))
    core.grade_batch(payloads[:CHUNK])  # warm up the pool
    started = time.perf_counter()
    for i in range(0, len(payloads), CHUNK):
        core.grade_batch(payloads[i : i + CHUNK])
    return sample / (time.perf_counter() - started), payloads


def stage_costs(payloads: list[bytes], lines: list[bytes]) -> dict[str, float]:
    """Microseconds per trace of each Python-side step on one thread."""
    suite = _core.Grader().compile_suite(suite_bytes(workloads.suite()))
    outcomes = suite.grade_batch(payloads[: len(lines)])
    costs = {}
    started = time.perf_counter()
    for line in lines:
        json_format.Parse(line, trace_pb2.Trace()).SerializeToString()
    costs["json_format.Parse + Serialize"] = time.perf_counter() - started
    started = time.perf_counter()
    for line in lines:
        trace_bytes(line)
    costs["fast decode (json.loads + upb)"] = time.perf_counter() - started
    started = time.perf_counter()
    for outcome in outcomes:
        jsonl_line(outcome_row(outcome, suite.suite_id))
    costs["outcome → JSONL row"] = time.perf_counter() - started
    started = time.perf_counter()
    suite.grade_batch(payloads[: len(lines)])
    costs["core grade_batch (all threads)"] = time.perf_counter() - started
    grader = _core.Grader()
    core_suite = grader.compile_suite(suite_bytes(workloads.suite()))
    started = time.perf_counter()
    grader.grade_json_traces(core_suite, lines)
    costs["core grade_json_traces (all threads)"] = time.perf_counter() - started
    started = time.perf_counter()
    rows = grader.grade_json_traces_to_json(core_suite, lines)
    costs["core grade_json_traces_to_json (all threads)"] = time.perf_counter() - started
    # One Summary for the whole run, as a regrade keeps it: name discovery happens once.
    summary = Summary(suite_id=suite.suite_id)
    summary.add_jsonl(rows[:CHUNK])
    started = time.perf_counter()
    for i in range(0, len(rows), CHUNK):
        summary.add_jsonl(rows[i : i + CHUNK])
    costs["summary from JSONL rows (byte counts)"] = time.perf_counter() - started
    started = time.perf_counter()
    for i in range(0, len(rows), CHUNK):
        part = rows[i : i + CHUNK]
        arrow_table_from_jsonl(b"".join(part), max(map(len, part)))
    costs["JSONL rows → Arrow table (Parquet part)"] = time.perf_counter() - started
    table = pa.Table.from_pylist([json.loads(line) for line in lines], schema=SCHEMA)
    started = time.perf_counter()
    for batch in table.to_batches(CHUNK):
        json_lines(batch)
    costs["Parquet rows → JSON lines (Arrow compute)"] = time.perf_counter() - started
    started = time.perf_counter()
    for batch in table.to_batches(CHUNK):
        arrowcols.grade(grader, core_suite, batch)
    costs["core grade_arrow_traces_to_json (buffers, all threads)"] = time.perf_counter() - started
    return {k: v / len(lines) * 1e6 for k, v in costs.items()}


def peak_rss_kib() -> int:
    """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork and
    exec, so a child's ru_maxrss is at least the parent's RSS when it forked (the bench
    parent holds the core sample), which hid the regrade's own peak."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(input_path: str, out: str, suite: str) -> None:
    """One regrade in this process; prints seconds, traces and peak RSS as JSON."""
    started = time.perf_counter()
    summary = regrade([input_path], suite, out, chunk_size=CHUNK)
    seconds = time.perf_counter() - started
    rss_kib = peak_rss_kib()
    print(json.dumps({"seconds": seconds, "traces": summary.traces, "rss_kib": rss_kib}))


def run_child(input_path: Path, out: Path, suite: Path) -> dict[str, Any]:
    """child() in a fresh interpreter, so ru_maxrss is this run's peak alone."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(input_path), str(out), str(suite)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="20000,50000", help="comma-separated trace counts")
    parser.add_argument("--core-sample", type=int, default=20000)
    parser.add_argument(
        "--runs",
        default="jsonl:jsonl,jsonl:parquet,parquet:jsonl,parquet:parquet",
        help="input:output format pairs to run",
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument(
        "--child", nargs=3, metavar=("INPUT", "OUT", "SUITE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    base = Path(tempfile.mkdtemp(prefix="trajgrade-bench-regrade-"))
    suite = base / "suite.json"
    suite.write_text(json.dumps(workloads.suite()), encoding="utf-8")

    rate, payloads = core_rate(args.core_sample)
    lines = [
        json.dumps(t, ensure_ascii=False).encode() for t in _traces(min(5000, args.core_sample))
    ]
    costs = stage_costs(payloads, lines)
    del payloads, lines  # the children measure their own peak RSS, but keep the parent small

    rows = [
        ["core grade_batch (in-process, bytes)", "-", "-", _report.rate(rate), "1.00x", "-", "yes"]
    ]
    rss: dict[tuple[str, int], float] = {}
    for n in sizes:
        inputs = write_inputs(base, n)
        for fmt, path in inputs.items():
            for out_fmt in ("jsonl", "parquet"):
                if f"{fmt}:{out_fmt}" not in args.runs.split(","):
                    continue
                out = base / f"results-{n}-{fmt}.{out_fmt}"
                result = run_child(path, out, suite)
                tps = result["traces"] / result["seconds"]
                rss[(f"{fmt}->{out_fmt}", n)] = result["rss_kib"] / 1024
                rows.append([
                    f"regrade {fmt} → {out_fmt}", f"{n:,}", f"{result['seconds']:.1f}",
                    _report.rate(tps), _report.ratio(tps / rate),
                    f"{result['rss_kib'] / 1024:,.0f}", "yes" if result["traces"] == n else "NO",
                ])  # fmt: skip
                out.unlink()
        if not args.keep:
            for path in inputs.values():
                path.unlink()
    threads = os.cpu_count()
    print(_report.table(
        f"regrade vs in-process core ({platform.machine()}, {threads} cores, chunk {CHUNK}; "
        "ratio = traces/s over the core row, same run)",
        ["run", "traces", "seconds", "traces/s", "vs core", "peak RSS MiB", "correct"],
        rows,
    ))  # fmt: skip
    print()
    print(_report.table(
        "Python-side cost per trace (µs, one thread; the core row uses every thread)",
        ["step", "µs/trace"], [[k, f"{v:,.1f}"] for k, v in costs.items()],
    ))  # fmt: skip
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        print()
        print(_report.table(
            f"peak RSS growth from {first:,} to {last:,} traces (target: within 10%)",
            ["run", "growth"],
            [[k, f"{rss[(k, last)] / rss[(k, first)] - 1:+.1%}"]
             for k in sorted({k for k, _ in rss})],
        ))  # fmt: skip


if __name__ == "__main__":
    main()
