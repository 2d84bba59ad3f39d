"""Model calls (SPEC §10 `model_calls`) from the LLM spans of an OTLP trace group."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Token counts, first key present wins: the GenAI conventions (and their pre-1.27 names, still
# written by older instrumentations), then OpenInference's.
INPUT_TOKEN_KEYS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
)
OUTPUT_TOKEN_KEYS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
)
# A total is the sum of the two above: read (so not reported), never stored.
TOTAL_TOKEN_KEYS = ("gen_ai.usage.total_tokens", "llm.token_count.total")
# Cost of the call in the caller's currency: OpenInference's, and the `gen_ai.usage.cost` that
# several GenAI backends write (no GenAI convention defines one yet).
COST_KEYS = ("gen_ai.usage.cost", "llm.cost.total")
MODEL_KEYS = ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
USAGE_PREFIXES = ("gen_ai.usage.", "llm.token_count.", "llm.cost.")
# Operations of an LLM call in the GenAI conventions.
_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
READ_KEYS = frozenset(INPUT_TOKEN_KEYS + OUTPUT_TOKEN_KEYS + TOTAL_TOKEN_KEYS + COST_KEYS)


def carries_usage(attrs: dict[str, Any]) -> bool:
    """True when a span reports token counts (the promptfoo article sums exactly these)."""
    return any(key in attrs for key in INPUT_TOKEN_KEYS + OUTPUT_TOKEN_KEYS + TOTAL_TOKEN_KEYS)


def is_model_span(attrs: dict[str, Any]) -> bool:
    """An LLM call: a GenAI model operation, an OpenInference LLM span, or token counts."""
    return (
        attrs.get("gen_ai.operation.name") in _MODEL_OPERATIONS
        or attrs.get("openinference.span.kind") == "LLM"
        or carries_usage(attrs)
    )


@dataclass
class Usage:
    """What one LLM span says about its call; `problems` are (key, why) pairs to report."""

    model: str
    input_tokens: int
    output_tokens: int
    cost: float | None
    recorded: bool
    problems: list[tuple[str, str]]


def _count(value: Any) -> int | None:
    """A token count: a non-negative integer, also as an integral double or decimal text
    (JavaScript SDKs write numbers as doubles)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _first(attrs: dict[str, Any], keys: tuple[str, ...]) -> tuple[str, Any] | None:
    return next(((key, attrs[key]) for key in keys if key in attrs), None)


def read_usage(attrs: dict[str, Any]) -> Usage:
    """Model, token counts and cost of one LLM span."""
    problems: list[tuple[str, str]] = []
    counts = []
    for keys in (INPUT_TOKEN_KEYS, OUTPUT_TOKEN_KEYS):
        found = _first(attrs, keys)
        number = None if found is None else _count(found[1])
        if found is not None and number is None:
            problems.append((found[0], f"not a token count: {found[1]!r}"))
        counts.append(number)
    total = _first(attrs, TOTAL_TOKEN_KEYS)
    if total is not None and counts == [None, None]:
        problems.append((total[0], "a total without the input/output split it is the sum of"))
    cost: float | None = None
    found_cost = _first(attrs, COST_KEYS)
    if found_cost is not None:
        raw = found_cost[1]
        if isinstance(raw, int | float) and not isinstance(raw, bool) and math.isfinite(raw):
            cost = float(raw)
        else:
            problems.append((found_cost[0], f"not a finite cost: {raw!r}"))
    model = next((attrs[k] for k in MODEL_KEYS if isinstance(attrs.get(k), str)), "")
    return Usage(
        model=model,
        input_tokens=counts[0] or 0,
        output_tokens=counts[1] or 0,
        cost=cost,
        recorded=counts != [None, None],
        problems=problems,
    )
