"""Regrade throughput vs the in-process core, and peak RSS per input size (each in a subprocess).

Reuses the core benchmark's seeded workload (bench/workloads.py): the same traces and suite,
so the "core" row here is the figure bench_core measures. Beside the regrade runs, the same
table gives what the input format costs by itself, in-process on the same files: reading
alone (JSONL lines; Parquet batches; Parquet batches + the buffers handed to the core) and the
core grading input already in memory (JSONL lines; Parquet batches), the "same-format core"
each regrade row is also compared with. The Parquet yardstick is the core over exactly the
batches a regrade grades: `iter_batches` with the regrade's chunk size (CHUNK), the file's
own string and list types (no views), batches not spanning row groups. Usage:

    python bench/bench_regrade.py                         # quick: 20k and 50k traces
    python bench/bench_regrade.py --sizes 100000,1000000  # `make bench-regrade`
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import pyarrow as pa
import pyarrow.parquet as pq
import regrade_workload
import workloads
from google.protobuf import json_format
from trajgrade import _core
from trajgrade._core import bench
from trajgrade.importers.parquet import SCHEMA
from trajgrade.regrade import arrowcols, regrade
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.regrade.output import arrow_table_from_jsonl, jsonl_line, outcome_row
from trajgrade.regrade.source import PARQUET_READER_ENV
from trajgrade.regrade.summary import Summary
from trajgrade.suites import suite_bytes
from trajgrade.traces import trace_bytes
from trajgrade.v1 import trace_pb2

BLOCK = 5000  # traces generated at a time, so writing 1M traces needs little memory
CHUNK = 2048
SAMPLE = 100_000  # traces held in memory for the Parquet yardstick (bounded for 1M runs)


def _traces(n: int) -> Iterator[dict[str, Any]]:
    for block_start in range(0, n, BLOCK):
        count = min(BLOCK, n - block_start)
        for i, trace in enumerate(workloads.traces(count, seed=1234 + block_start)):
            trace["id"] = f"bench-{block_start + i}"
            yield trace


def write_inputs(base: Path, n: int) -> dict[str, Path]:
    """The workload as native JSONL and as Parquet (the importers' schema). Reused when `base`
    already holds a complete pair for `n` (a marker is written last), so a 1M-trace run's ~15
    minutes of writing is paid once across invocations that share `--data`."""
    jsonl, parquet = base / f"traces-{n}.jsonl", base / f"traces-{n}.parquet"
    done = base / f"traces-{n}.complete"
    if done.exists() and jsonl.exists() and parquet.exists():
        return {"jsonl": jsonl, "parquet": parquet}
    done.unlink(missing_ok=True)
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
    done.touch()
    return {"jsonl": jsonl, "parquet": parquet}


def core_rate(sample: int) -> tuple[float, list[bytes]]:
    """In-process core: pre-serialized Trace bytes through grade_batch, traces/s."""
    payloads = [trace_bytes(t) for t in _traces(sample)]
    core = _core.Grader().compile_suite(suite_bytes(workloads.suite()))
    core.grade_batch(payloads[:CHUNK])  # warm up the pool
    started = time.perf_counter()
    for i in range(0, len(payloads), CHUNK):
        core.grade_batch(payloads[i : i + CHUNK])
    return sample / (time.perf_counter() - started), payloads


@dataclass(frozen=True)
class Measured:
    """One in-process row: `traces` handled in `seconds`; `correct` when the answer checks."""

    label: str
    traces: int
    seconds: float
    correct: bool

    @property
    def rate(self) -> float:
        return self.traces / self.seconds


def read_floors(inputs: dict[str, Path], n: int) -> list[Measured]:
    """What reading each whole input costs alone, one thread, nothing decoded or graded."""
    floors = []
    started = time.perf_counter()
    count = 0
    with inputs["jsonl"].open("rb") as lines:
        for _line in lines:  # the read is the work
            count += 1
    seconds = time.perf_counter() - started
    floors.append(Measured("read alone: JSONL lines (for line in f)", count, seconds, count == n))
    for label, hand_over in [
        ("read alone: Parquet iter_batches", False),
        ("read alone: Parquet iter_batches + arrowcols.columns", True),
    ]:
        started = time.perf_counter()
        count, taken = 0, True
        for batch in pq.ParquetFile(inputs["parquet"]).iter_batches(batch_size=CHUNK):
            count += batch.num_rows
            if hand_over:
                taken = arrowcols.columns(batch) is not None and taken
        floors.append(Measured(label, count, time.perf_counter() - started, count == n and taken))
    started = time.perf_counter()
    count, taken = 0, True
    reader = _core.ParquetTraces(inputs["parquet"])
    for group in range(len(reader.row_groups)):
        for native in reader.batches(group, 0, CHUNK):
            count += native.num_rows
            taken = native.unsupported is None and taken
    floors.append(
        Measured("read alone: Parquet, the core's reader (ParquetTraces)", count,
                 time.perf_counter() - started, count == n and taken)
    )  # fmt: skip
    return floors


@dataclass
class Sample:
    """What the yardsticks grade, in memory: the whole JSONL input mapped (`whole`: the issue's
    JSONL yardstick is grade_jsonl_block over the whole file's bytes; the pages are the ones a
    regrade reads, in the page cache), its first min(n, SAMPLE) lines as bytes, and the
    Parquet batches of those traces as iter_batches gives them (as a regrade reads them; the
    whole file's batches would not fit beside it)."""

    held: int
    total: int
    data: bytes
    batches: list[pa.RecordBatch]
    whole: mmap.mmap

    @classmethod
    def load(cls, inputs: dict[str, Path], n: int) -> Sample:
        batches: list[pa.RecordBatch] = []
        held = 0
        for batch in pq.ParquetFile(inputs["parquet"]).iter_batches(batch_size=CHUNK):
            if held >= min(n, SAMPLE):
                break
            batches.append(batch)
            held += batch.num_rows
        with inputs["jsonl"].open("rb") as file:
            data = b"".join(islice(file, held))
            whole = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
        return cls(held, n, data, batches, whole)

    def jsonl_blocks(
        self, grader: _core.Grader, suite: _core.CompiledSuite, data: bytes | mmap.mmap
    ) -> list[bytes]:
        """grade_jsonl_block CHUNK lines a call, as a regrade's reader and grading stage do,
        minus the file and the Python: the JSONL yardstick."""
        blocks, at = [], 0
        while consumed := _core.split_jsonl(data, at, CHUNK, True)[0]:
            block = grader.grade_jsonl_block(suite, data, at, at + consumed, 0, "mem")
            blocks.append(block.rows)
            at += consumed
        return blocks

    def arrow_rows(self, suite: _core.CompiledSuite) -> list[bytes]:
        """The core over the Arrow batches' buffers: the Parquet yardstick."""
        return [row for b in self.batches for row in regrade_workload.arrow_rows(suite, b) or []]

    def seconds(self, fmt: str, grader: _core.Grader, suite: _core.CompiledSuite) -> float:
        """The yardstick of `fmt` timed now: seconds a trace."""
        started = time.perf_counter()
        if fmt == "jsonl":
            self.jsonl_blocks(grader, suite, self.whole)
            return (time.perf_counter() - started) / self.total
        self.arrow_rows(suite)
        return (time.perf_counter() - started) / self.held


def same_format_core(
    sample: Sample, grader: _core.Grader, suite: _core.CompiledSuite
) -> dict[str, Measured]:
    """The core (all threads) on the sample: JSONL lines through grade_json_traces_to_json in
    CHUNK slices; the same lines as one bytes through grade_jsonl_block (the JSONL yardstick);
    the Parquet batches through bench.grade_arrow_traces_to_json (the Parquet yardstick).
    Correct = every path gives the same rows."""
    held = sample.held
    lines = sample.data.splitlines(keepends=True)
    bench.grade_json_traces_to_json(suite, lines[:CHUNK])  # warm up the pool
    started = time.perf_counter()
    json_rows = [
        row
        for i in range(0, held, CHUNK)
        for row in bench.grade_json_traces_to_json(suite, lines[i : i + CHUNK])
    ]
    json_seconds = time.perf_counter() - started
    del lines
    started = time.perf_counter()
    blocks = sample.jsonl_blocks(grader, suite, sample.data)
    block_seconds = time.perf_counter() - started
    started = time.perf_counter()
    arrow = sample.arrow_rows(suite)
    arrow_seconds = time.perf_counter() - started
    same = len(json_rows) == held and json_rows == arrow
    same_blocks = b"".join(blocks) == b"".join(json_rows)
    return {
        "jsonl lines": Measured(
            "core grade_json_traces_to_json (JSONL lines in memory)", held, json_seconds, same
        ),
        "jsonl": Measured(
            "core grade_jsonl_block (JSONL bytes in memory)", held, block_seconds, same_blocks
        ),
        "parquet": Measured(
            "core grade_arrow_traces_to_json (Parquet batches in memory)", held, arrow_seconds, same
        ),
    }


def stage_costs(payloads: list[bytes], lines: list[bytes], parquet: Path) -> dict[str, float]:
    """Microseconds per trace of each Python-side step on one thread. The Parquet steps read
    `lines` back from a Parquet file with iter_batches, as a regrade does (not
    Table.to_batches slices, whose buffers are the whole table's)."""
    suite = _core.Grader().compile_suite(suite_bytes(workloads.suite()))
    outcomes = suite.grade_batch(payloads[: len(lines)])
    costs = {}
    started = time.perf_counter()
    for line in lines:
        json_format.Parse(line, trace_pb2.Trace()).SerializeToString()
    costs["json_format.Parse + Serialize"] = time.perf_counter() - started
    started = time.perf_counter()
    for line in lines:
        trace_bytes(json.loads(line))
    costs["json.loads + the binding's dict encoder"] = time.perf_counter() - started
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
    bench.grade_json_traces(core_suite, lines)
    costs["core grade_json_traces (all threads)"] = time.perf_counter() - started
    started = time.perf_counter()
    rows = bench.grade_json_traces_to_json(core_suite, lines)
    costs["core grade_json_traces_to_json (all threads)"] = time.perf_counter() - started
    data = b"\n".join(lines) + b"\n"
    blocks = []
    started = time.perf_counter()
    at = 0
    while consumed := _core.split_jsonl(data, at, CHUNK, True)[0]:
        blocks.append(grader.grade_jsonl_block(core_suite, data, at, at + consumed, 200, "mem"))
        at += consumed
    costs["core split_jsonl + grade_jsonl_block (all threads)"] = time.perf_counter() - started
    # One Summary for the whole run, as a regrade keeps it (its sample of 200 fills up).
    summary = Summary(suite_id=suite.suite_id)
    started = time.perf_counter()
    for block in blocks:
        summary.add_block(block)
    costs["Summary.add_block (counts from the core)"] = time.perf_counter() - started
    started = time.perf_counter()
    for i in range(0, len(rows), CHUNK):
        part = rows[i : i + CHUNK]
        arrow_table_from_jsonl(b"".join(part), max(map(len, part)))
    costs["JSONL rows → Arrow table (Parquet part)"] = time.perf_counter() - started
    table = pa.Table.from_pylist([json.loads(line) for line in lines], schema=SCHEMA)
    pq.write_table(table, parquet, row_group_size=BLOCK)
    batches = list(pq.ParquetFile(parquet).iter_batches(batch_size=CHUNK))
    parquet.unlink()
    started = time.perf_counter()
    for batch in batches:
        json_lines(batch)
    costs["Parquet rows → JSON lines (Arrow compute)"] = time.perf_counter() - started
    started = time.perf_counter()
    for batch in batches:
        regrade_workload.arrow_rows(core_suite, batch)
    costs["core grade_arrow_traces_to_json (buffers, all threads)"] = time.perf_counter() - started
    return {k: v / len(lines) * 1e6 for k, v in costs.items()}


def _in_process_row(m: Measured, core: float, vs_same_format: str) -> list[str]:
    return [
        m.label, f"{m.traces:,}", f"{m.seconds:.2f}", _report.rate(m.rate),
        _report.ratio(m.rate / core), vs_same_format, "-", "yes" if m.correct else "NO",
    ]  # fmt: skip


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


def run_child(input_path: Path, out: Path, suite: Path, reader: str) -> dict[str, Any]:
    """child() in a fresh interpreter, so ru_maxrss is this run's peak alone; `reader` is
    TRAJGRADE_PARQUET_READER ("auto": the core's reader where it reads the file)."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(input_path), str(out), str(suite)],
        check=True, capture_output=True, text=True,
        env={**os.environ, PARQUET_READER_ENV: reader},
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# Each regrade pair's children: (input format, output format, traces) -> one dict per round.
Runs = dict[tuple[str, str, int], list[dict[str, Any]]]


def _median_row(label: str, n: int, runs: list[dict[str, Any]], core: float) -> list[str]:
    """One regrade pair's row: medians over the rounds; the same-format ratio is the median of
    each round's ratio to the same-format core measured in that round."""
    seconds = statistics.median(r["seconds"] for r in runs)
    tps = statistics.median(r["traces"] / r["seconds"] for r in runs)
    vs_same = statistics.median(r["traces"] / r["seconds"] / r["same_rate"] for r in runs)
    rss_mib = statistics.median(r["rss_kib"] for r in runs) / 1024
    correct = all(r["traces"] == n for r in runs)
    return [
        label, f"{n:,}", f"{seconds:.2f}", _report.rate(tps), _report.ratio(tps / core),
        _report.ratio(vs_same), f"{rss_mib:,.0f}", "yes" if correct else "NO",
        " / ".join(r["load"] for r in runs),
    ]  # fmt: skip


def _measured_row(runs: list[Measured], core: float, vs_same_format: str) -> list[str]:
    first = runs[0]
    seconds = statistics.median(m.seconds for m in runs)
    tps = statistics.median(m.rate for m in runs)
    return [
        first.label, f"{first.traces:,}", f"{seconds:.2f}", _report.rate(tps),
        _report.ratio(tps / core), vs_same_format, "-",
        "yes" if all(m.correct for m in runs) else "NO", "-",
    ]  # fmt: skip


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="20000,50000", help="comma-separated trace counts")
    parser.add_argument("--core-sample", type=int, default=20000)
    parser.add_argument(
        "--runs",
        default="jsonl:jsonl,jsonl:parquet,parquet:jsonl,parquet:parquet,"
        "parquet/pyarrow:jsonl,parquet/pyarrow:parquet",
        help="input:output format pairs to run (parquet/pyarrow: Parquet input read by pyarrow, "
        "not the core's reader)",
    )
    parser.add_argument("--repeats", type=int, default=1, help="rounds; every row is a median")
    parser.add_argument(
        "--data", help="keep the generated inputs in this directory and reuse them next time"
    )
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument(
        "--child", nargs=3, metavar=("INPUT", "OUT", "SUITE"), help=argparse.SUPPRESS
    )
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.child:
        child(*args.child)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    pairs = [pair.split(":") for pair in args.runs.split(",")]
    base = Path(args.data) if args.data else Path(tempfile.mkdtemp(prefix="trajgrade-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="trajgrade-bench-regrade-out-"))
    suite = scratch / "suite.json"
    suite.write_text(json.dumps(workloads.suite()), encoding="utf-8")
    load_before = _load()

    rate, payloads = core_rate(args.core_sample)
    lines = [
        json.dumps(t, ensure_ascii=False).encode() for t in _traces(min(5000, args.core_sample))
    ]
    costs = stage_costs(payloads, lines, scratch / "stage.parquet")
    del payloads, lines  # the children measure their own peak RSS, but keep the parent small
    grader = _core.Grader()
    core_suite = grader.compile_suite(suite_bytes(workloads.suite()))

    inputs = {n: write_inputs(base, n) for n in sizes}  # all written before any timing
    floors: dict[int, list[list[Measured]]] = {n: [] for n in sizes}
    same: dict[int, list[dict[str, Measured]]] = {n: [] for n in sizes}
    runs: Runs = {}
    # Rounds interleave every row: in each round, per size, the floors, the same-format core,
    # then each regrade pair, each ratio against the same-format core of its own round.
    for _ in range(args.repeats):
        for n in sizes:
            floors[n].append(read_floors(inputs[n], n))
            sample = Sample.load(inputs[n], n)
            same[n].append(same_format_core(sample, grader, core_suite))
            for spec, out_fmt in pairs:
                fmt, _, reader = spec.partition("/")
                out = scratch / f"results-{n}-{fmt}.{out_fmt}"
                # The yardstick timed right before and right after the run: on a shared machine
                # the load moves within a round, and each ratio should compare neighbours.
                before = sample.seconds(fmt, grader, core_suite)
                result = run_child(inputs[n][fmt], out, suite, reader or "auto")
                after = sample.seconds(fmt, grader, core_suite)
                result["same_rate"] = 2 / (before + after)
                result["load"] = _load()
                runs.setdefault((spec, out_fmt, n), []).append(result)
                out.unlink()

    rows = [
        ["core grade_batch (in-process, bytes)", f"{args.core_sample:,}", "-",
         _report.rate(rate), "1.00x", "-", "-", "yes", "-"]
    ]  # fmt: skip
    for n in sizes:
        rows.extend(_measured_row(list(ms), rate, "-") for ms in zip(*floors[n], strict=True))
        for key in same[n][0]:
            rows.append(
                _measured_row([r[key] for r in same[n]], rate, "1.00x" if key in inputs[n] else "-")
            )
        for spec, out_fmt in pairs:
            fmt, _, reader = spec.partition("/")
            label = (
                f"regrade {fmt} ({reader} reader) → {out_fmt}"
                if reader
                else f"regrade {fmt} → {out_fmt}"
            )
            rows.append(_median_row(label, n, runs[(spec, out_fmt, n)], rate))
    if not args.keep and not args.data:
        for paths in inputs.values():
            for path in paths.values():
                path.unlink()
    threads = os.cpu_count()
    print(_report.table(
        f"regrade vs in-process core ({platform.machine()}, {threads} cores, chunk {CHUNK}, "
        f"{_core.build_profile} build; medians of {args.repeats} interleaved rounds; all ratios "
        f"from this run; load average before: {load_before})\n"
        "vs core = traces/s over the core row; vs same-format core = median over the rounds of "
        "the regrade's rate over the core on its input format in memory, timed right before "
        "and after it (JSONL: grade_jsonl_block over the whole file's bytes, mapped; Parquet: "
        f"the first min(traces, {SAMPLE:,}) traces' batches); the same-format rows below them "
        "time that sample of both; load = 1/5/15-min load average after each round's run",
        ["run", "traces", "seconds", "traces/s", "vs core", "vs same-format core",
         "peak RSS MiB", "correct", "load"],
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
            f"peak RSS growth from {first:,} to {last:,} traces (median of rounds; target: within"
            " 10%)",
            ["run", "growth"],
            [[f"{fmt} → {out_fmt}", f"{_rss_growth(runs, fmt, out_fmt, first, last):+.1%}"]
             for fmt, out_fmt in pairs],
        ))  # fmt: skip


def _rss_growth(runs: Runs, fmt: str, out: str, first: int, last: int) -> float:
    def rss(n: int) -> float:
        return float(statistics.median(r["rss_kib"] for r in runs[(fmt, out, n)]))

    return rss(last) / rss(first) - 1


if __name__ == "__main__":
    main()
