"""The core's OTLP mapping against goldens written once by the Python importer's mapping:
the real instrumentations' exports the importer tests drive (one file each) and seeded random
span sets (tests/importers/otlp_random.py; digests of the Traces, and the whole report)."""

from __future__ import annotations

import json
from pathlib import Path

import otlp_golden
import otlp_random
import pytest

FILES = sorted(otlp_golden.GOLDEN_DIR.glob("*.json"))
RANDOM = [
    json.loads(line)
    for line in (otlp_golden.GOLDEN_DIR / "random.jsonl").read_text(encoding="utf-8").splitlines()
]


def test_goldens_are_there() -> None:
    assert len(FILES) >= 20
    assert len(RANDOM) == 400


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_exported_files_map_as_the_importer_did(path: Path) -> None:
    golden = otlp_golden.read_golden(path)
    got, report = otlp_golden.core_map(
        golden["traces"], golden["logs"], golden["group_by"], golden["dedupe_window_s"]
    )
    assert report == golden["report"]
    assert got == golden["expected"]


def test_random_span_sets_map_as_the_importer_did() -> None:
    for golden in RANDOM:
        requests, logs = otlp_random.requests(golden["seed"])
        traces = [r.SerializeToString() for r in requests]
        log_bytes = [r.SerializeToString() for r in logs]
        where = f"seed {golden['seed']}, group_by {golden['group_by']!r}"
        # The generator still makes the inputs the goldens were written from.
        assert otlp_golden.digest([*traces, b"logs", *log_bytes]) == golden["input_sha256"], where
        got, report = otlp_golden.core_map(
            traces, log_bytes, golden["group_by"], golden["dedupe_window_s"]
        )
        assert report == golden["report"], where
        assert otlp_golden.digest(got) == golden["expected_sha256"], where
