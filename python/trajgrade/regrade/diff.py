"""Run diffs: which traces flipped verdict and which assertions changed between two result files."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table

from trajgrade.regrade.output import Row, read_rows
from trajgrade.regrade.summary import SCORE_UNITS, score_units

# Flip details kept; the counts are always complete.
DEFAULT_MAX_FLIPS = 1000


def _verdict(row: Row) -> str:
    return "ERROR" if row["error"] is not None else str(row["verdict"]).removeprefix("VERDICT_")


def _statuses(row: Row) -> dict[str, tuple[str, int]]:
    """Each result's status and score (in units of 0.0001), by name."""
    return {
        r["name"]: (r["status"].removeprefix("ASSERTION_STATUS_"), score_units(r["score"]))
        for r in row["results"] or []
    }


def _mean_units(row: Row) -> int | None:
    return None if row["error"] is not None else score_units(row["mean_score"])


@dataclass
class AssertionChange:
    """How one assertion moved between the runs, over the traces present in both."""

    old_passed: int = 0
    new_passed: int = 0
    old_total: int = 0
    new_total: int = 0
    pass_to_fail: int = 0
    fail_to_pass: int = 0
    # Score sums (units of 0.0001, SPEC §13) and how many traces' scores moved.
    old_score_units: int = 0
    new_score_units: int = 0
    score_down: int = 0
    score_up: int = 0

    @property
    def old_score(self) -> float | None:
        """Mean score in the old run; None when the assertion is not in it."""
        return self.old_score_units / SCORE_UNITS / self.old_total if self.old_total else None

    @property
    def new_score(self) -> float | None:
        """Mean score in the new run; None when the assertion is not in it."""
        return self.new_score_units / SCORE_UNITS / self.new_total if self.new_total else None

    @property
    def score_delta(self) -> float | None:
        """new_score - old_score, None unless the assertion is in both runs."""
        if self.old_score is None or self.new_score is None:
            return None
        return self.new_score - self.old_score

    def scores_text(self) -> tuple[str, str, str]:
        """(old, new, Δ) mean scores as shown in the table and the report."""
        old = "—" if self.old_score is None else f"{self.old_score:.4f}"
        new = "—" if self.new_score is None else f"{self.new_score:.4f}"
        delta = self.status if self.score_delta is None else f"{self.score_delta:+.4f}"
        return old, new, delta

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
    # mean_score sums over the traces graded in both runs (units of 0.0001).
    both_graded: int = 0
    old_mean_units: int = 0
    new_mean_units: int = 0

    @property
    def old_mean_score(self) -> float | None:
        """The old run's mean of mean_score over the traces graded in both runs."""
        return self.old_mean_units / SCORE_UNITS / self.both_graded if self.both_graded else None

    @property
    def new_mean_score(self) -> float | None:
        """The new run's mean of mean_score over the traces graded in both runs."""
        return self.new_mean_units / SCORE_UNITS / self.both_graded if self.both_graded else None

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
            "both_graded": self.both_graded,
            "old_mean_score": self.old_mean_score,
            "new_mean_score": self.new_mean_score,
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
                    "old_mean_score": c.old_score,
                    "new_mean_score": c.new_score,
                    "score_delta": c.score_delta,
                    "score_down": c.score_down,
                    "score_up": c.score_up,
                }
                for name, c in self.assertions.items()
            },
        }

    def renderable(self) -> Group:
        """Rich tables: assertion changes, then verdict flips."""
        means = ""
        if self.old_mean_score is not None and self.new_mean_score is not None:
            means = (
                f"; mean score {self.old_mean_score:.4f} → {self.new_mean_score:.4f} "
                f"({self.new_mean_score - self.old_mean_score:+.4f})"
            )
        head = Table(
            title=f"{self.common} traces in both runs ({self.only_old} only in old, "
            f"{self.only_new} only in new); {self.flipped} flipped verdict{means}",
            title_justify="left",
        )
        # Names fold rather than lose their end (the tool) to an ellipsis on a narrow terminal.
        head.add_column("assertion", overflow="fold")
        for label in ("old pass", "new pass", "Δ", "old score", "new score", "Δ score"):
            head.add_column(label, justify="right", no_wrap=True)
        for label in ("pass→fail", "fail→pass", "score ↓", "score ↑"):
            head.add_column(label, justify="right", no_wrap=True)
        for name, c in self.assertions.items():
            old, new, delta = c.rates_text()
            old_score, new_score, score_delta = c.scores_text()
            head.add_row(
                name,
                old,
                new,
                _styled(delta, c.delta),
                old_score,
                new_score,
                _styled(score_delta, c.score_delta),
                str(c.pass_to_fail),
                str(c.fail_to_pass),
                str(c.score_down),
                str(c.score_up),
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


def _styled(text: str, delta: float | None) -> str:
    """Cyan for added/removed, red for a drop, green for a rise."""
    style = "cyan" if delta is None else "red" if delta < 0 else "green" if delta > 0 else ""
    return f"[{style}]{text}[/{style}]" if style else text


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
    index: dict[tuple[str, int], tuple[str, dict[str, tuple[str, int]], int | None]] = {}
    for key, row in _keyed(old):
        result.old_traces += 1
        index[key] = (_verdict(row), _statuses(row), _mean_units(row))
    for key, row in _keyed(new):
        result.new_traces += 1
        found = index.pop(key, None)
        if found is None:
            result.only_new += 1
            continue
        result.common += 1
        old_verdict, old_status, old_mean = found
        new_verdict, new_status, new_mean = _verdict(row), _statuses(row), _mean_units(row)
        if old_mean is not None and new_mean is not None:
            result.both_graded += 1
            result.old_mean_units += old_mean
            result.new_mean_units += new_mean
        changed = []
        for name in {**old_status, **new_status}:
            change = result.assertions.get(name)
            if change is None:
                change = result.assertions[name] = AssertionChange()
            old_result, new_result = old_status.get(name), new_status.get(name)
            before = after = None
            if old_result is not None:
                before = old_result[0]
                change.old_total += 1
                change.old_passed += before == "PASS"
                change.old_score_units += old_result[1]
            if new_result is not None:
                after = new_result[0]
                change.new_total += 1
                change.new_passed += after == "PASS"
                change.new_score_units += new_result[1]
            if old_result is not None and new_result is not None:
                change.score_down += new_result[1] < old_result[1]
                change.score_up += new_result[1] > old_result[1]
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
