"""The promptfoo article's test-case file and promptfooconfig.yaml, verbatim, as users keep them.

The YAML is cut out of spec/seeds/promptfoo-trajectory-article.md at test time and laid out as
the article names the files (the config beside `evals/helpdesk/*.yaml`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import seeds
import yaml
from trajgrade import InvalidSuiteError, compile_suite, load_suite, load_suites
from trajgrade.cli import main
from trajgrade.suite_formats import SuiteFormatError, convert_all, promptfoo
from trajgrade.v1 import assertion_pb2 as A  # noqa: N812 - short alias for many enum names
from trajgrade.v1 import result_pb2

ARTICLE = "promptfoo-trajectory-article.md"
TEST_FILE = seeds.between(
    ARTICLE, "# evals/helpdesk/credit-note-ambiguous-customer.yaml", "Instrument a NestJS agent"
)
CONFIG = seeds.between(ARTICLE, "# promptfooconfig.yaml", "A few options do most of the work")
APPENDED = seeds.between(
    ARTICLE,
    "# Appended to defaultTest.assert in promptfooconfig.yaml",
    "promptfoo also ships a cost assertion",
)
NAME = "Credit note, ambiguous customer name, partial damage"

CUSTOMER = ("find_customer", {"legal_name": "PT Sinar Jaya Abadi", "limit": 5})
INVOICE = ("get_invoice", {"invoice_no": "INV-2026-08812"})
DRAFT = (
    "create_credit_note_draft",
    {
        "invoice_no": "INV-2026-08812",
        "lines": [{"line_no": 1, "qty": 2}],
        "reason": "damaged",
        "idempotency_key": "k-81c2",
    },
)
GOOD = [CUSTOMER, INVOICE, ("get_stock_return", {"invoice_no": "INV-2026-08812"}), DRAFT]
# The article's opening failure: a partial name, no invoice fetched, an invented extra.
BAD = [
    ("find_customer", {"legal_name": "Sinar Jaya"}),
    ("create_credit_note_draft", {**DRAFT[1], "force": True}),
    ("post_credit_note", {"draft": "CN-1"}),
]


def _layout(tmp_path: Path, config: str = CONFIG) -> Path:
    helpdesk = tmp_path / "evals" / "helpdesk"
    helpdesk.mkdir(parents=True)
    (helpdesk / "credit-note-ambiguous-customer.yaml").write_text(TEST_FILE, encoding="utf-8")
    path = tmp_path / "promptfooconfig.yaml"
    path.write_text(config, encoding="utf-8")
    return path


# The appended block's last assertion: the token ceiling.
CEILING = APPENDED[APPENDED.index("    # Cost ceiling") :]


def _with_appended(block: str = APPENDED) -> str:
    # The article appends its block to defaultTest.assert, i.e. just before `tests:`.
    head, sep, tail = CONFIG.partition("\ntests:")
    assert sep
    return head + "\n" + block + sep + tail


def _results(path: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, str]]:
    result = compile_suite(path).grade(seeds.trace(calls))
    return [
        (
            r.name,
            result_pb2.AssertionStatus.Name(r.status).removeprefix("ASSERTION_STATUS_"),
            r.reason_code,
        )
        for r in result.results
    ]


def test_test_case_file_is_one_suite_named_by_its_description(tmp_path: Path) -> None:
    path = tmp_path / "case.yaml"
    path.write_text(TEST_FILE, encoding="utf-8")
    suite = load_suite(path)
    assert suite.name == NAME
    kinds = [a.WhichOneof("kind") for a in suite.assertions]
    assert kinds == ["tool_sequence", "tool_sequence", "tool_sequence"]
    exact = suite.assertions[2].tool_sequence.steps[0]
    assert exact.glob == "create_credit_note_draft"
    assert exact.match.mode == A.MATCH_MODE_EXACT
    assert list(exact.match.ignore) == ["idempotency_key"]
    assert _results(path, GOOD) == [
        ("trajectory:tool-args-match:find_customer", "PASS", ""),
        ("tool_sequence", "PASS", ""),
        ("trajectory:tool-args-match:create_credit_note_draft", "PASS", ""),
    ]
    assert _results(path, BAD) == [
        ("trajectory:tool-args-match:find_customer", "FAIL", "SEQUENCE_INCOMPLETE"),
        ("tool_sequence", "FAIL", "SEQUENCE_INCOMPLETE"),
        ("trajectory:tool-args-match:create_credit_note_draft", "FAIL", "SEQUENCE_INCOMPLETE"),
    ]
    # The article's failing scenario names the call and the argument, not only "not found".
    reasons = [r.reason for r in compile_suite(path).grade(seeds.trace(BAD)).results]
    assert reasons[0].endswith(
        "step 1 find_customer not found in the trace; closest is call 1: $.legal_name expected "
        '"PT Sinar Jaya Abadi", got "Sinar Jaya"'
    )
    assert reasons[2].endswith("closest is call 2: $.force is not expected, got true")


def test_config_merges_default_test_into_the_globbed_tests(tmp_path: Path) -> None:
    path = _layout(tmp_path)
    found = load_suites(path)
    assert found.format == "promptfoo"
    assert list(found.suites) == [NAME]
    assert found.skipped == []
    # defaultTest.assert first, then the test's own, as promptfoo's evaluator merges them.
    assert _results(path, GOOD) == [
        ("no_forbidden_tool", "PASS", ""),
        ("step_count", "PASS", ""),
        ("trajectory:tool-args-match:find_customer", "PASS", ""),
        ("tool_sequence", "PASS", ""),
        ("trajectory:tool-args-match:create_credit_note_draft", "PASS", ""),
    ]
    bad = _results(path, BAD)
    assert bad[0] == ("no_forbidden_tool", "FAIL", "FORBIDDEN_TOOL")
    assert {status for _, status, _ in bad[2:]} == {"FAIL"}
    loop = GOOD + [("get_invoice", {"invoice_no": "INV-2026-08812"})] * 9
    assert _results(path, loop)[1] == ("step_count", "FAIL", "TOO_MANY_STEPS")


def test_model_graded_and_javascript_are_refused_or_listed(tmp_path: Path) -> None:
    path = _layout(tmp_path, _with_appended())
    with pytest.raises(InvalidSuiteError) as raised:
        load_suites(path)
    problems = raised.value.problems
    # The token ceiling (defaultTest.assert[4]) converts; the other two cannot.
    assert [field for field, _ in problems] == [
        "defaultTest.assert[2]",
        "defaultTest.assert[3]",
    ]
    assert "model-graded" in problems[0][1]
    assert "javascript" in problems[1][1]
    found = load_suites(path, allow_unsupported=True)
    assert len(found.skipped) == 2
    # Listed and left out: the rest is the suite without them, the ceiling a `budget` after
    # the config's own two defaultTest assertions.
    plain = load_suites(_layout(tmp_path / "plain")).suites
    assert found.suites.keys() == plain.keys()
    ceiling = A.Assertion(budget=A.Budget(max_total_tokens=40000))
    for name, suite in found.suites.items():
        expected = list(plain[name].assertions)
        assert list(suite.assertions) == [*expected[:2], ceiling, *expected[2:]]


def test_the_articles_token_ceiling_imports_as_a_budget(tmp_path: Path) -> None:
    # Verbatim: the config with only the article's ceiling appended converts whole.
    path = _layout(tmp_path, _with_appended(CEILING))
    [suite] = load_suites(path).suites.values()
    [budget] = [a for a in suite.assertions if a.WhichOneof("kind") == "budget"]
    assert budget == A.Assertion(budget=A.Budget(max_total_tokens=40000))
    assert suite.assertions[2] == budget


@pytest.mark.parametrize(
    ("edit", "budget"),
    [
        (("<= 40000", "< 40000"), A.Budget(max_total_tokens=39999)),
        (
            ("+ Number(s.attributes['gen_ai.usage.output_tokens'] ?? 0)", ""),
            A.Budget(max_input_tokens=40000),
        ),
        (
            ("+ Number(s.attributes['gen_ai.usage.input_tokens'] ?? 0)", ""),
            A.Budget(max_output_tokens=40000),
        ),
        (("?? 0)", "|| 0)"), A.Budget(max_total_tokens=40000)),
        (("const used", "let used"), A.Budget(max_total_tokens=40000)),
    ],
)
def test_token_ceiling_variants(edit: tuple[str, str], budget: A.Budget) -> None:
    [item] = yaml.safe_load(CEILING.replace(*edit))
    assert promptfoo.token_ceiling(item["value"]) == budget


@pytest.mark.parametrize(
    "edit",
    [
        # Other code, or the same sum used otherwise, stays unsupported.
        ("return used <= 40000", "return used <= 40000 || names"),
        ("return used <=", "return used >="),
        ("gen_ai.usage.output_tokens", "gen_ai.usage.input_tokens"),
        ("gen_ai.usage.output_tokens", "llm.token_count.completion"),
        ("context.trace.spans", "context.trace.spans.slice(1)"),
    ],
)
def test_other_javascript_stays_unsupported(edit: tuple[str, str]) -> None:
    [item] = yaml.safe_load(CEILING.replace(*edit))
    assert promptfoo.token_ceiling(item["value"]) is None
    conversion = promptfoo.convert([item])
    assert conversion.unsupported == [
        "assert[0]: type 'javascript' runs user code over promptfoo's spans; not supported (a "
        "trajgrade `expression` assertion can say many such rules)"
    ]
    # Negated, the ceiling is not a budget either.
    [verbatim] = yaml.safe_load(CEILING)
    negated = promptfoo.convert([{**verbatim, "type": "not-javascript"}])
    assert len(negated.unsupported) == 1


def test_file_references_that_match_nothing_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "promptfooconfig.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    with pytest.raises(InvalidSuiteError, match="matches no file"):
        load_suites(path)
    # Text given without a directory (base=None, as a server would) cannot point at files.
    with pytest.raises(SuiteFormatError, match="refers to files"):
        convert_all({"tests": ["file://evals/*.yaml"]}, "promptfoo", base=None)
    # A library caller's dict or text reads them relative to the working directory.
    with pytest.raises(InvalidSuiteError, match=r"matches no file \(relative to "):
        load_suites({"tests": ["file://no-such-dir/*.yaml"]})


def test_grade_cli_picks_each_traces_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _layout(tmp_path)
    other = tmp_path / "evals" / "helpdesk" / "refund.yaml"
    other.write_text(
        "- description: refund\n  assert:\n    - type: trajectory:tool-used\n      value: refund\n",
        encoding="utf-8",
    )
    runs = tmp_path / "runs.jsonl"
    lines = [
        seeds.trace(GOOD, "good") | {"metadata": {"test": NAME}},
        seeds.trace([("refund", {})], "refund") | {"metadata": {"test": "refund"}},
        seeds.trace(GOOD, "lost") | {"metadata": {"test": "nope"}},
        seeds.trace(BAD, "bad") | {"metadata": {"test": NAME}},
        {"id": "broken", "calls": [{"nme": "refund"}], "metadata": {"test": "refund"}},
    ]
    runs.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert main(["grade", "--suite", str(path), "--traces", str(runs)]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o.get("verdict") for o in out] == [
        "VERDICT_PASS",
        "VERDICT_PASS",
        None,
        "VERDICT_FAIL",
        None,
    ]
    # An item error inside one test's batch names the line of the file, not of the batch.
    assert out[4]["field"].startswith("traces[4]"), out[4]
    assert len(out[0]["results"]) == 5
    assert [r["name"] for r in out[1]["results"]] == [
        "no_forbidden_tool",
        "step_count",
        "tool_count:refund",
    ]
    assert out[2]["reason_code"] == "UNKNOWN_TEST"
    assert out[2]["field"] == "traces[2].metadata.test"
    assert "'refund'" in out[2]["message"]
    # --test grades every trace against one test's suite.
    assert main(["grade", "--suite", str(path), "--traces", str(runs), "--test", "refund"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o.get("verdict") for o in out] == [
        "VERDICT_FAIL",
        "VERDICT_PASS",
        "VERDICT_FAIL",
        "VERDICT_FAIL",
        None,
    ]


def test_grade_cli_skip_unsupported_lists_what_it_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The appended block without its ceiling, which converts (a `budget`, graded below).
    path = _layout(tmp_path, _with_appended(APPENDED[: APPENDED.index("    # Cost ceiling")]))
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(seeds.trace(GOOD)), encoding="utf-8")
    assert main(["grade", "--suite", str(path), "--trace", str(trace), "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["field"] == "defaultTest.assert[2]"
    assert len(error["problems"]) == 2
    argv = ["grade", "--suite", str(path), "--trace", str(trace), "--json", "--skip-unsupported"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["verdict"] == "VERDICT_PASS"
    left_out = [line for line in captured.err.splitlines() if "left out" in line]
    assert len(left_out) == 2
    assert "defaultTest.assert[3]: type 'javascript'" in left_out[1]


def test_grade_cli_one_trace_names_its_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _layout(tmp_path)
    (tmp_path / "evals" / "helpdesk" / "other.yaml").write_text(
        "- description: other\n  assert:\n    - type: trajectory:tool-used\n      value: x\n",
        encoding="utf-8",
    )
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(seeds.trace(GOOD) | {"metadata": {"test": NAME}}), encoding="utf-8")
    assert main(["grade", "--suite", str(path), "--trace", str(trace), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["results"]) == 5
    trace.write_text(json.dumps(seeds.trace(GOOD)), encoding="utf-8")
    assert main(["grade", "--suite", str(path), "--trace", str(trace), "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["field"] == "metadata.test"
    assert "'other'" in error["message"]


def test_unknown_keys_in_an_assertion_are_errors_or_listed(tmp_path: Path) -> None:
    # A typo of the article's `mode: exact` must not grade the write tool with partial matching.
    typo = TEST_FILE.replace("        mode: exact\n", "        mod: exact\n")
    assert typo != TEST_FILE
    path = tmp_path / "case.yaml"
    path.write_text(typo, encoding="utf-8")
    with pytest.raises(InvalidSuiteError) as raised:
        load_suites(path)
    assert raised.value.problems == [
        (
            "[0].assert[2].value.mod",
            "unknown key; expected name, pattern, tool, type, args, arguments, mode, defaults, "
            "ignore",
        )
    ]
    found = load_suites(path, allow_unsupported=True)
    assert found.skipped == ["[0].assert[2].value.mod: " + raised.value.problems[0][1]]
    # Left out whole: the draft call is not checked at all rather than checked loosely.
    assert [a.name for a in found.suites[NAME].assertions] == [
        "trajectory:tool-args-match:find_customer",
        "",
    ]
    # The same for a key of the assertion object, and of a sequence step.
    sequence = "    - type: trajectory:tool-sequence\n"
    transform = sequence + "      transform: output.trim()\n"
    for text, field in [
        (TEST_FILE.replace(sequence, transform), "[0].assert[1].transform"),
        (
            TEST_FILE.replace("- get_invoice", "- nme: get_invoice"),
            "[0].assert[1].value.steps[1].nme",
        ),
    ]:
        assert text != TEST_FILE
        path.write_text(text, encoding="utf-8")
        with pytest.raises(InvalidSuiteError) as raised:
            load_suites(path)
        assert [f for f, _ in raised.value.problems] == [field]
    # weight and metric of an assertion only feed promptfoo's score: accepted, same suite.
    write = "    - type: trajectory:tool-args-match\n      value:\n        name: create_credit"
    scored = write.replace("      value:", "      weight: 2\n      metric: writes\n      value:")
    assert write in TEST_FILE
    path.write_text(TEST_FILE.replace(write, scored), encoding="utf-8")
    plain = tmp_path / "plain.yaml"
    plain.write_text(TEST_FILE, encoding="utf-8")
    assert load_suites(path).suites == load_suites(plain).suites
