"""Every JSON example of the Orbit trajectory-grading doc, imported verbatim and graded as it says.

The blocks are read from spec/seeds/orbit-trajectory-grading.md at test time, so a change of the
doc changes the test.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import seeds
from trajgrade import compile_suite
from trajgrade.importers import exact_json
from trajgrade.suite_formats import SuiteFormatError, detect, detect_and_convert
from trajgrade.v1 import result_pb2

DOC = "orbit-trajectory-grading.md"
BLOCKS = seeds.json_blocks(DOC)

REFUND_OK = ("issue_refund", {"order_id": "ord_42", "amount_cents": 5000, "note": "dup"})
REFUND_500 = ("issue_refund", {"order_id": "ord_42", "amount_cents": 500})
LOOKUP = ("lookup_account", {"customer_id": "cus_1"})
ELIGIBLE = ("check_refund_eligibility", {"order_id": "ord_42"})
LOG = ("log_event", {"event": "account_viewed"})

# (block index, calls, result name, passes, reason code, words the reason must contain)
Case = tuple[int, list[tuple[str, dict[str, Any]]], str, bool, str, tuple[str, ...]]
CASES: list[Case] = [
    # §3 Argument match: subset ignores extra keys, a wrong amount names the difference.
    (0, [LOOKUP, REFUND_OK], "tool_call_args:issue_refund", True, "", ()),
    (
        0,
        [LOOKUP, REFUND_500],
        "tool_call_args:issue_refund",
        False,
        "NO_MATCHING_CALL",
        ("no call to issue_refund matched the expected arguments", "amount_cents", "5000", "500"),
    ),
    (0, [LOOKUP], "tool_call_args:issue_refund", False, "TOOL_NOT_CALLED", ("issue_refund",)),
    # call_index 2 with a case-insensitive regex over the JSON text of the input.
    (
        1,
        [("kb_query", {"q": "shipping"}), ("kb_query", {"q": "EU Refund Policy"})],
        "tool_call_args:kb_query#2",
        True,
        "",
        (),
    ),
    (
        1,
        [("kb_query", {"q": "refund policy"}), ("kb_query", {"q": "shipping"})],
        "tool_call_args:kb_query#2",
        False,
        "NO_MATCHING_CALL",
        ("kb_query",),
    ),
    (
        1,
        [("kb_query", {"q": "refund policy"})],
        "tool_call_args:kb_query#2",
        False,
        "CALL_INDEX_OUT_OF_RANGE",
        ("kb_query",),
    ),
    # Order: an ordered subsequence, other calls may interleave.
    (2, [LOOKUP, LOG, ELIGIBLE, ("kb_query", {}), REFUND_500], "tool_sequence", True, "", ()),
    (
        2,
        [LOOKUP, REFUND_OK, ELIGIBLE],
        "tool_sequence",
        False,
        "SEQUENCE_INCOMPLETE",
        ("matched 2 of 3 steps", "issue_refund"),
    ),
    # A step's match keeps its mode (subset): the 500 refund does not satisfy the step.
    (3, [LOOKUP, LOG, REFUND_OK], "tool_sequence", True, "", ()),
    (
        3,
        [LOOKUP, REFUND_500],
        "tool_sequence",
        False,
        "SEQUENCE_INCOMPLETE",
        ("matched 1 of 2 steps", "issue_refund"),
    ),
    # Forbidden call: the result names the tool.
    (4, [LOOKUP, ELIGIBLE, REFUND_OK], "no_unexpected_tool", True, "", ()),
    (
        4,
        [LOOKUP, ("transfer_to_human", {}), REFUND_OK],
        "no_unexpected_tool",
        False,
        "UNEXPECTED_TOOL",
        ("transfer_to_human", "call 2"),
    ),
    # §8 worked evals.
    (7, [REFUND_OK], "tool_call_args:issue_refund", True, "", ()),
    (
        7,
        [REFUND_500],
        "tool_call_args:issue_refund",
        False,
        "NO_MATCHING_CALL",
        ("no call to issue_refund matched the expected arguments",),
    ),
    (
        8,
        [LOOKUP, ("run_diagnostics", {}), ("kb_query", {}), ("create_ticket", {})],
        "no_unexpected_tool",
        True,
        "",
        (),
    ),
    (
        8,
        [LOOKUP, ("transfer_to_human", {}), ("run_diagnostics", {})],
        "no_unexpected_tool",
        False,
        "UNEXPECTED_TOOL",
        ("transfer_to_human",),
    ),
    (
        9,
        [("identify_customer", {}), ("fetch_case_context", {}), ("transfer_to_agent", {})],
        "tool_sequence",
        True,
        "",
        (),
    ),
    (
        9,
        [("identify_customer", {}), ("transfer_to_agent", {}), ("fetch_case_context", {})],
        "tool_sequence",
        False,
        "SEQUENCE_INCOMPLETE",
        ("matched 2 of 3 steps", "transfer_to_agent"),
    ),
]


def _grade(block: str, calls: list[tuple[str, dict[str, Any]]]) -> result_pb2.AssertionResult:
    suite = detect_and_convert(exact_json.loads(block))
    result = compile_suite(suite).grade(seeds.trace(calls))
    [only] = result.results
    return only


def test_the_doc_has_the_examples_this_test_knows() -> None:
    # Ten blocks: seven suites, a result, a trace, and the three worked evals (one repeats §3).
    assert len(BLOCKS) == 10
    parsed = [exact_json.loads(b) for b in BLOCKS]
    suites = [i for i, b in enumerate(parsed) if isinstance(b, dict) and "name" not in b]
    assert suites == [0, 1, 2, 3, 4, 7, 8, 9]
    assert {detect(parsed[i]) for i in suites} == {"orbit"}


@pytest.mark.parametrize(
    "case", CASES, ids=[f"block{c[0]}-{'pass' if c[3] else c[4]}" for c in CASES]
)
def test_orbit_example_grades_as_the_doc_says(case: Case) -> None:
    block, calls, name, passes, code, words = case
    result = _grade(BLOCKS[block], calls)
    assert result.name == name
    expected = result_pb2.ASSERTION_STATUS_PASS if passes else result_pb2.ASSERTION_STATUS_FAIL
    assert result.status == expected, result.reason
    assert result.reason_code == code
    assert (result.reason == "") is passes
    for word in words:
        assert word in result.reason


def test_result_fields_are_the_docs() -> None:
    # §5 shows the result of a passing argument match: same name, status and empty reason.
    shown = json.loads(BLOCKS[5])
    result = _grade(BLOCKS[0], [REFUND_OK])
    status = result_pb2.AssertionStatus.Name(result.status).removeprefix("ASSERTION_STATUS_")
    assert {"name": result.name, "status": status.lower(), "reason": result.reason} == shown


def test_interleaved_trace_passes_the_sequence() -> None:
    # §6: the doc's own trace passes [lookup_account, issue_refund] despite the calls between.
    doc_trace = json.loads(BLOCKS[6])
    calls = [(c["tool"], c["input"]) for c in doc_trace]
    sequence = {"expected_tool_sequence": [{"tool": "lookup_account"}, {"tool": "issue_refund"}]}
    result = _grade(json.dumps(sequence), calls)
    assert result.status == result_pb2.ASSERTION_STATUS_PASS
    assert list(result.positions) == [1, 4]
    # ... and the §3 refund rule fails it: the traced refund has no amount.
    assert _grade(BLOCKS[0], calls).reason_code == "NO_MATCHING_CALL"


def test_flat_form_means_the_same_as_nested() -> None:
    nested = detect_and_convert(exact_json.loads(BLOCKS[1]))
    flat = detect_and_convert(
        {
            "tool_call_args": [
                {"tool": "kb_query", "call_index": 2, "mode": "regex", "pattern": "refund policy"}
                | {"flags": "i"}
            ]
        }
    )
    assert flat == nested


def _problems(obj: dict[str, Any], **options: Any) -> list[str]:
    with pytest.raises(SuiteFormatError) as raised:
        detect_and_convert(obj, **options)
    return raised.value.problems


def test_bad_values_name_their_source_path() -> None:
    example = exact_json.loads(BLOCKS[0])
    example["tool_call_args"][0]["match"]["mode"] = "subst"
    assert _problems(example) == [
        "tool_call_args[0].match.mode: unknown mode 'subst'; expected exact, subset, regex"
    ]
    # Still an error when unsupported parts may be skipped: the value has no meaning.
    assert _problems(example, allow_unsupported=True)[0].startswith("tool_call_args[0].match.mode")
    step = exact_json.loads(BLOCKS[3])
    del step["expected_tool_sequence"][1]["match"]["args"]
    assert _problems(step) == [
        "expected_tool_sequence[1].match.args: mode subset needs the expected args"
    ]
    assert _problems({"tool_call_args": [{"tool": "f", "call_index": 0, "args": {}}]}) == [
        "tool_call_args[0].call_index: must be a 1-based integer, got 0"
    ]
    assert _problems({"tool_call_args": [{"tool": "f", "match": {"mode": "regex"}}]}) == [
        "tool_call_args[0].match.pattern: mode regex needs a pattern string"
    ]
    both = {"tool_call_args": [{"tool": "f", "mode": "exact", "match": {"mode": "exact"}}]}
    assert "not both" in _problems(both)[0]


def test_unknown_keys_are_errors_or_listed_and_left_out() -> None:
    example = exact_json.loads(BLOCKS[1])
    example["tool_call_args"][0]["call_indx"] = 3
    example["min_pass_rate"] = 0.9
    example["allowed_tools"] = ["kb_query"]
    problems = _problems(example)
    assert problems == [
        "min_pass_rate: not an Orbit trajectory key (expected one of tool_call_args, "
        "expected_tool_sequence, allowed_tools, expected_tool_calls, name, description)",
        "tool_call_args[0].call_indx: unknown key; expected tool, match, call_index, quantifier "
        "(left out)",
    ]
    # Allowed: the entry with the unknown key is left out whole (never a looser check).
    suite = detect_and_convert(example, allow_unsupported=True)
    assert [a.WhichOneof("kind") for a in suite.assertions] == ["allowed_tools"]
    nested = exact_json.loads(BLOCKS[0])
    nested["tool_call_args"][0]["match"]["flgs"] = "i"
    assert _problems(nested)[0].startswith("tool_call_args[0].match.flgs: unknown key")
