"""ImportReport: what an importer could not map, counted by reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# Stable reason codes (grow only; documented in docs/trace-formats.md).
INVALID_RECORD = "INVALID_RECORD"
UNRECOGNISED_RECORD = "UNRECOGNISED_RECORD"
TOOL_CALL_WITHOUT_NAME = "TOOL_CALL_WITHOUT_NAME"
UNSUPPORTED_TOOL_CALL = "UNSUPPORTED_TOOL_CALL"
TOOL_RESULT_WITHOUT_CALL = "TOOL_RESULT_WITHOUT_CALL"
DUPLICATE_TOOL_RESULT = "DUPLICATE_TOOL_RESULT"
NON_TEXT_RESULT_CONTENT = "NON_TEXT_RESULT_CONTENT"
NON_TEXT_ANSWER_CONTENT = "NON_TEXT_ANSWER_CONTENT"
UNKNOWN_ITEM_TYPE = "UNKNOWN_ITEM_TYPE"
UNKNOWN_COLUMN = "UNKNOWN_COLUMN"
INVALID_ATTRIBUTE_JSON = "INVALID_ATTRIBUTE_JSON"
MISSING_GROUP_ATTRIBUTE = "MISSING_GROUP_ATTRIBUTE"
LOG_WITHOUT_TRACE = "LOG_WITHOUT_TRACE"
CONFLICTING_ID = "CONFLICTING_ID"
UNRECOGNISED_TOOL_CALL = "UNRECOGNISED_TOOL_CALL"
UNMAPPED_ATTRIBUTE = "UNMAPPED_ATTRIBUTE"
MODEL_CALL_WITHOUT_USAGE = "MODEL_CALL_WITHOUT_USAGE"
INVALID_USAGE = "INVALID_USAGE"

# How many example locations to keep per reason: enough to find the problem, bounded memory.
_EXAMPLES_PER_REASON = 5


@dataclass
class ImportReport:
    """Counts of what could not be mapped (by reason), plus totals of what was produced.

    Every importer fills one instead of dropping input silently. `where` strings name the
    file and record (`runs.json#3 message 7`) so a person can find the input.
    """

    traces: int = 0
    calls: int = 0
    model_calls: int = 0
    merged_duplicates: int = 0
    # Calls kept apart although they share a tool-call id (a model reusing ids across turns).
    id_collisions: int = 0
    unmapped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, where: str, detail: str = "") -> None:
        """Count one input element of kind `reason` that could not be mapped."""
        self.unmapped[reason] += 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < _EXAMPLES_PER_REASON:
            shown.append(f"{where}: {detail}" if detail else where)

    def merge(self, reason: str, count: int, examples: list[str]) -> None:
        """Add `count` elements of kind `reason` counted elsewhere (the core's mapping), with
        the first of their examples: as if each had been `add`ed here."""
        self.unmapped[reason] += count
        shown = self.examples.setdefault(reason, [])
        shown.extend(examples[: max(0, _EXAMPLES_PER_REASON - len(shown))])

    @property
    def total_unmapped(self) -> int:
        """Number of input elements that could not be mapped."""
        return sum(self.unmapped.values())

    def summary(self) -> str:
        """Human summary, one line per reason, for stderr."""
        lines = [
            f"imported {self.traces} trace(s) with {self.calls} tool call(s)"
            + (f" and {self.model_calls} model call(s)" if self.model_calls else "")
            + (
                f"; merged {self.merged_duplicates} duplicate report(s) of the same call"
                if self.merged_duplicates
                else ""
            )
            + (
                f"; kept {self.id_collisions} call(s) apart that reuse another call's id"
                if self.id_collisions
                else ""
            )
        ]
        if not self.unmapped and self.traces and not self.calls:
            lines.append("no tool call found in the input")
        elif not self.unmapped:
            lines.append("everything in the input was mapped")
        for reason in sorted(self.unmapped):
            lines.append(f"not mapped: {reason} x{self.unmapped[reason]}")
            lines.extend(f"  e.g. {example}" for example in self.examples.get(reason, []))
        return "\n".join(lines)
