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
    return Run(label, summary.traces, seconds, first[0] if first else seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000")
    args = parser.parse_args()
    suite = suite_bytes(workloads.suite())
    rows: list[list[str]] = []
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, local_cluster(workers=1, cpus=1) as env:
        started = time.perf_counter() - began
        base = Path(tmp)
        os.environ.update(env)
        # Ray reads its token settings when imported: only now, with the cluster's.
        from trajgrade.regrade import ray as ray_engine  # noqa: PLC0415

        connect = ray_engine.init()
        rows.append(["cluster start (head + 1 worker node)", "-", f"{started:.2f}", "-", "-", "-"])
        rows.append(["driver connects (ray.init)", "-", f"{connect:.2f}", "-", "-", "-"])
        # Ray starts its worker processes (Python, pyarrow, trajgrade) with the first tasks.
        warm = measure("workers start (first run)", write_inputs(base, CHUNK)["jsonl"], suite,
                       base / "w.jsonl", "ray")  # fmt: skip
        rows.append([warm.label, f"{warm.traces:,}", f"{warm.seconds:.2f}", "-", "-", "-"])
        for n in (int(size) for size in args.sizes.split(",")):
            inputs = write_inputs(base, n)
            for fmt in ("jsonl", "parquet"):
                local = measure(
                    f"local {fmt} → jsonl", inputs[fmt], suite, base / "l.jsonl", "local"
                )
                on_ray = measure(f"ray {fmt} → jsonl", inputs[fmt], suite, base / "r.jsonl", "ray")
                for run in (local, on_ray):
                    rows.append([
                        run.label, f"{run.traces:,}", f"{run.seconds:.2f}", _report.rate(run.rate),
                        _report.ratio(run.rate / local.rate), f"{run.first_rows:.2f}",
                    ])  # fmt: skip
            for path in inputs.values():
                path.unlink()
    print(
        _report.table(
            f"regrade on Ray (2 nodes x 1 CPU) vs local (threads = cores = {os.cpu_count()})",
            ["run", "traces", "seconds", "traces/s", "vs local", "first rows s"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
