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
    # Assertions only in one run are reported as removed/added, not silently dropped and
    # not as a 0% pass rate.
    removed = result.assertions["tool_called:get_user"]
    added = result.assertions["tool_called:search_flights"]
    assert (removed.status, removed.new_rate, removed.delta) == ("removed", None, None)
    assert (added.status, added.old_rate, added.delta) == ("added", None, None)
    assert removed.old_rate is not None and added.new_rate is not None
    assert counted.status == "kept" and counted.delta == counted.new_rate - 1.0


def test_cli_json_and_exit_code(
    two_runs: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    old, new = two_runs
    monkeypatch.setenv("COLUMNS", "160")  # one table row per line
    assert diff_command.main([str(old), str(new), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["flipped"] == len(document["flips"]) > 0
    assert document["flipped_share"] == document["flipped"] / document["common"]
    assert sum(document["flip_counts"].values()) == document["flipped"]
    for transition, n in document["flip_counts"].items():
        assert document["flip_shares"][transition] == n / 600
    removed = document["assertions"]["tool_called:get_user"]
    added = document["assertions"]["tool_called:search_flights"]
    assert removed["status"] == "removed" and removed["new_pass_rate"] is None
    assert removed["new_total"] == 0 and removed["old_total"] == 600
    assert added["status"] == "added" and added["old_pass_rate"] is None
    assert added["delta"] is None and added["new_total"] == 600
    kept = document["assertions"]["tool_count:search_flights"]
    assert kept["status"] == "kept" and kept["delta"] < 0
    assert diff_command.main([str(old), str(old), "--exit-code"]) == 0
    assert "0 flipped verdict" in capsys.readouterr().out
    assert diff_command.main([str(old), str(new), "--exit-code"]) == 1
    table = capsys.readouterr().out
    assert "verdict flips" in table
    lines = {line.split("│")[1].strip(): line for line in table.splitlines() if "│" in line}
    assert "removed" in lines["tool_called:get_user"]
    assert "added" in lines["tool_called:search_flights"]
    assert "0.0%" not in lines["tool_called:get_user"] + lines["tool_called:search_flights"]
    # Flips by transition: counts and their share of the 600 traces in both runs.
    flipped = json.loads(json.dumps(diff_files(str(old), str(new)).flip_counts))
    for transition, n in flipped.items():
        row = lines[transition.replace("->", " → ")]
        assert f" {n} " in row and f"{n / 600:.1%}" in row


def _scored_row(trace_id: str, score: float, status: str) -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "suite_id": "s",
        "verdict": "VERDICT_PASS" if status == "ASSERTION_STATUS_PASS" else "VERDICT_FAIL",
        "score": 1.0 if status == "ASSERTION_STATUS_PASS" else 0.0,
        "soft_failures": 0,
        "results": [
            {
                "name": "trajectory_score",
                "status": status,
                "severity": "SEVERITY_HARD",
                "reason_code": "" if status == "ASSERTION_STATUS_PASS" else "SCORE_BELOW_MIN",
                "reason": "",
                "positions": [],
                "score": score,
            }
        ],
        "mean_score": score,
    }


def test_score_deltas_show_partial_credit_moving_without_a_flip(tmp_path: Path) -> None:
    """A trajectory_score that drops from 0.9 to 0.7 while still passing is a score change the
    pass rate cannot show (SPEC §13); a v1-era row without scores reads as 1.0/0.0."""
    p, f = "ASSERTION_STATUS_PASS", "ASSERTION_STATUS_FAIL"
    old_rows = [_scored_row("a", 0.9, p), _scored_row("b", 0.4, f), _scored_row("c", 1.0, p)]
    new_rows = [_scored_row("a", 0.7, p), _scored_row("b", 0.6667, p), _scored_row("c", 1.0, p)]
    # A row written before SPEC v2: no mean_score, no result score.
    v1_row = _scored_row("c", 1.0, p)
    del v1_row["mean_score"], v1_row["results"][0]["score"]
    old_rows[2] = v1_row
    old, new = tmp_path / "old.jsonl", tmp_path / "new.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in old_rows), encoding="utf-8")
    new.write_text("".join(json.dumps(r) + "\n" for r in new_rows), encoding="utf-8")
    result = diff_files(str(old), str(new))
    change = result.assertions["trajectory_score"]
    assert (change.old_passed, change.new_passed) == (2, 3)
    assert change.old_score == pytest.approx((0.9 + 0.4 + 1.0) / 3)
    assert change.new_score == pytest.approx((0.7 + 0.6667 + 1.0) / 3)
    assert change.score_delta == pytest.approx((0.7 - 0.9 + 0.6667 - 0.4) / 3)
    assert (change.score_down, change.score_up) == (1, 1)
    assert change.scores_text() == ("0.7667", "0.7889", "+0.0222")
    assert result.both_graded == 3
    assert result.old_mean_score == pytest.approx(2.3 / 3)
    document = result.to_json()
    assert document["assertions"]["trajectory_score"]["score_down"] == 1
    assert document["new_mean_score"] == pytest.approx(2.3667 / 3)
    # The table shows the scores and the run's mean score.
    assert diff_command.main([str(old), str(new)]) == 0
