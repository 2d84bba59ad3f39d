"""The `trajgrade grade` command, run as a subprocess (as users and CI run it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = {
    "assertions": [
        {"tool_called": {"tool": "lookup"}},
        {
            "tool_call_args": {
                "tool": "refund",
                "match": {"mode": "MATCH_MODE_SUBSET", "args_json": '{"amount_cents":5000}'},
            }
        },
    ]
}
PASSING = {
    "id": "ok",
    "calls": [{"name": "lookup"}, {"name": "refund", "arguments_json": '{"amount_cents":5e3}'}],
}
FAILING = {"id": "bad", "calls": [{"name": "refund", "arguments_json": '{"amount_cents":500}'}]}


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trajgrade", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        input=stdin,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {
        "suite": tmp_path / "suite.json",
        "pass": tmp_path / "pass.json",
        "fail": tmp_path / "fail.json",
        "bad_suite": tmp_path / "bad.yaml",
        "lines": tmp_path / "traces.jsonl",
        "all_bad": tmp_path / "bad.jsonl",
    }
    paths["suite"].write_text(json.dumps(SUITE), encoding="utf-8")
    paths["pass"].write_text(json.dumps(PASSING), encoding="utf-8")
    paths["fail"].write_text(json.dumps(FAILING), encoding="utf-8")
    paths["bad_suite"].write_text(
        "assertions:\n  - tool_called: {tool: a}\n  - order: {before: x, after: x}\n",
        encoding="utf-8",
    )
    lines = [json.dumps(PASSING), "not json", json.dumps(FAILING), '{"id": "u", "typo": 1}']
    paths["lines"].write_text("\n".join(lines) + "\n", encoding="utf-8")
    paths["all_bad"].write_text("nope\n[]\n", encoding="utf-8")
    return paths


def test_table(files: dict[str, Path]) -> None:
    proc = run("grade", "--suite", str(files["suite"]), "--trace", str(files["fail"]))
    assert proc.returncode == 0, proc.stderr
    assert "FAIL" in proc.stdout
    assert "tool_call_args:refund" in proc.stdout
    assert "TOOL_NOT_CALLED" in proc.stdout


def test_json(files: dict[str, Path]) -> None:
    proc = run("grade", "--suite", str(files["suite"]), "--trace", str(files["pass"]), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["verdict"] == "VERDICT_PASS"
    assert out["score"] == 1.0
    assert out["soft_failures"] == 0
    assert out["trace_id"] == "ok"
    assert [r["status"] for r in out["results"]] == ["ASSERTION_STATUS_PASS"] * 2
    assert out["results"][0]["reason_code"] == ""  # defaults are printed


def test_json_failing_and_check(files: dict[str, Path]) -> None:
    args = ["grade", "--suite", str(files["suite"]), "--trace", str(files["fail"]), "--json"]
    proc = run(*args)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0
    assert out["verdict"] == "VERDICT_FAIL"
    assert out["score"] == 0.0
    assert [r["reason_code"] for r in out["results"]] == ["TOOL_NOT_CALLED", "NO_MATCHING_CALL"]
    assert out["results"][1]["positions"] == [1]
    assert run(*args, "--check").returncode == 1


def test_traces_jsonl(files: dict[str, Path]) -> None:
    proc = run("grade", "--suite", str(files["suite"]), "--traces", str(files["lines"]))
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(out) == 4
    assert out[0]["verdict"] == "VERDICT_PASS"
    assert out[1]["reason_code"] == "INVALID_TRACE"
    assert out[1]["field"] == "traces[1]"
    assert out[2]["verdict"] == "VERDICT_FAIL"
    assert (out[3]["trace_id"], out[3]["field"]) == ("u", "traces[3].typo")


def test_traces_stdin_and_all_bad(files: dict[str, Path]) -> None:
    stdin = json.dumps(PASSING) + "\n"
    proc = run("grade", "--suite", str(files["suite"]), "--traces", "-", stdin=stdin)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["verdict"] == "VERDICT_PASS"
    proc = run("grade", "--suite", str(files["suite"]), "--traces", str(files["all_bad"]))
    assert proc.returncode == 2
    assert [json.loads(x)["reason_code"] for x in proc.stdout.splitlines()] == ["INVALID_TRACE"] * 2


def test_invalid_suite_exits_2_with_json(files: dict[str, Path]) -> None:
    proc = run("grade", "--suite", str(files["bad_suite"]), "--trace", str(files["pass"]))
    assert proc.returncode == 2
    out = json.loads(proc.stdout)
    assert out["error"] == "INVALID_ARGUMENT"
    assert out["field"] == "assertions[1].order.after"
    assert out["message"]


def test_unknown_suite_field_exits_2(tmp_path: Path, files: dict[str, Path]) -> None:
    suite = tmp_path / "typo.json"
    suite.write_text('{"assertions": [{"tool_caled": {"tool": "a"}}]}', encoding="utf-8")
    proc = run("grade", "--suite", str(suite), "--trace", str(files["pass"]))
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["field"] == "assertions[0].tool_caled"


def test_invalid_trace_exits_2(tmp_path: Path, files: dict[str, Path]) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('{"calls": [{"nme": "a"}]}', encoding="utf-8")
    proc = run("grade", "--suite", str(files["suite"]), "--trace", str(trace))
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["field"] == "trace.calls[0].nme"


def test_help_lists_grade() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    assert "grade" in proc.stdout
