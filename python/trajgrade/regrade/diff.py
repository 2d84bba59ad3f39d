"""Run diffs: which traces flipped verdict and which assertions changed between two result files."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table

from trajgrade.regrade.output import Row, read_rows

# Flip details kept; the counts are always complete.
DEFAULT_MAX_FLIPS = 1000


def _verdict(row: Row) -> str:
    return "ERROR" if row["error"] is not None else str(row["verdict"]).removeprefix("VERDICT_")


def _statuses(row: Row) -> dict[str, str]:
    return {r["name"]: r["status"].removeprefix("ASSERTION_STATUS_") for r in row["results"] or []}


@dataclass
class AssertionChange:
    """How one assertion moved between the runs, over the traces present in both."""

    old_passed: int = 0
    new_passed: int = 0
    old_total: int = 0
    new_total: int = 0
    pass_to_fail: int = 0
    fail_to_pass: int = 0

    @property
    def old_rate(self) -> float | None:
        """Pass rate in the old run; None when the assertion is not in it (added)."""
        return self.old_passed / self.old_total if self.old_total else None

    @property
    def new_rate(self) -> float | None:
        """Pass rate in the new run; None when the assertion is not in it (removed)."""
        return self.new_passed / self.new_total if self.new_total else None

    @property
    def status(self) -> str:
        """added, removed (present in one run only) or kept."""
        if not self.old_total:
            return "added"
        return "removed" if not self.new_total else "kept"

    @property
    def delta(self) -> float | None:
        """new_rate - old_rate, None unless the assertion is in both runs."""
        if self.old_rate is None or self.new_rate is None:
            return None
        return self.new_rate - self.old_rate

    def rates_text(self) -> tuple[str, str, str]:
        """(old, new, Δ) as shown in the table and the report: an assertion in one run only
        reads "added"/"removed", never as a 0% pass rate."""
        old = "—" if self.old_rate is None else f"{self.old_rate:.1%}"
        new = "—" if self.new_rate is None else f"{self.new_rate:.1%}"
        delta = self.status if self.delta is None else f"{self.delta:+.1%}"
        return old, new, delta


@dataclass
class RunDiff:
    """The comparison of two result files, keyed by (trace_id, occurrence)."""

    old_traces: int = 0
    new_traces: int = 0
    common: int = 0
    only_old: int = 0
    only_new: int = 0
    flip_counts: dict[str, int] = field(default_factory=dict)  # "PASS->FAIL": n
    flips: list[dict[str, Any]] = field(default_factory=list)
    assertions: dict[str, AssertionChange] = field(default_factory=dict)
    max_flips: int = DEFAULT_MAX_FLIPS

    @property
    def flipped(self) -> int:
        return sum(self.flip_counts.values())

    def share(self, count: int) -> float:
        """count as a fraction of the traces in both runs (0 when there are none)."""
        return count / self.common if self.common else 0.0

    def to_json(self) -> dict[str, Any]:
        """The --json document."""
        return {
            "old_traces": self.old_traces,
            "new_traces": self.new_traces,
            "common": self.common,
            "only_old": self.only_old,
            "only_new": self.only_new,
            "flipped": self.flipped,
            "flipped_share": self.share(self.flipped),
            "flip_counts": dict(sorted(self.flip_counts.items())),
            "flip_shares": {k: self.share(n) for k, n in sorted(self.flip_counts.items())},
            "flips": self.flips,
            "flips_truncated": self.flipped > len(self.flips),
            "assertions": {
                name: {
                    "status": c.status,
                    "old_pass_rate": c.old_rate,
                    "new_pass_rate": c.new_rate,
                    "delta": c.delta,
                    "old_passed": c.old_passed,
                    "old_total": c.old_total,
                    "new_passed": c.new_passed,
                    "new_total": c.new_total,
                    "pass_to_fail": c.pass_to_fail,
                    "fail_to_pass": c.fail_to_pass,
                }
                for name, c in self.assertions.items()
            },
        }

    def renderable(self) -> Group:
        """Rich tables: assertion changes, then verdict flips."""
        head = Table(
            title=f"{self.common} traces in both runs ({self.only_old} only in old, "
            f"{self.only_new} only in new); {self.flipped} flipped verdict",
            title_justify="left",
        )
        # Names fold rather than lose their end (the tool) to an ellipsis on a narrow terminal.
        head.add_column("assertion", overflow="fold")
        for label in ("old pass", "new pass", "Δ", "pass→fail", "fail→pass"):
            head.add_column(label, justify="right", no_wrap=True)
        for name, c in self.assertions.items():
            old, new, delta = c.rates_text()
            if c.delta is None:
                style = "cyan"
            else:
                style = "red" if c.delta < 0 else ("green" if c.delta > 0 else "")
            head.add_row(
                name,
                old,
                new,
                f"[{style}]{delta}[/{style}]" if style else delta,
                str(c.pass_to_fail),
                str(c.fail_to_pass),
            )
        counts = Table(title="verdict flips by transition", title_justify="left")
        counts.add_column("old → new")
        counts.add_column("traces", justify="right")
        counts.add_column(f"% of {self.common} in both", justify="right")
        for transition, n in sorted(self.flip_counts.items(), key=lambda kv: (-kv[1], kv[0])):
            counts.add_row(transition.replace("->", " → "), str(n), f"{self.share(n):.1%}")
        shown = len(self.flips)
        more = f" (first {shown} of {self.flipped})" if self.flipped > shown else ""
        flips = Table(title=f"verdict flips{more}", title_justify="left")
        flips.add_column("trace")
        flips.add_column("old → new")
        flips.add_column("assertions changed")
        for flip in self.flips:
            flips.add_row(
                flip["trace_id"],
                f"{flip['old']} → {flip['new']}",
                ", ".join(f"{c['name']} {c['old']}→{c['new']}" for c in flip["changed"]),
            )
        return Group(head, counts, flips)


def _keyed(rows: Iterator[Row]) -> Iterator[tuple[tuple[str, int], Row]]:
    seen: dict[str, int] = {}
    for row in rows:
        n = seen.get(row["trace_id"], 0)
        seen[row["trace_id"]] = n + 1
        yield (row["trace_id"], n), row


def diff_rows(
    old: Iterator[Row], new: Iterator[Row], *, max_flips: int = DEFAULT_MAX_FLIPS
) -> RunDiff:
    """Compare two runs; the old run is indexed compactly, the new one streamed."""
    result = RunDiff(max_flips=max_flips)
    index: dict[tuple[str, int], tuple[str, dict[str, str]]] = {}
    for key, row in _keyed(old):
        result.old_traces += 1
        index[key] = (_verdict(row), _statuses(row))
    for key, row in _keyed(new):
        result.new_traces += 1
        found = index.pop(key, None)
        if found is None:
            result.only_new += 1
            continue
        result.common += 1
        old_verdict, old_status = found
        new_verdict, new_status = _verdict(row), _statuses(row)
        changed = []
        for name in {**old_status, **new_status}:
            change = result.assertions.get(name)
            if change is None:
                change = result.assertions[name] = AssertionChange()
            before, after = old_status.get(name), new_status.get(name)
            if before is not None:
                change.old_total += 1
                change.old_passed += before == "PASS"
            if after is not None:
                change.new_total += 1
                change.new_passed += after == "PASS"
            if before != after:
                change.pass_to_fail += before == "PASS" and after == "FAIL"
                change.fail_to_pass += before == "FAIL" and after == "PASS"
                changed.append({"name": name, "old": before or "-", "new": after or "-"})
        if old_verdict != new_verdict:
            transition = f"{old_verdict}->{new_verdict}"
            result.flip_counts[transition] = result.flip_counts.get(transition, 0) + 1
            if len(result.flips) < max_flips:
                result.flips.append(
                    {"trace_id": key[0], "old": old_verdict, "new": new_verdict, "changed": changed}
                )
    result.only_old = len(index)
    return result


def diff_files(old: str, new: str, *, max_flips: int = DEFAULT_MAX_FLIPS) -> RunDiff:
    """Compare two result files (JSONL or Parquet, in any mix)."""
    return diff_rows(read_rows(old), read_rows(new), max_flips=max_flips)
