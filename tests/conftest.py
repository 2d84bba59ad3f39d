"""Shared fixtures: the conformance corpus (shared/conformance, next to the repo)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFORMANCE_DIR = Path(__file__).resolve().parents[2] / "shared" / "conformance"


def load_cases() -> list[dict[str, Any]]:
    """Every case of cases.jsonl; fails loudly when the corpus is missing."""
    path = CONFORMANCE_DIR / "cases.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"conformance corpus not found at {path}: clone the repo next to shared/"
        )
    # Split on "\n" only: str.splitlines would also split on U+2028 and friends (README).
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.split("\n") if line.strip()]


CASES = load_cases()


def compare_outcome(expect: dict[str, Any], got: dict[str, Any]) -> None:
    """Asserts the conformance README's comparison: every field present in `expect`."""
    for key in ("verdict", "soft_failures"):
        if key in expect:
            assert got[key] == expect[key], key
    if "score" in expect:
        assert got["score"] == float(expect["score"]), "score"
    if "results" in expect:
        assert len(got["results"]) == len(expect["results"]), "result count"
        for i, (g, e) in enumerate(zip(got["results"], expect["results"], strict=True)):
            for key in ("name", "status", "severity", "reason_code", "positions"):
                if key in e:
                    assert g[key] == e[key], f"results[{i}].{key}"
