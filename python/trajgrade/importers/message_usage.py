"""Model calls (SPEC §10 `model_calls`) and user turns from logged API `usage` and messages."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from trajgrade.importers.report import INVALID_USAGE, ImportReport
from trajgrade.v1 import trace_pb2

# Input tokens: OpenAI Chat `prompt_tokens` and Responses `input_tokens` already include cached
# tokens; Anthropic's `input_tokens` does not, so its cache reads and writes are added (every
# token the model took in counts against an input budget).
_INPUT_KEYS = ("prompt_tokens", "input_tokens")
_ANTHROPIC_CACHE_KEYS = ("cache_creation_input_tokens", "cache_read_input_tokens")
_OUTPUT_KEYS = ("completion_tokens", "output_tokens")


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


@dataclass
class TurnTracker:
    """Turns of one conversation, in message order: each user message with text starts one.

    Calls and model calls take the current turn; before any user message, or in a log with
    none, the turn is 0 ("not recorded", read as turn 1).
    """

    report: ImportReport
    turns: list[trace_pb2.Turn] = field(default_factory=list)
    model_calls: list[trace_pb2.ModelCall] = field(default_factory=list)

    @property
    def current(self) -> int:
        return len(self.turns)

    def user_message(self, text: str) -> None:
        self.turns.append(trace_pb2.Turn(user_input=text))

    def answer(self, text: str) -> None:
        """The assistant's text: the current turn's answer so far."""
        if self.turns:
            self.turns[-1].final_answer = text

    def usage(self, usage: Any, model: Any, where: str) -> None:
        """One model call from a `usage` object (OpenAI Chat, Responses or Anthropic)."""
        if not isinstance(usage, dict):
            self.report.add(INVALID_USAGE, where, "usage is not an object")
            return
        counts = []
        for keys in (_INPUT_KEYS, _OUTPUT_KEYS):
            key = next((k for k in keys if k in usage), None)
            number = None if key is None else _count(usage[key])
            if key is None or number is None:
                shown = "missing" if key is None else repr(usage[key])
                self.report.add(INVALID_USAGE, f"{where}.usage", f"{'/'.join(keys)}: {shown}")
                return
            counts.append(number)
        for key in _ANTHROPIC_CACHE_KEYS:
            # Anthropic writes null for a cache it did not use.
            if usage.get(key) is not None:
                extra = _count(usage[key])
                if extra is None:
                    self.report.add(INVALID_USAGE, f"{where}.usage.{key}", repr(usage[key]))
                    return
                counts[0] += extra
        call = trace_pb2.ModelCall(
            model=model if isinstance(model, str) else "",
            input_tokens=counts[0],
            output_tokens=counts[1],
            turn=self.current,
        )
        # Some gateways (OpenRouter, LiteLLM) add the call's cost to the usage object.
        cost = usage.get("cost")
        if isinstance(cost, int | float | Decimal) and not isinstance(cost, bool):
            if math.isfinite(cost):
                call.cost = float(cost)
        elif cost is not None:
            self.report.add(INVALID_USAGE, f"{where}.usage.cost", repr(cost))
        self.model_calls.append(call)

    def fill(self, trace: trace_pb2.Trace, turn_of_calls: list[int]) -> None:
        """Put the turns, model calls and each call's turn on `trace`."""
        for call, turn in zip(trace.calls, turn_of_calls, strict=True):
            call.turn = turn
        trace.model_calls.extend(self.model_calls)
        trace.turns.extend(self.turns)
        self.report.model_calls += len(self.model_calls)
