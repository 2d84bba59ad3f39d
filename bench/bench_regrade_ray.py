"""The Ray engine against the local engine on the same files, one table, ratios in one run.

The cluster is a head node and one worker node on this machine (`ray start`, 1 CPU each: the
2-worker cluster of docs/regrade.md); its start and the driver's connection are reported on
their own rows, apart from the runs. "first rows" is when the first chunk was committed (on
disk in OUT.parts/). A first small run on Ray, reported apart, starts its worker processes.
"CPU s" splits the CPU seconds of a run (/proc, medians): the driver process (for a local run
the whole engine), Ray's worker processes, and Ray's own processes (raylets, GCS, Ray Data's
and Ray's helper actors); on two cores the last two compete with the workers.
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


# Ray's own processes by command name (/proc/PID/comm, at most 15 characters): the node
# daemons and Ray Data's / Ray's helper actors. Any other `ray::` process is a worker.
_RAY_SYSTEM = ("raylet", "gcs_server", "ray::_", "dashboard", "log_monitor", "monitor")
_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_by_process() -> dict[int, tuple[str, float]]:
    """(command name, CPU seconds) of every process of this machine."""
    found: dict[int, tuple[str, float]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        comm, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        found[int(proc.name)] = (comm, (int(fields[11]) + int(fields[12])) / _TICK)
    return found


def _cpu_split(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]
) -> tuple[float, float, float]:
    """CPU seconds spent between two snapshots by this process (the driver, or the whole
    local engine), Ray's workers, and Ray's own processes; other processes are left out."""
    driver = workers = system = 0.0
    for pid, (comm, seconds) in after.items():
        spent = seconds - before.get(pid, (comm, 0.0))[1]
        if pid == os.getpid():
            driver += spent
        elif comm.startswith(_RAY_SYSTEM):
            system += spent
        elif comm.startswith("ray::"):
            workers += spent
    return driver, workers, system


@dataclass
class Run:
    label: str
    traces: int
    seconds: float
    first_rows: float
    load: str = "-"  # the 1/5/15-min load average when the run ended
    cpu: tuple[float, float, float] = (0.0, 0.0, 0.0)  # driver, Ray workers, Ray's processes

    @property
    def rate(self) -> float:
        return self.traces / self.seconds


def measure(label: str, inputs: Path, suite: bytes, out: Path, engine: str) -> Run:
    began = time.perf_counter()
    first: list[float] = []

    def committed(_: int) -> None:
        if not first:
            first.append(time.perf_counter() - began)

    cpu_before = _cpu_by_process()
    summary = regrade(
        [str(inputs)], suite, str(out), chunk_size=CHUNK, engine=engine, on_commit=committed
    )
    seconds = time.perf_counter() - began
    cpu = _cpu_split(cpu_before, _cpu_by_process())
    out.unlink()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return Run(label, summary.traces, seconds, first[0] if first else seconds, load, cpu)


def _row(runs: list[Run], local: list[Run]) -> list[str]:
    """Medians over the rounds; the ratio is the median of each round's ratio to its local run."""
    return [
        runs[0].label, f"{runs[0].traces:,}",
        f"{statistics.median(r.seconds for r in runs):.2f}",
        _report.rate(statistics.median(r.rate for r in runs)),
        _report.ratio(statistics.median(r.rate / b.rate for r, b in zip(runs, local, strict=True))),
        f"{statistics.median(r.first_rows for r in runs):.2f}",
        " / ".join(f"{statistics.median(r.cpu[i] for r in runs):.1f}" for i in range(3)),
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
        rows.append(["cluster start (head + 1 worker node)", "-", f"{started:.2f}"] + ["-"] * 5)
        rows.append(["driver connects (ray.init)", "-", f"{connect:.2f}"] + ["-"] * 5)
        # Ray starts its worker processes (Python, pyarrow, trajgrade) with the first tasks.
        warm = measure("workers start (first run)", write_inputs(base, CHUNK)["jsonl"], suite,
                       base / "w.jsonl", "ray")  # fmt: skip
        rows.append([warm.label, f"{warm.traces:,}", f"{warm.seconds:.2f}"] + ["-"] * 5)
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
            [
                "run",
                "traces",
                "seconds",
                "traces/s",
                "vs local",
                "first rows s",
                "CPU s: driver / Ray workers / Ray",
                "load",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
