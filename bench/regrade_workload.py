"""Seeded synthetic workload for the regrade bench and tests: an airline-style suite + traces."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajgrade._core import bench
from trajgrade.regrade import arrowcols

if TYPE_CHECKING:
    import pyarrow as pa
    from trajgrade._core import CompiledSuite

TOOLS = (
    "get_user",
    "search_flights",
    "get_reservation",
    "check_refund_eligibility",
    "issue_refund",
    "update_reservation",
    "send_email",
    "transfer_to_human",
)

# Native protobuf JSON of a trajgrade.v1.Suite: a mix of hard and soft assertion kinds.
SUITE: dict[str, Any] = {
    "name": "airline-refunds",
    "assertions": [
        {"tool_called": {"tool": "get_user"}},
        {
            "tool_call_args": {
                "tool": "issue_refund",
                "match": {"mode": "MATCH_MODE_SUBSET", "args_json": '{"currency":"USD"}'},
            }
        },
        {
            "tool_sequence": {
                "steps": [
                    {"tool": "get_reservation"},
                    {"tool": "check_refund_eligibility"},
                    {"tool": "issue_refund"},
                ],
            }
        },
        {
            "allowed_tools": {
                "tools": [
                    "get_*",
                    "search_*",
                    "check_*",
                    "issue_refund",
                    "update_reservation",
                    "send_email",
                ]
            }
        },
        {"forbidden_tools": {"tools": ["transfer_to_human"]}},
        {"tool_count": {"tool": "search_flights", "max": 3}},
        {"order": {"before": "check_refund_eligibility", "after": "issue_refund"}},
        {"no_repeated_calls": {}},
        {"efficiency": {"reference_steps": 5, "max_ratio": 1.5}},
        {"grounding": {"numbers": True}},
    ],
}


def _call(rng: random.Random, name: str, position: int) -> dict[str, Any]:
    args: dict[str, Any]
    if name == "issue_refund":
        args = {
            "reservation_id": f"R{rng.randrange(10**6):06d}",
            "amount_cents": rng.choice((500, 5000, 12500)),
            "currency": rng.choice(("USD", "USD", "USD", "EUR")),
        }
    elif name == "search_flights":
        args = {
            "origin": rng.choice(("SFO", "JFK", "LHR")),
            "destination": "CDG",
            "date": f"2025-0{rng.randrange(1, 10)}-1{rng.randrange(10)}",
        }
    else:
        args = {"user_id": f"u{rng.randrange(1000)}", "n": rng.randrange(5)}
    call: dict[str, Any] = {"name": name, "id": f"c{position}"}
    if rng.random() > 0.02:  # a few unrecorded arguments
        call["arguments_json"] = json.dumps(args, separators=(",", ":"))
    call["result"] = json.dumps(
        {"ok": True, "amount_cents": args.get("amount_cents", 0), "status": "confirmed"}
    )
    if rng.random() < 0.03:
        call["error"] = True
    return call


def trace_dict(rng: random.Random, index: int) -> dict[str, Any]:
    """One trace in the protobuf JSON mapping of trajgrade.v1.Trace."""
    happy = ["get_user", "get_reservation", "check_refund_eligibility", "issue_refund"]
    names = list(happy) if rng.random() < 0.6 else rng.sample(TOOLS, rng.randrange(1, 7))
    for _ in range(rng.randrange(0, 4)):
        names.insert(rng.randrange(len(names) + 1), rng.choice(TOOLS))
    calls = [_call(rng, name, i + 1) for i, name in enumerate(names)]
    amount = rng.choice((500, 5000, 12500, 999))
    return {
        "id": f"t{index:08d}",
        "calls": calls,
        "final_answer": f"I refunded {amount} cents to your card.",
        "metadata": {"model": rng.choice(("a", "b")), "shard": str(index % 7)},
    }


def iter_trace_dicts(n: int, seed: int = 7) -> Iterator[dict[str, Any]]:
    """n seeded traces; the same (n, seed) always gives the same traces."""
    rng = random.Random(seed)
    for index in range(n):
        yield trace_dict(rng, index)


def write_suite(path: Path) -> Path:
    """The suite as native protobuf JSON."""
    path.write_text(json.dumps(SUITE, indent=1), encoding="utf-8")
    return path


def write_jsonl(path: Path, n: int, seed: int = 7) -> Path:
    """n traces as JSONL of native protobuf JSON, one trace per line."""
    with path.open("w", encoding="utf-8") as handle:
        for trace in iter_trace_dicts(n, seed):
            handle.write(json.dumps(trace, separators=(",", ":")))
            handle.write("\n")
    return path


def arrow_rows(suite: CompiledSuite, batch: pa.RecordBatch) -> list[bytes] | None:
    """The batch's regrade rows graded from its Arrow buffers, one bytes a row (what
    Grader.grade_arrow_block joins), or None for a layout arrowcols does not take."""
    columns = arrowcols.columns(batch)
    if columns is None:
        return None
    return bench.grade_arrow_traces_to_json(suite, batch.num_rows, columns)
