"""The report's failing traces: every one counted, a capped list kept, calls for the first few.

Memory is bounded by the caps, not by the run: results are streamed once, and the inputs are
read only up to the last trace whose calls are embedded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from trajgrade.regrade.output import Row, output_format, read_rows, row_from_json
from trajgrade.regrade.source import (
    ItemsChunk,
    ReadFailure,
    SourceError,
    read_chunks,
    resolve_inputs,
)
from trajgrade.v1 import trace_pb2

# Failing traces listed on the page (each with its failing assertions, codes and positions).
DEFAULT_MAX_TRACES = 20_000
# Of those, the first ones that open to their calls.
DEFAULT_MAX_CALL_TRACES = 1_000
# Calls shown per trace, and characters kept of each argument, result and final answer.
MAX_CALLS = 50
EXCERPT = 200

# A JSONL result row that is not a clean pass: an assertion status other than PASS, or an
# `error` object. Quotes inside JSON strings are escaped, so these match keys and whole string
# values only: the other rows are skipped without a parse, and rows past the list's cap are
# counted without one.
_NOT_PASSING = re.compile(rb'"status"\s*:\s*"(?!ASSERTION_STATUS_PASS")|"error"\s*:\s*\{')
_VERDICT_PASS = re.compile(rb'"verdict"\s*:\s*"VERDICT_PASS"')


Failure: TypeAlias = tuple[str, str, str, list[int]]
"""One failing assertion of a trace: (name, reason code, reason, positions)."""


@dataclass
class FailingTraces:
    """What the page's failing-traces section embeds, plus the notes on what was capped."""

    total: int = 0  # traces with a hard failure, an item error or a soft failure
    soft_only: int = 0  # of those, traces whose verdict passed (soft failures only)
    traces: list[dict[str, Any]] = field(default_factory=list)
    assertions: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    max_traces: int = DEFAULT_MAX_TRACES
    max_call_traces: int = DEFAULT_MAX_CALL_TRACES
    with_calls: int = 0
    calls_note: str = ""
    _assertion_ids: dict[str, int] = field(default_factory=dict, repr=False)
    _code_ids: dict[str, int] = field(default_factory=dict, repr=False)

    def _intern(self, table: dict[str, int], values: list[str], value: str) -> int:
        found = table.get(value)
        if found is None:
            found = table[value] = len(values)
            values.append(value)
        return found

    def add(self, ordinal: int, row: Row) -> None:
        """Count one result row (ordinal = its 1-based place in the run); keep it while the
        list is not full."""
        if row["error"] is not None:
            error = row["error"]
            reason = f"{error['field']}: {error['message']}"
            failing: list[Failure] = [("(error)", error["reason_code"], reason, [])]
            verdict = "ERROR"
        else:
            failing = [
                (r["name"], r["reason_code"], r["reason"], list(r["positions"]))
                for r in row["results"]
                if r["status"] != "ASSERTION_STATUS_PASS"
            ]
            if not failing:
                return
            verdict = str(row["verdict"]).removeprefix("VERDICT_")
        self.add_entry(ordinal, row["trace_id"], verdict, failing)

    def add_entry(
        self,
        ordinal: int,
        trace_id: str,
        verdict: str,
        failing: Sequence[Failure],
    ) -> None:
        """Count one failing trace, (name, reason code, reason, positions) per failure."""
        self.total += 1
        self.soft_only += verdict == "PASS"
        if len(self.traces) >= self.max_traces:
            return
        self.traces.append(
            {
                "n": ordinal,
                "id": trace_id,
                "v": verdict,
                # soft-only: the verdict passed, only soft assertions failed.
                "s": verdict == "PASS",
                "f": [
                    [
                        self._intern(self._assertion_ids, self.assertions, name),
                        self._intern(self._code_ids, self.codes, code),
                        reason,
                        positions,
                    ]
                    for name, code, reason, positions in failing
                ],
            }
        )

    @property
    def full(self) -> bool:
        """The list holds max_traces traces: later ones are only counted."""
        return len(self.traces) >= self.max_traces

    @property
    def truncated(self) -> bool:
        return self.total > len(self.traces)

    def to_json(self) -> dict[str, Any]:
        """The page's data: interned assertion names and codes, then the traces."""
        return {
            "total": self.total,
            "soft_only": self.soft_only,
            "max_traces": self.max_traces,
            "with_calls": self.with_calls,
            "max_call_traces": self.max_call_traces,
            "calls_note": self.calls_note,
            "assertions": self.assertions,
            "codes": self.codes,
            "traces": self.traces,
        }


def _count_rows(found: FailingTraces, path: str) -> None:
    """Count every failing row of a results file into `found`, parsing only those listed."""
    if output_format(path) != "jsonl":
        for ordinal, row in enumerate(read_rows(path), start=1):
            found.add(ordinal, row)
        return
    with open(path, "rb") as handle:
        ordinal = 0
        for line in handle:
            if not line.strip():
                continue
            ordinal += 1
            if not _NOT_PASSING.search(line):
                continue
            if found.full:
                found.total += 1
                found.soft_only += _VERDICT_PASS.search(line) is not None
            else:
                found.add(ordinal, row_from_json(json.loads(line)))


def _excerpt(text: str | None) -> str | None:
    if text is None:
        return None
    return text if len(text) <= EXCERPT else text[:EXCERPT] + f"… (+{len(text) - EXCERPT:,} chars)"


def _calls(item: bytes | ReadFailure) -> dict[str, Any]:
    """A trace's calls as the page shows them (name, arguments, result, error flag)."""
    if isinstance(item, ReadFailure):
        return {"c": [], "cn": f"not a valid trace: {item.message}"}
    trace = trace_pb2.Trace.FromString(item)
    calls = [
        [
            c.name,
            _excerpt(c.arguments_json) if c.HasField("arguments_json") else None,
            _excerpt(c.result) if c.HasField("result") else None,
            c.error,
        ]
        for c in trace.calls[:MAX_CALLS]
    ]
    shown: dict[str, Any] = {"c": calls, "fa": _excerpt(trace.final_answer)}
    if len(trace.calls) > MAX_CALLS:
        shown["cn"] = f"first {MAX_CALLS} of {len(trace.calls):,} calls shown"
    return shown


def _item_id(item: bytes | ReadFailure) -> str:
    if isinstance(item, ReadFailure):
        return item.trace_id
    return trace_pb2.Trace.FromString(item).id


def _attach_calls(found: FailingTraces, inputs: Sequence[str], fmt: str) -> None:
    """Read the inputs up to the last trace that gets its calls, and attach them."""
    wanted = {t["n"]: t for t in found.traces[: found.max_call_traces]}
    if not wanted:
        return
    if not inputs:
        found.calls_note = "the run's inputs are not known: calls are not shown"
        return
    last, attached, ordinal = max(wanted), 0, 0
    try:
        for chunk in read_chunks(resolve_inputs(inputs, fmt), 512):
            assert isinstance(chunk, ItemsChunk)  # raw_input is off
            for item in chunk.items:
                ordinal += 1
                trace = wanted.get(ordinal)
                if trace is None:
                    continue
                if _item_id(item) != trace["id"]:
                    for t in wanted.values():
                        t.pop("c", None)
                    found.calls_note = (
                        f"input trace {ordinal} is {_item_id(item)!r}, the results say "
                        f"{trace['id']!r}: the inputs changed since the run, calls are not shown"
                    )
                    return
                trace.update(_calls(item))
                attached += 1
            if ordinal >= last:
                break
    except (SourceError, OSError, ValueError) as exc:
        found.calls_note = f"the inputs could not be read again ({exc}): calls are not shown"
        return
    found.with_calls = attached
    if attached < len(wanted):
        found.calls_note = f"the inputs hold fewer traces than the results: {attached} shown"
    elif found.total > attached:
        found.calls_note = (
            f"calls are embedded for the first {attached:,} of {found.total:,} failing traces "
            f"(cap {found.max_call_traces:,}, --report-calls)"
        )


def collect(
    results: str,
    inputs: Sequence[str] = (),
    input_format: str = "auto",
    *,
    max_traces: int = DEFAULT_MAX_TRACES,
    max_call_traces: int = DEFAULT_MAX_CALL_TRACES,
) -> FailingTraces:
    """Every failing trace of a results file counted, the first `max_traces` listed, and the
    first `max_call_traces` of those with their calls read back from `inputs`."""
    if max_traces < 0 or max_call_traces < 0:
        raise ValueError("report caps must be at least 0")
    found = FailingTraces(max_traces=max_traces, max_call_traces=min(max_call_traces, max_traces))
    _count_rows(found, results)
    _attach_calls(found, inputs, input_format)
    return found
