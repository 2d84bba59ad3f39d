"""Run summary: verdict counts, per-assertion pass rates and a capped sample of failing traces."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.table import Table

from trajgrade.regrade.output import Row, row_from_json

if TYPE_CHECKING:
    from trajgrade._core import JsonlBlock

# Failing traces kept for the report; bounded so memory stays flat however long the run.
DEFAULT_FAILURE_SAMPLE = 200
# Scores are rounded to 4 places (SPEC §13): summed as integers of this unit, sums are exact and
# the same whichever block or Ray chunk the core counted them in.
SCORE_UNITS = 10_000


def score_units(score: float) -> int:
    """A rounded score as an integer count of 0.0001 (the core's jsonl_block::score_units)."""
    return round(score * SCORE_UNITS) if score > 0 else 0


@dataclass
class AssertionStats:
    """Counts for one assertion (by result name), over every graded trace."""

    severity: str = "SEVERITY_HARD"
    passed: int = 0
    failed: int = 0
    score_units: int = 0

    @property
    def total(self) -> int:
        return self.passed + self.failed

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def soft_failures(self) -> int:
        return self.failed if self.severity == "SEVERITY_SOFT" else 0

    @property
    def mean_score(self) -> float:
        """The mean of this assertion's scores (SPEC §13): partial credit, not just passes."""
        return self.score_units / SCORE_UNITS / self.total if self.total else 0.0


@dataclass
class Summary:
    """Everything the end-of-run table, --min-pass-rate and the report need; O(assertions)."""

    suite_id: str = ""
    traces: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    soft_failures: int = 0
    # Sum of the graded traces' mean_score, in units of 0.0001.
    mean_score_units: int = 0
    assertions: dict[str, AssertionStats] = field(default_factory=dict)
    error_codes: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    failure_sample: int = DEFAULT_FAILURE_SAMPLE

    @property
    def pass_rate(self) -> float:
        """PASS verdicts over every trace read (an item error counts as not passing)."""
        return self.passed / self.traces if self.traces else 0.0

    @property
    def mean_score(self) -> float:
        """The mean of the graded traces' mean_score (item errors are not graded)."""
        graded = self.passed + self.failed
        return self.mean_score_units / SCORE_UNITS / graded if graded else 0.0

    def add_block(self, block: JsonlBlock) -> None:
        """Count a graded block (Grader.grade_jsonl_block and the other block entry points):
        the core's counts merged; the marked rows (error and failing rows, in order) parsed
        only while the sample of failures has room."""
        for mark in block.marks:
            if self.sample_full:
                break
            self.sample(row_from_json(json.loads(block.rows[mark.row_start : mark.row_end])))
        self.traces += block.items
        self.passed += block.passed
        self.failed += block.failed
        self.errors += block.errors
        self.soft_failures += block.soft_failures
        self.mean_score_units += block.mean_score_units
        for name, severity, passed, failed, units in block.assertions:
            stats = self.assertions.get(name)
            if stats is None:
                stats = self.assertions[name] = AssertionStats(severity)
            stats.passed += passed
            stats.failed += failed
            stats.score_units += units
        for code, count in block.error_codes:
            self.error_codes[code] = self.error_codes.get(code, 0) + count

    def merge(self, counts: Summary) -> None:
        """Add the counts of the rows that follow (a chunk's Summary with failure_sample=0,
        counted elsewhere, e.g. in a Ray worker): the same counts, in the same order of first
        appearance, as adding their blocks here. Their failing rows go to sample()."""
        self.traces += counts.traces
        self.passed += counts.passed
        self.failed += counts.failed
        self.errors += counts.errors
        self.soft_failures += counts.soft_failures
        self.mean_score_units += counts.mean_score_units
        for name, theirs in counts.assertions.items():
            stats = self.assertions.get(name)
            if stats is None:
                stats = self.assertions[name] = AssertionStats(theirs.severity)
            stats.passed += theirs.passed
            stats.failed += theirs.failed
            stats.score_units += theirs.score_units
        for code, count in counts.error_codes.items():
            self.error_codes[code] = self.error_codes.get(code, 0) + count

    @property
    def sample_full(self) -> bool:
        """No more failing rows are taken into the sample."""
        return len(self.failures) >= self.failure_sample

    def sample(self, row: Row) -> None:
        """Take a failing or error row (already counted, see merge) into the sample."""
        if row["error"] is not None:
            self._sample_error(row)
        else:
            self._sample(row, [r for r in row["results"] if r["status"] != "ASSERTION_STATUS_PASS"])

    def _sample_error(self, row: Row) -> None:
        error = row["error"]
        code = error["reason_code"]
        self._sample(
            row,
            [
                {
                    "name": "(error)",
                    "reason_code": code,
                    "reason": f"{error['field']}: {error['message']}",
                }
            ],
        )

    def _sample(self, row: Row, failing: list[dict[str, Any]]) -> None:
        if len(self.failures) >= self.failure_sample:
            return
        self.failures.append(
            {
                "trace_id": row["trace_id"],
                "verdict": row["verdict"] or "ERROR",
                "failing": [
                    {"name": r["name"], "reason_code": r["reason_code"], "reason": r["reason"]}
                    for r in failing
                ],
            }
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able state (kept in the resume manifest)."""
        return {
            "suite_id": self.suite_id,
            "traces": self.traces,
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "soft_failures": self.soft_failures,
            "mean_score_units": self.mean_score_units,
            "assertions": {
                name: [s.severity, s.passed, s.failed, s.score_units]
                for name, s in self.assertions.items()
            },
            "error_codes": dict(self.error_codes),
            "failures": list(self.failures),
            "failure_sample": self.failure_sample,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Summary:
        """The inverse of to_json."""
        return cls(
            suite_id=raw["suite_id"],
            traces=raw["traces"],
            passed=raw["passed"],
            failed=raw["failed"],
            errors=raw["errors"],
            soft_failures=raw["soft_failures"],
            # A manifest from before scores (SPEC §13): every v1 result scored its pass.
            mean_score_units=raw.get("mean_score_units", raw["passed"] * SCORE_UNITS),
            assertions={
                name: AssertionStats(
                    counts[0], counts[1], counts[2], *(counts[3:] or [counts[1] * SCORE_UNITS])
                )
                for name, counts in raw["assertions"].items()
            },
            error_codes=dict(raw["error_codes"]),
            failures=list(raw["failures"]),
            failure_sample=raw["failure_sample"],
        )

    def table(self) -> Table:
        """The per-assertion rich table printed at the end of a run."""
        table = Table(
            title=f"suite {self.suite_id}: {self.passed}/{self.traces} traces pass "
            f"({self.pass_rate:.1%}), {self.failed} fail, {self.errors} errors, "
            f"mean score {self.mean_score:.4f}",
            title_justify="left",
        )
        # Names fold rather than lose their end (the tool) to an ellipsis on a narrow terminal.
        table.add_column("assertion", overflow="fold", min_width=16)
        table.add_column("severity")
        table.add_column("pass rate", justify="right")
        table.add_column("score", justify="right")  # the mean of the results' scores
        table.add_column("passed", justify="right")
        table.add_column("failed", justify="right")
        table.add_column("soft", justify="right")  # soft failures
        for name, stats in self.assertions.items():
            style = _rate_style(stats.pass_rate)
            table.add_row(
                name,
                stats.severity.removeprefix("SEVERITY_").lower(),
                f"[{style}]{stats.pass_rate:.1%}[/{style}]",
                f"{stats.mean_score:.4f}",
                str(stats.passed),
                str(stats.failed),
                str(stats.soft_failures),
            )
        for code, count in sorted(self.error_codes.items()):
            table.add_row(f"[red]item error {code}[/red]", "", "", "", "", str(count), "")
        return table


def _rate_style(rate: float) -> str:
    return "green" if rate == 1.0 else ("yellow" if rate >= 0.9 else "red")
