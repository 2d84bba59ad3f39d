"""`trajgrade diff`: verdict flips and assertion changes, as tables and --json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import regrade_workload
from trajgrade.commands import diff as diff_command
from trajgrade.regrade import read_rows, regrade
from trajgrade.regrade.diff import diff_files


@pytest.fixture(scope="module")
def two_runs(
    workload: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("diff")
    stricter: dict[str, Any] = json.loads(json.dumps(regrade_workload.SUITE))
    stricter["assertions"][0] = {"tool_called": {"tool": "search_flights"}}
    stricter["assertions"][5] = {"tool_count": {"tool": "search_flights", "max": 0}}
    suite_b = base / "stricter.json"
    suite_b.write_text(json.dumps(stricter), encoding="utf-8")
    old, new = base / "old.jsonl", base / "new.parquet"
    regrade([str(workload["clean"])], workload["suite"], str(old))
    regrade([str(workload["clean"])], suite_b, str(new))
    return old, new


def test_flips_match_a_direct_comparison(two_runs: tuple[Path, Path]) -> None:
    old, new = two_runs
    result = diff_files(str(old), str(new))
    old_rows, new_rows = list(read_rows(str(old))), list(read_rows(str(new)))
    expected = {
        a["trace_id"]: (a["verdict"], b["verdict"])
        for a, b in zip(old_rows, new_rows, strict=True)
        if a["verdict"] != b["verdict"]
    }
    assert result.common == 600 and result.only_old == result.only_new == 0
    assert result.flipped == len(expected) > 0
    assert {f["trace_id"] for f in result.flips} == set(expected)
    assert set(result.flip_counts) <= {"PASS->FAIL", "FAIL->PASS"}
    counted = result.assertions["tool_count:search_flights"]
    assert counted.old_rate == 1.0 > counted.new_rate
    assert counted.pass_to_fail == sum(
        1
        for row in new_rows
        for r in row["results"]
        if r["name"] == "tool_count:search_flights" and r["status"] == "ASSERTION_STATUS_FAIL"
    ) - sum(
        1
        for row in old_rows
        for r in row["results"]
        if r["name"] == "tool_count:search_flights" and r["status"] == "ASSERTION_STATUS_FAIL"
    )
    # Assertions only in one run are reported, not silently dropped.
    assert "tool_called:get_user" in result.assertions
    assert "tool_called:search_flights" in result.assertions


def test_cli_json_and_exit_code(
    two_runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = two_runs
    assert diff_command.main([str(old), str(new), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["flipped"] == len(document["flips"]) > 0
    assert diff_command.main([str(old), str(old), "--exit-code"]) == 0
    assert "0 flipped verdict" in capsys.readouterr().out
    assert diff_command.main([str(old), str(new), "--exit-code"]) == 1
    assert "verdict flips" in capsys.readouterr().out
