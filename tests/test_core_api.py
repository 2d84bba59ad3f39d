"""The binding's surface (docs/internals/core-api.md): the production entry points on
`trajgrade._core`, the bench/test-only ones in the `trajgrade._core.bench` submodule, and every
one of them in the doc's tables."""

from __future__ import annotations

import importlib
from pathlib import Path

from trajgrade import _core

CORE_API = Path(__file__).resolve().parents[1] / "docs" / "internals" / "core-api.md"


def _public(obj: object) -> set[str]:
    return {name for name in dir(obj) if not name.startswith("_")}


def test_bench_is_a_submodule_import_finds() -> None:
    module = importlib.import_module("trajgrade._core.bench")
    assert module is _core.bench
    assert module.__name__ == "trajgrade._core.bench"
    assert module.decode_only.__module__ == "trajgrade._core.bench"


def test_grader_keeps_only_production_entry_points() -> None:
    assert _public(_core.Grader) == {
        "compile_suite",
        "get_suite",
        "grade_arrow_block",
        "grade_batch_request",
        "grade_jsonl_block",
        "grade_requests",
        "grade_requests_here",
        "grade_stream_chunk",
        "limits",
        "register_suite",
    }
    assert _public(_core.bench) == {
        "decode_only",
        "grade_arrow_traces_to_json",
        "grade_json_traces",
        "grade_json_traces_to_json",
        "grade_traces",
    }


def test_every_entry_point_is_in_the_doc_tables() -> None:
    rows = [line for line in CORE_API.read_text(encoding="utf-8").splitlines() if line[:3] == "| `"]
    first_cells = " ".join(row.split("|")[1] for row in rows)
    names = {f"Grader.{n}" for n in _public(_core.Grader)} - {"Grader.limits"}
    names |= {f"CompiledSuite.{n}" for n in _public(_core.CompiledSuite)} - {
        "CompiledSuite.suite_id",
        "CompiledSuite.suite_bytes",
    }
    names |= {f"bench.{n}" for n in _public(_core.bench)}
    functions = {
        n for n in dir(_core) if type(getattr(_core, n)).__name__ == "builtin_function_or_method"
    }
    assert functions == {
        "split_jsonl",
        "jsonl_traces",
        "arrow_traces",
        "encode_trace_dict",
        "outcome_block",
        "outcome_tally",
        "map_otlp",
        "map_otlp_runs",
        "otlp_spans",
    }
    names |= functions
    assert {n for n in names if f"`{n}`" not in first_cells} == set()
    assert "`CompiledSuite.suite_id`, `.suite_bytes()`" in first_cells
    assert "`Grader(limits=None, threads=0, max_registered_suites=10000)`, `.limits`" in first_cells
