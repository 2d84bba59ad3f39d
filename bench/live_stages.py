"""Where the live receiver's CPU goes, per run: the pipeline in one process without gRPC.

bench_live.py's spans (an `invoke_agent` root and four `execute_tool` children) are encoded as
OTLP export requests up front, handed to `LiveGrader.export_traces` (the intake, assembly,
timers, the grading thread, publishing to a watcher's queue, the JSONL sink) and the results
taken off a WatchResults watcher's queue. Each stage's function is wrapped to add up the
CPU time of the thread it runs on (`time.thread_time`), and the collector's time is taken by
generation. What it leaves out is gRPC's own cost per export and per WatchResults message
(bench_live.py measures the whole server).

    .venv/bin/python bench/live_stages.py                      # burst: 100 runs per export
    .venv/bin/python bench/live_stages.py --paced              # 10 runs per export, 10 ms apart
    PYTHONPATH=/tmp/main-py .venv/bin/python bench/live_stages.py   # another checkout's Python

The bench process holds more than a server (the OTel SDK that built the spans): with
`--no-freeze` its full collections cost more than a server's would.

A stage that does not exist in the code measured (an older checkout) is left out.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import gc
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_live
from prometheus_client import CollectorRegistry
from trajgrade import _core
from trajgrade.live import assembly, grading, watch
from trajgrade.server.metrics import LiveMetrics
from trajgrade.server.settings import Settings
from trajgrade.v1 import grader_service_pb2

# (owner, attribute, label): the stages, loop thread first, then the grading thread's.
STAGES = [
    (grading, "_incoming", "loop: intake (core otlp_spans, span records)"),
    (assembly.Assembler, "add_spans", "loop: assembly"),
    (grading.LiveGrader, "_after", "loop: span metrics, completed queue, gauges"),
    (grading.LiveGrader, "_publish", "loop: publish (all of it)"),
    (grading.LiveGrader, "_count", "loop:   result metrics"),
    (grading.LiveResult, "response", "loop:   WatchResults message"),
    (grading.LiveResult, "sink_line", "loop:   sink row"),
    (watch.WatchHub, "publish", "loop:   watcher queues"),
    (grading.LiveGrader, "_grade_run", "grading thread: route, map, grade (per run)"),
    (grading.LiveGrader, "_grade_runs", "grading thread: route, map, grade (per trip)"),
    (grading, "map_run", "grading thread:   mapping (map_records)"),
    (_core, "map_otlp_runs", "grading thread:   mapping (map_otlp_runs)"),
    (grading, "root_span", "grading thread:   root span"),
    (grading.LiveGrader, "_commit", "grading thread: commit (metrics)"),
    (grading.SinkWriter, "_write", "sink thread: write and fsync"),
]

cpu: collections.Counter[str] = collections.Counter()
calls: collections.Counter[str] = collections.Counter()
gc_cpu: collections.Counter[int] = collections.Counter()
gc_runs: collections.Counter[int] = collections.Counter()
_gc_started: dict[int, float] = {}


def _wrap(owner: Any, name: str, label: str) -> None:
    function = getattr(owner, name, None)
    if function is None:
        return

    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            cpu[label] += time.thread_time() - started
            calls[label] += 1

    setattr(owner, name, timed)


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_started[0] = time.thread_time()
        return
    generation = info["generation"]
    gc_cpu[generation] += time.thread_time() - _gc_started[0]
    gc_runs[generation] += 1


async def _run(settings: Settings, requests: list[bytes], runs: int, pause: float) -> float:
    grader = _core.Grader()
    live = grading.LiveGrader(settings, grader, LiveMetrics(CollectorRegistry()))
    live.start()
    watcher = live.hub.watch(grader_service_pb2.WatchResultsRequest())
    started = time.thread_time()
    for request in requests:
        live.export_traces(request)
        await asyncio.sleep(pause)
    for _ in range(runs):
        await watcher.queue.get()
    loop_cpu = time.thread_time() - started
    await live.drain(5.0)
    return loop_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--paced", action="store_true", help="10 runs per export, 10 ms apart")
    parser.add_argument(
        "--no-freeze", action="store_true", help="leave startup's objects to the collector"
    )
    args = parser.parse_args()
    per_export, pause = (10, 0.01) if args.paced else (100, 0.0)
    workdir = Path(tempfile.mkdtemp(prefix="live-stages-"))
    (workdir / "bench.yaml").write_text(bench_live.SUITE)
    (workdir / "routes.yaml").write_text(bench_live.ROUTES)
    parsed = argparse.ArgumentParser()
    Settings.add_arguments(parsed)
    argv = ["--otlp-grpc", "127.0.0.1:0", "--routes", str(workdir / "routes.yaml")]
    argv += ["--live-settle-s", "0.05", "--no-early-verdicts", "--watch-queue-size", "1000000"]
    argv += ["--results-jsonl", str(workdir / "results.jsonl")]
    settings = Settings.from_namespace(parsed.parse_args(argv), {})

    from opentelemetry.exporter.otlp.proto.common.trace_encoder import (  # noqa: PLC0415
        encode_spans,
    )

    # Paced runs end by settling (the latency row), burst runs by their end marker.
    spans = bench_live.prebuilt_spans(args.runs, end_marker=not args.paced)
    step = per_export * bench_live.SPANS_PER_TRACE
    requests = [
        encode_spans(spans[i : i + step]).SerializeToString() for i in range(0, len(spans), step)
    ]
    del spans
    gc.collect()
    if not args.no_freeze:
        gc.freeze()  # as `trajgrade serve` does after startup (server/app.py)
    for owner, name, label in STAGES:
        _wrap(owner, name, label)
    gc.callbacks.append(_on_gc)
    loop_cpu = asyncio.run(_run(settings, requests, args.runs, pause))
    gc.callbacks.remove(_on_gc)

    mode = "paced, 10 runs per export" if args.paced else "burst, 100 runs per export"
    print(f"{args.runs} runs ({mode}): CPU per run, microseconds")
    print(f"{loop_cpu * 1e6 / args.runs:8.1f}  loop thread, all of it")
    for _, _, label in STAGES:
        if calls[label]:
            print(f"{cpu[label] * 1e6 / args.runs:8.1f}  {label} ({calls[label]} calls)")
    for generation in sorted(gc_runs):
        print(
            f"{gc_cpu[generation] * 1e6 / args.runs:8.1f}  collector, generation {generation} "
            f"({gc_runs[generation]} collections)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
