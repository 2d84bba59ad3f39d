"""A self-contained HTML report (inline CSS, JS and SVG; nothing fetched over the network)."""

from __future__ import annotations

import datetime
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trajgrade.regrade.diff import RunDiff
from trajgrade.regrade.report.assets import CSS, JS
from trajgrade.regrade.report.traces import (
    DEFAULT_MAX_CALL_TRACES,
    DEFAULT_MAX_TRACES,
    FailingTraces,
    Failure,
    collect,
)
from trajgrade.regrade.summary import Summary

__all__ = [
    "AMBER_AT",
    "DEFAULT_MAX_CALL_TRACES",
    "DEFAULT_MAX_TRACES",
    "GREEN_AT",
    "RunInfo",
    "rate_class",
    "render",
    "write_report",
]

# Pass-rate colours: green only from 95%, amber from 80%, red below (docs/regrade.md).
GREEN_AT = 0.95
AMBER_AT = 0.80
_COLOURS = {"green": "#1a7f37", "amber": "#bf8700", "red": "#cf222e"}

# Nothing may load from anywhere: the page works offline and leaks nothing when opened.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


@dataclass
class RunInfo:
    """What the run was: shown in the page's header."""

    suite_name: str = ""
    inputs: Sequence[str] = ()
    input_format: str = "auto"
    results: str = ""
    baseline: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def rate_class(rate: float) -> str:
    """green, amber or red for a pass rate (GREEN_AT, AMBER_AT)."""
    return "green" if rate >= GREEN_AT else ("amber" if rate >= AMBER_AT else "red")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _bar_chart(rows: list[tuple[str, float, str, str]], width: int = 980) -> str:
    """Horizontal bars, one per (label, fraction 0..1 = bar length, colour, text after it)."""
    label_w, text_w, row_h = 320, 230, 24
    bar_w = width - label_w - text_w
    height = row_h * len(rows) + 8
    parts = [
        f'<svg role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (label, fraction, colour, text) in enumerate(rows):
        y = 4 + i * row_h
        shown = label if len(label) <= 44 else label[:43] + "…"
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">'
            f"<title>{_e(label)}</title>{_e(shown)}</text>"
            f'<rect x="{label_w}" y="{y + 3}" width="{bar_w}" height="{row_h - 8}" '
            'fill="#eaeef2" rx="3"/>'
            f'<rect x="{label_w}" y="{y + 3}" width="{bar_w * min(max(fraction, 0.0), 1.0):.1f}" '
            f'height="{row_h - 8}" fill="{colour}" rx="3"/>'
            f'<text x="{label_w + bar_w + 8}" y="{y + 16}">{_e(text)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _legend() -> str:
    swatches = "".join(
        f'<span class="sw" style="background:{_COLOURS[name]}"></span>{_e(text)}'
        for name, text in (
            ("green", f"≥ {GREEN_AT:.0%} pass"),
            ("amber", f"≥ {AMBER_AT:.0%}"),
            ("red", f"< {AMBER_AT:.0%}"),
        )
    )
    return f'<p class="legend" id="legend">Pass-rate colours:{swatches}</p>'


def _assertion_chart(summary: Summary) -> str:
    if not summary.assertions:
        return "<p>No assertion results (every trace was an item error).</p>"
    rows = []
    for name, s in summary.assertions.items():
        soft = " · soft" if s.severity == "SEVERITY_SOFT" else ""
        rows.append(
            (
                name,
                s.pass_rate,
                _COLOURS[rate_class(s.pass_rate)],
                f"{s.pass_rate:.1%}  ({s.passed:,}/{s.total:,}) · score {s.mean_score:.4f}{soft}",
            )
        )
    return _bar_chart(rows)


def _flip_section(diff: RunDiff) -> str:
    counts = sorted(diff.flip_counts.items(), key=lambda kv: (-kv[1], kv[0]))
    chart = (
        _bar_chart(
            [
                (
                    k.replace("->", " → "),
                    diff.share(n),
                    "#cf222e" if k.startswith("PASS") else "#1a7f37",
                    f"{n:,} traces · {diff.share(n):.1%}",
                )
                for k, n in counts
            ]
        )
        if counts
        else "<p>No verdict flips.</p>"
    )

    def order(item: tuple[str, object]) -> tuple[int, float]:
        change = diff.assertions[item[0]]
        return (0 if change.delta is None else 1, change.delta or 0.0)

    def cell(text: str, delta: float | None, status: str) -> str:
        if delta is None:
            return f'<span class="badge b-{status}">{_e(status)}</span>'
        colour = "red" if delta < 0 else "green" if delta > 0 else ""
        return f'<span class="{colour}">{_e(text)}</span>'

    rows = []
    for name, c in sorted(diff.assertions.items(), key=order):
        old, new, delta = c.rates_text()
        old_score, new_score, score_delta = c.scores_text()
        rows.append(
            f"<tr><td>{_e(name)}</td><td class='num'>{_e(old)}</td><td class='num'>{_e(new)}</td>"
            f"<td class='num'>{cell(delta, c.delta, c.status)}</td>"
            f"<td class='num'>{_e(old_score)}</td><td class='num'>{_e(new_score)}</td>"
            f"<td class='num'>{cell(score_delta, c.score_delta, c.status)}</td>"
            f"<td class='num'>{c.pass_to_fail:,}</td><td class='num'>{c.fail_to_pass:,}</td>"
            f"<td class='num'>{c.score_down:,}</td><td class='num'>{c.score_up:,}</td></tr>"
        )
    flips = "".join(
        f"<tr><td><code>{_e(f['trace_id'])}</code></td><td>{_e(f['old'])} → {_e(f['new'])}</td>"
        f"<td>{_e(', '.join(c['name'] + ' ' + c['old'] + '→' + c['new'] for c in f['changed']))}"
        "</td></tr>"
        for f in diff.flips
    )
    listed = len(diff.flips)
    more = f" (first {listed:,} of {diff.flipped:,})" if diff.flipped > listed else ""
    return (
        f'<h2 id="flips">Against the baseline: {diff.flipped:,} verdict flips '
        f"({diff.share(diff.flipped):.1%} of {diff.common:,} traces)</h2>"
        f'<p class="meta">{diff.common:,} traces in both runs, {diff.only_old:,} only in the '
        f"baseline, {diff.only_new:,} only in this run. Bar length = share of the traces in "
        f"both runs.</p>{chart}"
        "<h3>Assertions</h3><table id='assertion-changes'><thead><tr><th>assertion</th>"
        "<th class='num'>baseline</th><th class='num'>now</th><th class='num'>Δ</th>"
        "<th class='num'>baseline score</th><th class='num'>score now</th>"
        "<th class='num'>Δ score</th><th class='num'>pass→fail</th><th class='num'>fail→pass</th>"
        "<th class='num'>score ↓</th><th class='num'>score ↑</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
        f"<details><summary>Flipped traces{more}</summary><table><thead><tr><th>trace</th>"
        f"<th>verdict</th><th>assertions changed</th></tr></thead><tbody>{flips}</tbody>"
        "</table></details>"
    )


def _from_summary(summary: Summary) -> FailingTraces:
    """Failing traces from the summary's sample, when the results file is not given."""
    found = FailingTraces(max_traces=summary.failure_sample, max_call_traces=0)
    found.calls_note = "the report was written without the results file: calls are not shown"
    for i, f in enumerate(summary.failures, start=1):
        verdict = str(f["verdict"]).removeprefix("VERDICT_")
        failing: list[Failure] = [
            (r["name"], r["reason_code"], r["reason"], []) for r in f["failing"]
        ]
        found.add_entry(i, f["trace_id"], verdict, failing)
    found.total = summary.failed + summary.errors
    return found


def _header(summary: Summary, info: RunInfo) -> str:
    fields = [("suite", info.suite_name or "(unnamed)")]
    fields.append(("suite id", summary.suite_id))
    if info.inputs:
        fmt = "" if info.input_format == "auto" else f" (as {info.input_format})"
        fields.append(("inputs", ", ".join(info.inputs) + fmt))
    if info.results:
        fields.append(("results", info.results))
    if info.baseline:
        fields.append(("baseline", info.baseline))
    fields.extend(info.extra.items())
    fields.append(("generated", datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")))
    return (
        '<dl class="meta" id="run-info">'
        + "".join(f"<dt>{_e(k)}</dt><dd><code>{_e(v)}</code></dd>" for k, v in fields)
        + "</dl>"
    )


def render(
    summary: Summary,
    diff: RunDiff | None = None,
    *,
    title: str = "trajgrade regrade",
    info: RunInfo | None = None,
    failing: FailingTraces | None = None,
) -> str:
    """The report as one HTML string."""
    info = info or RunInfo()
    failing = failing or _from_summary(summary)
    soft_traces = sum(1 for t in failing.traces if t["s"])
    listed = len(failing.traces)
    notes = []
    if failing.truncated:
        notes.append(
            f"{failing.total:,} traces failed; the first {listed:,} are listed (cap "
            f"{failing.max_traces:,}, --report-traces). The results file holds every row."
        )
    if failing.calls_note:
        notes.append(failing.calls_note)
    # </script> inside the data must not end the script element.
    data = json.dumps(failing.to_json(), ensure_ascii=False, separators=(",", ":"))
    data = data.replace("</", "<\\/").replace("<!--", "<\\!--")
    rate = rate_class(summary.pass_rate)
    heading = f"{title}: {info.suite_name}" if info.suite_name else title
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(heading)}</title><style>{CSS}</style></head><body><main>
<h1>{_e(heading)}</h1>
{_header(summary, info)}
<div class="cards">
<div class="card">traces<b>{summary.traces:,}</b></div>
<div class="card" id="pass-rate" data-colour="{rate}">pass rate
<b class="{rate}">{summary.pass_rate:.1%}</b></div>
<div class="card" id="mean-score">mean score<b>{summary.mean_score:.4f}</b>
<small>partial credit, SPEC §13</small></div>
<div class="card">passed<b class="green">{summary.passed:,}</b></div>
<div class="card">failed<b class="red">{summary.failed:,}</b></div>
<div class="card">item errors<b class="amber">{summary.errors:,}</b></div>
<div class="card">soft failures<b>{summary.soft_failures:,}</b>
<small>assertion results</small></div>
</div>
{_legend()}
<h2>Pass rate per assertion</h2>
{_assertion_chart(summary)}
{_flip_section(diff) if diff is not None else ""}
<h2 id="failing">Failing traces: {failing.total:,}</h2>
<p class="meta">{summary.failed:,} failed, {summary.errors:,} item errors and
{failing.soft_only:,} passed with soft failures only ({soft_traces:,} of those listed).
Click a trace to see its calls; the calls at failing positions are highlighted. Filters, page
and the open trace are kept in the address (#…), so a view can be linked.</p>
{"".join(f'<p class="note">{_e(n)}</p>' for n in notes)}
<div class="controls">
<select id="f-assertion"><option value="">every assertion</option></select>
<select id="f-code"><option value="">every reason code</option></select>
<select id="f-kind"><option value="">every kind</option><option value="hard">hard failures</option>
<option value="soft">soft only</option><option value="error">item errors</option></select>
<input id="f-search" type="search" placeholder="trace id contains…">
</div>
<div class="pager" id="pager"><button id="prev">← previous</button><button id="next">next →</button>
<span id="range"></span></div>
<table id="failures"><thead><tr><th class="num">#</th><th>trace</th><th>verdict</th>
<th>failing assertions (reason code, reason, positions)</th><th class="num">calls</th></tr>
</thead><tbody></tbody></table>
<script id="trace-data" type="application/json">{data}</script>
<script>{JS}</script>
</main></body></html>
"""


def write_report(
    path: str,
    summary: Summary,
    diff: RunDiff | None = None,
    *,
    info: RunInfo | None = None,
    max_traces: int = DEFAULT_MAX_TRACES,
    max_call_traces: int = DEFAULT_MAX_CALL_TRACES,
) -> None:
    """Write the report file. With info.results, every failing trace of that results file is
    counted and the first `max_traces` listed, the first `max_call_traces` of them with their
    calls read back from info.inputs; without it, the summary's sample is shown."""
    failing = None
    if info is not None and info.results:
        failing = collect(
            info.results,
            info.inputs,
            info.input_format,
            max_traces=max_traces,
            max_call_traces=max_call_traces,
        )
    Path(path).write_text(render(summary, diff, info=info, failing=failing), encoding="utf-8")
