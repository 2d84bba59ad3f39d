"""The live receiver's intake and assembly alone: bench_live.py's five-span runs encoded as
512-span OTLP exports up front, then taken in by `_incoming` and `Assembler.add_spans` and
completed by `Assembler.due`, with nothing else in the process (no gRPC, no grading).

It prints the median cost per span and per run of `--passes` passes. Under callgrind, the
instructions of a pass count the same on any load. Take the difference between two pass
counts, which cancels the start-up:

    .venv/bin/python bench/live_intake.py
    valgrind --tool=callgrind .venv/bin/python bench/live_intake.py --passes 1 --quiet
    valgrind --tool=callgrind .venv/bin/python bench/live_intake.py --passes 4 --quiet
    PYTHONPATH=/tmp/base/python .venv/bin/python bench/live_intake.py   # another checkout

An older checkout's `_incoming` returns the spans alone; both shapes are taken.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_live
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from trajgrade.live.assembly import Assembler, AssemblyConfig
from trajgrade.live.grading import _incoming

_KEYS = ["service.name"]


def one_pass(requests: list[bytes], runs: int) -> tuple[float, float]:
    """Intake and assembly of every request, then `due`: (seconds taking them, seconds in
    `due`)."""
    assembler = Assembler(AssemblyConfig(settle_s=0.05))
    started = time.perf_counter()
    for request in requests:
        taken: Any = _incoming(request, _KEYS)
        if isinstance(taken, tuple):
            assembler.add_spans(taken[0], 1.0, taken[1])
        else:
            assembler.add_spans(taken, 1.0)
    took = time.perf_counter()
    done = assembler.due(10.0)
    ended = time.perf_counter()
    assert len(done) == runs, (len(done), runs)
    return took - started, ended - took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="five-span runs")
    parser.add_argument("--batch", type=int, default=512, help="spans per export")
    parser.add_argument("--passes", type=int, default=15)
    parser.add_argument("--quiet", action="store_true", help="print nothing (callgrind)")
    args = parser.parse_args()
    spans = bench_live.prebuilt_spans(args.runs, False)
    requests = [
        encode_spans(spans[i : i + args.batch]).SerializeToString()
        for i in range(0, len(spans), args.batch)
    ]
    gc.disable()  # the collector's pauses land on whichever pass allocates: left out here
    timings = [one_pass(requests, args.runs) for _ in range(args.passes)]
    if args.quiet:
        return
    intake = statistics.median(t[0] for t in timings)
    due = statistics.median(t[1] for t in timings)
    print(
        f"{args.runs} runs, {len(spans)} spans in {len(requests)} exports, median of "
        f"{args.passes} passes: intake and assembly {intake / len(spans) * 1e6:.3f} us a span, "
        f"due {due / args.runs * 1e6:.3f} us a run"
    )


if __name__ == "__main__":
    main()
