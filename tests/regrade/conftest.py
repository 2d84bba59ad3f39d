"""Fixtures for the regrade tests: a seeded workload on disk (suite, JSONL, Parquet)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import regrade_workload  # noqa: E402


@pytest.fixture(scope="session")
def workload(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """suite.json, traces.jsonl (600 traces + one bad line + one blank) and traces.parquet."""
    base = tmp_path_factory.mktemp("workload")
    suite = regrade_workload.write_suite(base / "suite.json")
    traces = list(regrade_workload.iter_trace_dicts(600, seed=11))
    jsonl = base / "traces.jsonl"
    with jsonl.open("w", encoding="utf-8") as handle:
        for i, trace in enumerate(traces):
            handle.write(json.dumps(trace) + "\n")
            if i == 100:
                handle.write('{"id": "broken", "calls": 5}\n\n')
    clean = base / "clean.jsonl"
    clean.write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    parquet = base / "traces.parquet"
    pq.write_table(pa.Table.from_pylist(traces), parquet, row_group_size=128)
    return {"suite": suite, "jsonl": jsonl, "clean": clean, "parquet": parquet, "dir": base}
