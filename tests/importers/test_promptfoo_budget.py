"""The promptfoo article's token ceiling: its `budget` sums what its JavaScript sums.

The spans are real SDK output of the article's agent shape (tests/importers/otel_driver.py
`plain`: openai-v2 LLM spans with `gen_ai.usage.*`, the article's `tracedTool` tool spans).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from trajgrade import compile_suite, importers
from trajgrade.suite_formats import promptfoo
from trajgrade.v1 import result_pb2, suite_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite_formats"))
import seeds

CEILING = seeds.between(
    "promptfoo-trajectory-article.md",
    "# Cost ceiling from our own GenAI spans. 40k is an example: set it from",
    "promptfoo also ships a cost assertion",
)
[ARTICLE_ASSERTION] = yaml.safe_load(CEILING)


def _what_the_javascript_sums(otlp_json: Path) -> int:
    """The article's reduce over `context.trace.spans`, over every span of the file."""
    total = 0
    for line in otlp_json.read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for attribute in span.get("attributes", []):
                        if attribute["key"] in (
                            "gen_ai.usage.input_tokens",
                            "gen_ai.usage.output_tokens",
                        ):
                            total += int(attribute["value"]["intValue"])
    return total


def test_the_budget_counts_the_tokens_the_javascript_counts(article_spans: Path) -> None:
    assert promptfoo.token_ceiling(ARTICLE_ASSERTION["value"]) is not None
    [trace] = importers.read(article_spans)
    used = sum(m.input_tokens + m.output_tokens for m in trace.model_calls)
    assert used == _what_the_javascript_sums(article_spans) > 0


def _ceiling(limit: int) -> suite_pb2.Suite:
    # The article's assertion with its 40,000 replaced: the fake run is small.
    value = ARTICLE_ASSERTION["value"].replace("40000", str(limit))
    return promptfoo.convert([{"type": "javascript", "value": value}]).suite


def test_the_articles_ceiling_grades_as_a_budget(article_spans: Path) -> None:
    [trace] = importers.read(article_spans)
    used = _what_the_javascript_sums(article_spans)
    for limit, passed in ((used, True), (used - 1, False)):
        [result] = compile_suite(_ceiling(limit)).grade(trace).results
        assert result.name == "budget"
        assert (result.status == result_pb2.ASSERTION_STATUS_PASS) == passed
        if not passed:
            assert result.reason_code == "OVER_BUDGET"
            assert result.reason.startswith(f"total tokens {used:,} > {limit:,} over 2 model calls")


@pytest.mark.parametrize("limit", [0, 40000])
def test_the_ceiling_is_the_articles_number(limit: int) -> None:
    [assertion] = _ceiling(limit).assertions
    assert assertion.budget.max_total_tokens == limit
