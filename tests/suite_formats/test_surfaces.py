"""Every suite format on every Python surface: compile_suite, load_suite(s), the CLI's grade and
regrade, and the Python client against a live server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import seeds
import trajgrade
from client.conftest import ThreadedServer, free_port
from trajgrade import InvalidSuiteError, compile_suite, load_suite
from trajgrade.cli import main
from trajgrade.client import Client
from trajgrade.v1.assertion_pb2 import TRAJECTORY_MODE_SUPERSET
from trajgrade.v1.result_pb2 import VERDICT_FAIL, VERDICT_PASS

ORBIT = {
    "name": "refunds",
    "tool_call_args": [
        {"tool": "issue_refund", "match": {"mode": "subset", "args": {"amount_cents": 5000}}}
    ],
    "allowed_tools": ["lookup_account", "issue_refund"],
}
PROMPTFOO = [{"type": "not-trajectory:tool-used", "value": "delete_*"}]
ADK = {"eval_id": "refund", "conversation": [{"intermediate_data": {"tool_uses": [
    {"name": "lookup_account", "args": {"id": 1}}, {"name": "issue_refund"}]}}]}  # fmt: skip
NATIVE = {"assertions": [{"forbidden_tools": {"tools": ["delete_customer"]}}]}
GOOD = seeds.trace(
    [("lookup_account", {"id": 1}), ("issue_refund", {"amount_cents": 5000, "order": "o1"})],
    "good",
)
BAD = seeds.trace([("issue_refund", {"amount_cents": 500}), ("delete_customer", {})], "bad")


@pytest.mark.parametrize(
    ("source", "kind"),
    [(ORBIT, "orbit"), (PROMPTFOO, "promptfoo"), (ADK, "adk"), (NATIVE, "native")],
)
def test_compile_suite_takes_every_format_in_every_form(
    source: dict[str, object] | list[object], kind: str, tmp_path: Path
) -> None:
    text = json.dumps(source)
    path = tmp_path / "suite.json"
    path.write_text(text, encoding="utf-8")
    yaml_path = tmp_path / "suite.yaml"
    yaml_path.write_text(text, encoding="utf-8")  # JSON is YAML
    ids = {compile_suite(form).suite_id for form in (text, path, str(path), yaml_path)}
    ids.add(compile_suite(source).suite_id)  # the parsed value itself: a dict or a list
    ids.add(compile_suite(load_suite(path)).suite_id)
    assert len(ids) == 1
    assert trajgrade.load_suites(path).format == kind
    forced = compile_suite(path, format=kind)
    assert forced.suite_id in ids
    assert forced.grade(GOOD).verdict != forced.grade(BAD).verdict


def test_forced_format_and_native_errors_keep_their_field_paths() -> None:
    with pytest.raises(InvalidSuiteError) as raised:
        compile_suite(ORBIT, format="native")
    assert raised.value.field == "tool_call_args"
    with pytest.raises(InvalidSuiteError, match="not a promptfoo suite"):
        compile_suite(ORBIT, format="promptfoo")
    with pytest.raises(InvalidSuiteError) as raised:
        compile_suite({"assertion": []})  # a typo of a native key: the native parser names it
    assert raised.value.field == "assertion"
    with pytest.raises(InvalidSuiteError, match="unknown suite format"):
        compile_suite(ORBIT, format="orbits")
    bad = {"tool_call_args": [{"tool": "f", "match": {"mode": "subst", "args": {}}}]}
    with pytest.raises(InvalidSuiteError) as raised:
        compile_suite(bad)
    assert raised.value.problems == [
        ("tool_call_args[0].match.mode", "unknown mode 'subst'; expected exact, subset, regex")
    ]


def test_several_suites_need_a_name(tmp_path: Path) -> None:
    tests = [
        {"description": "a", "assert": PROMPTFOO},
        {"description": "b", "assert": [{"type": "trajectory:step-count", "value": {"max": 1}}]},
    ]
    path = tmp_path / "tests.yaml"
    path.write_text(json.dumps(tests), encoding="utf-8")
    with pytest.raises(InvalidSuiteError, match=r"holds 2 suites \('a', 'b'\)"):
        compile_suite(path)
    assert list(trajgrade.load_suites(path).suites) == ["a", "b"]
    dup = tmp_path / "dup.yaml"
    dup.write_text(json.dumps([tests[0], tests[0]]), encoding="utf-8")
    with pytest.raises(InvalidSuiteError, match="is also the name of"):
        trajgrade.load_suites(dup)


def test_grade_and_regrade_cli_read_orbit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "orbit.json"
    suite.write_text(json.dumps(ORBIT), encoding="utf-8")
    traces = tmp_path / "runs.jsonl"
    traces.write_text(json.dumps(GOOD) + "\n" + json.dumps(BAD) + "\n", encoding="utf-8")
    assert main(["grade", "--suite", str(suite), "--traces", str(traces), "--check"]) == 1
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o["verdict"] for o in out] == ["VERDICT_PASS", "VERDICT_FAIL"]
    assert [r["name"] for r in out[1]["results"]] == [
        "tool_call_args:issue_refund",
        "no_unexpected_tool",
    ]
    results = tmp_path / "results.jsonl"
    argv = ["regrade", str(traces), "--suite", str(suite), "--out", str(results), "--no-progress"]
    assert main(argv) == 0
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["verdict"] for r in rows] == ["VERDICT_PASS", "VERDICT_FAIL"]
    assert rows[0]["suite_id"] == compile_suite(ORBIT).suite_id
    capsys.readouterr()
    # A native-only reading of the same file fails with the native parser's field.
    argv = ["grade", "--suite", str(suite), "--traces", str(traces), "--suite-format", "native"]
    assert main(argv) == 2
    assert json.loads(capsys.readouterr().out)["field"] == "tool_call_args"


def test_regrade_of_a_file_with_several_tests_needs_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "tests.yaml"
    suite.write_text(
        json.dumps(
            [{"description": "a", "assert": PROMPTFOO}, {"description": "b", "assert": PROMPTFOO}]
        ),
        encoding="utf-8",
    )
    traces = tmp_path / "runs.jsonl"
    traces.write_text(json.dumps(GOOD) + "\n", encoding="utf-8")
    out = tmp_path / "results.jsonl"
    base = ["regrade", str(traces), "--suite", str(suite), "--out", str(out), "--no-progress"]
    assert main(base) == 2
    assert "--test NAME" in capsys.readouterr().err
    assert main([*base, "--test", "b"]) == 0
    assert json.loads(out.read_text())["verdict"] == "VERDICT_PASS"


@pytest.fixture
def live() -> Iterator[ThreadedServer]:
    server = ThreadedServer(f"127.0.0.1:{free_port()}").start()
    yield server
    server.stop()


def test_python_client_takes_every_format(live: ThreadedServer, tmp_path: Path) -> None:
    path = tmp_path / "orbit.json"
    path.write_text(json.dumps(ORBIT), encoding="utf-8")
    with Client(live.target) as client:
        for source in (ORBIT, path, json.dumps(PROMPTFOO), ADK):
            assert client.grade(GOOD, source) == compile_suite(source).grade(GOOD)
        suite_id = client.register_suite(path)
        assert suite_id == compile_suite(ORBIT).suite_id
        assert client.get_suite(suite_id) == load_suite(ORBIT)


def test_adk_reads_test_config_json_beside_the_eval_file(tmp_path: Path) -> None:
    # ADK's AgentEvaluator takes the criteria of `test_config.json` in the eval file's folder.
    path = tmp_path / "refund.test.json"
    path.write_text(json.dumps(ADK), encoding="utf-8")
    reversed_calls = seeds.trace([("issue_refund", {}), ("lookup_account", {"id": 1})])
    assert compile_suite(path).grade(reversed_calls).verdict == VERDICT_FAIL  # EXACT by default
    config = {
        "criteria": {"tool_trajectory_avg_score": {"threshold": 1.0, "match_type": "ANY_ORDER"}}
    }
    (tmp_path / "test_config.json").write_text(json.dumps(config), encoding="utf-8")
    suite = load_suite(path)
    assert suite.assertions[0].trajectory_match.mode == TRAJECTORY_MODE_SUPERSET
    assert compile_suite(path).grade(reversed_calls).verdict == VERDICT_PASS
    # Its other criteria grade text: unsupported, as for a config given in Python.
    config["criteria"]["response_match_score"] = 0.8
    (tmp_path / "test_config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(InvalidSuiteError, match="response_match_score"):
        load_suite(path)
    assert load_suite(path, allow_unsupported=True) == suite


def test_adk_expected_calls_with_unknown_keys_or_no_name_are_errors() -> None:
    # A typo of `args` would expect a call without arguments; a call without a name, nothing.
    typo = json.loads(json.dumps(ADK))
    use = typo["conversation"][0]["intermediate_data"]["tool_uses"][0]
    use["arguments"] = use.pop("args")
    where = "conversation[0].intermediate_data.tool_uses[0]"
    for allow in (False, True):
        with pytest.raises(InvalidSuiteError) as raised:
            load_suite(typo, allow_unsupported=allow)
        assert raised.value.problems == [
            (f"{where}.arguments", "unknown key; expected id, name, args")
        ]
    del use["name"]
    use["args"] = use.pop("arguments")
    with pytest.raises(InvalidSuiteError) as raised:
        load_suite(typo)
    assert raised.value.problems == [(f"{where}.name", "a tool call needs a name, got None")]


# The same checks written by hand as native suites, as a user reading docs/assertions.md would
# (defaults left out): each converted suite must grade every trace exactly as its native twin.
HAND_WRITTEN = {
    "orbit": {
        "name": "refunds",
        "assertions": [
            {
                "tool_call_args": {
                    "tool": "issue_refund",
                    "match": {"mode": "MATCH_MODE_SUBSET", "args_json": '{"amount_cents": 5000}'},
                }
            },
            {"allowed_tools": {"tools": ["lookup_account", "issue_refund"]}},
        ],
    },
    "promptfoo": {
        "assertions": [{"forbidden_tools": {"tools": ["delete_*"], "ignore_case": True}}]
    },
    "adk": {
        "name": "refund",
        "assertions": [
            {
                "name": "tool_trajectory_avg_score",
                "trajectory_match": {
                    "reference": [
                        {"name": "lookup_account", "arguments_json": '{"id": 1}'},
                        {"name": "issue_refund"},
                    ]
                },
            }
        ],
    },
}


# The rest of the Orbit doc's shapes: call_index with a case-insensitive regex, a sequence step
# with its own subset match, presence-only expected_tool_calls.
ORBIT_DOC = {
    "tool_call_args": [
        {
            "tool": "kb_query",
            "call_index": 2,
            "match": {"mode": "regex", "pattern": "refund policy", "flags": "i"},
        }
    ],
    "expected_tool_sequence": [
        {"tool": "lookup_account"},
        {"tool": "issue_refund", "match": {"mode": "subset", "args": {"amount_cents": 5000}}},
    ],
    "expected_tool_calls": ["lookup_account"],
}
HAND_WRITTEN["orbit-doc"] = {
    "assertions": [
        {
            "tool_call_args": {
                "tool": "kb_query",
                "call_index": 2,
                "match": {"mode": "MATCH_MODE_REGEX", "pattern": "refund policy", "flags": "i"},
            }
        },
        {
            "tool_sequence": {
                "steps": [
                    {"glob": "lookup_account"},
                    {
                        "glob": "issue_refund",
                        "match": {
                            "mode": "MATCH_MODE_SUBSET",
                            "args_json": '{"amount_cents":5000}',
                        },
                    },
                ]
            }
        },
        {"tool_called": {"tool": "lookup_account"}},
    ]
}
KB = [("kb_query", {"q": "shipping"}), ("kb_query", {"q": "EU Refund Policy"})]


@pytest.mark.parametrize(
    ("source", "kind"),
    [(ORBIT, "orbit"), (ORBIT_DOC, "orbit-doc"), (PROMPTFOO, "promptfoo"), (ADK, "adk")],
)
def test_every_format_grades_as_its_hand_written_native_twin(
    source: dict[str, object] | list[object], kind: str
) -> None:
    converted, native = compile_suite(source), compile_suite(HAND_WRITTEN[kind], format="native")
    traces = [
        GOOD,
        BAD,
        seeds.trace([("lookup_account", {"id": 2})], "other"),
        seeds.trace([("lookup_account", {}), *KB, ("issue_refund", {"amount_cents": 5000})], "kb"),
        seeds.trace([*reversed(KB), ("issue_refund", {"amount_cents": 5000})], "kb-reversed"),
    ]
    for trace in traces:
        got, want = converted.grade(trace), native.grade(trace)
        got.ClearField("suite_id")
        want.ClearField("suite_id")
        assert got == want, trace.id
    verdicts = {converted.grade(t).verdict for t in traces}
    assert verdicts == {VERDICT_PASS, VERDICT_FAIL}  # the traces tell the suite's cases apart
