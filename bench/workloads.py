"""Seeded, deterministic benchmark workloads: realistic 20-call traces and one mixed suite."""

from __future__ import annotations

import json
import random
from typing import Any

TOOLS = ["search_orders", "get_order", "check_refund_eligibility", "issue_refund", "send_email"]
CALLS_PER_TRACE = 20
ARGUMENT_BYTES = 200


def suite() -> dict[str, Any]:
    """tool_count glob, tool_call_args SUBSET + PARTIAL (nested), IN_ORDER steps, step_count."""
    return {
        "name": "bench",
        "assertions": [
            {"tool_count": {"glob": "get_*", "min": 1, "max": 20}},
            {
                "tool_call_args": {
                    "tool": "issue_refund",
                    "match": {
                        "mode": "MATCH_MODE_SUBSET",
                        "args_json": '{"currency": "USD", "amount_cents": 5000}',
                    },
                }
            },
            {
                "tool_call_args": {
                    "tool": "get_order",
                    "match": {
                        "mode": "MATCH_MODE_PARTIAL",
                        "args_json": '{"order": {"customer": {"tier": "gold"}, "items": [{}, {}]}}',
                    },
                }
            },
            {
                "tool_sequence": {
                    "steps": [
                        {"tool": "search_orders"},
                        {"tool": "check_refund_eligibility"},
                        {"tool": "issue_refund"},
                    ],
                    "mode": "SEQUENCE_MODE_IN_ORDER",
                }
            },
            {"step_count": {"max": 25}},
        ],
    }


def _arguments(rng: random.Random, tool: str) -> str:
    """About ARGUMENT_BYTES of JSON with nested objects, arrays, decimals and Unicode."""
    args: dict[str, Any] = {
        "order": {
            "id": f"ord-{rng.randrange(10**6):06d}",
            "customer": {
                "tier": rng.choice(["gold", "silver"]),
                "name": rng.choice(["Zoë", "Ana"]),
            },
            "items": [
                {"sku": f"s{rng.randrange(100)}", "qty": rng.randrange(1, 4)} for _ in range(2)
            ],
        },
        "currency": rng.choice(["USD", "USD", "EUR"]),
        "amount_cents": rng.choice([5000, 500, 5000.0, 2500]),
        "note": "",
    }
    if tool == "issue_refund" and rng.random() < 0.5:
        args["amount_cents"] = 5000
    text = json.dumps(args, ensure_ascii=False)
    pad = max(0, ARGUMENT_BYTES - len(text.encode()))
    args["note"] = "x" * pad
    return json.dumps(args, ensure_ascii=False)


def traces(n: int, seed: int = 1234) -> list[dict[str, Any]]:
    """`n` traces of CALLS_PER_TRACE calls each; the same seed gives the same traces."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        calls = []
        for _ in range(CALLS_PER_TRACE):
            tool = rng.choice(TOOLS)
            calls.append(
                {
                    "name": tool,
                    "arguments_json": _arguments(rng, tool),
                    "result": '{"ok": true, "total": 50.00}',
                }
            )
        out.append({"id": f"bench-{i}", "calls": calls, "final_answer": "Refunded 50.00 USD."})
    return out
