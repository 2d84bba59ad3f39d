"""The Ray engine against the local engine on the same files, one table, ratios in one run.

The cluster is a head node and one worker node on this machine (`ray start`, 1 CPU each: the
2-worker cluster of docs/regrade.md); its start and the driver's connection are reported on
their own rows, apart from the runs. "first rows" is when the first chunk was committed (on
disk in OUT.parts/). A first small run on Ray, reported apart, starts its worker processes.
Usage:

    python bench/bench_regrade_ray.py                          # 100k traces
    python bench/bench_regrade_ray.py --sizes 100000,1000000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import workloads
from bench_regrade import write_inputs
from ray_cluster import local_cluster
from trajgrade.regrade import regrade
from trajgrade.suites import suite_bytes

CHUNK = 2048


@dataclass
class Run:
    label: str
    traces: int
    seconds: float
    first_rows: float
    load: str = "-"  # the 1/5/15-min load average when the run ended

    @property
    def rate(self) -> float:
        return self.traces / self.seconds


def measure(label: str, inputs: Path, suite: bytes, out: Path, engine: str) -> Run:
    began = time.perf_counter()
    first: list[float] = []

    def committed(_: int) -> None:
        if not first:
            first.append(time.perf_counter() - began)

    summary = regrade(
        [str(inputs)], suite, str(out), chunk_size=CHUNK, engine=engine, on_commit=committed
    )
    seconds = time.perf_counter() - began
    out.unlink()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return Run(label, summary.traces, seconds, first[0] if first else seconds, load)


def _row(runs: list[Run], local: list[Run]) -> list[str]:
    """Medians over the rounds; the ratio is the median of each round's ratio to its local run."""
    return [
        runs[0].label, f"{runs[0].traces:,}",
        f"{statistics.median(r.seconds for r in runs):.2f}",
        _report.rate(statistics.median(r.rate for r in runs)),
        _report.ratio(statistics.median(r.rate / b.rate for r, b in zip(runs, local, strict=True))),
        f"{statistics.median(r.first_rows for r in runs):.2f}",
        " / ".join(r.load for r in runs),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--repeats", type=int, default=1, help="rounds; every row is a median")
    parser.add_argument("--data", help="reuse the inputs kept here by bench_regrade.py --data")
    args = parser.parse_args()
    suite = suite_bytes(workloads.suite())
    rows: list[list[str]] = []
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, local_cluster(workers=1, cpus=1) as env:
        started = time.perf_counter() - began
        base = Path(tmp)
        data = Path(args.data) if args.data else base
        data.mkdir(parents=True, exist_ok=True)
        os.environ.update(env)
        # Ray reads its token settings when imported: only now, with the cluster's.
        from trajgrade.regrade import ray as ray_engine  # noqa: PLC0415

        connect = ray_engine.init()
        rows.append(["cluster start (head + 1 worker node)", "-", f"{started:.2f}"] + ["-"] * 4)
        rows.append(["driver connects (ray.init)", "-", f"{connect:.2f}"] + ["-"] * 4)
        # Ray starts its worker processes (Python, pyarrow, trajgrade) with the first tasks.
        warm = measure("workers start (first run)", write_inputs(base, CHUNK)["jsonl"], suite,
                       base / "w.jsonl", "ray")  # fmt: skip
        rows.append([warm.label, f"{warm.traces:,}", f"{warm.seconds:.2f}"] + ["-"] * 4)
        sizes = [int(size) for size in args.sizes.split(",")]
        inputs = {n: write_inputs(data, n) for n in sizes}  # all written before any timing
        runs: dict[tuple[str, str, int], list[Run]] = {}
        for _ in range(args.repeats):  # rounds interleave local and Ray runs
            for n in sizes:
                for fmt in ("jsonl", "parquet"):
                    for engine in ("local", "ray"):
                        out = base / f"{engine}.jsonl"
                        run = measure(f"{engine} {fmt} → jsonl", inputs[n][fmt], suite, out, engine)
                        runs.setdefault((engine, fmt, n), []).append(run)
        for n in sizes:
            for fmt in ("jsonl", "parquet"):
                local = runs[("local", fmt, n)]
                rows.append(_row(local, local))
                rows.append(_row(runs[("ray", fmt, n)], local))
        if not args.data:
            for paths in inputs.values():
                for path in paths.values():
                    path.unlink()
    print(
        _report.table(
            f"regrade on Ray (2 nodes x 1 CPU) vs local (threads = cores = {os.cpu_count()}); "
            f"medians of {args.repeats} interleaved rounds; load average before: {load_before}",
            ["run", "traces", "seconds", "traces/s", "vs local", "first rows s", "load"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
