"""A self-contained HTML report (inline CSS, JS and SVG; nothing fetched over the network)."""

from __future__ import annotations

import datetime
import html
from pathlib import Path

from trajgrade.regrade.diff import RunDiff
from trajgrade.regrade.summary import Summary

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1f2328;
background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.meta{color:#59636e}.cards{display:flex;gap:12px;flex-wrap:wrap;margin:16px 0}
.card{border:1px solid #d1d9e0;border-radius:8px;padding:10px 16px;min-width:120px}
.card b{display:block;font-size:22px}.pass{color:#1a7f37}.fail{color:#cf222e}.err{color:#9a6700}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:4px 8px;
border-bottom:1px solid #eaeef2;vertical-align:top}th{background:#f6f8fa}
code{font:12px ui-monospace,monospace;background:#f6f8fa;padding:1px 4px;border-radius:4px}
input{padding:6px 8px;width:320px;border:1px solid #d1d9e0;border-radius:6px}
svg text{font:12px system-ui,sans-serif;fill:#1f2328}
"""

# Nothing may load from anywhere: the page works offline and leaks nothing when opened.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"

_JS = """
document.getElementById('filter').addEventListener('input', function (e) {
  var q = e.target.value.toLowerCase();
  document.querySelectorAll('#failures tbody tr').forEach(function (tr) {
    tr.style.display = tr.textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
  });
});
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _bar_chart(rows: list[tuple[str, float, str]], width: int = 760) -> str:
    """Horizontal bars, one per (label, fraction 0..1, colour)."""
    label_w, bar_w, row_h = 300, width - 300 - 70, 24
    height = row_h * len(rows) + 8
    parts = [
        f'<svg role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (label, fraction, colour) in enumerate(rows):
        y = 4 + i * row_h
        shown = label if len(label) <= 42 else label[:41] + "…"
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">'
            f"<title>{_e(label)}</title>{_e(shown)}</text>"
        )
        parts.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{bar_w}" height="{row_h - 8}" '
            'fill="#eaeef2" rx="3"/>'
        )
        parts.append(
            f'<rect x="{label_w}" y="{y + 3}" width="{bar_w * fraction:.1f}" '
            f'height="{row_h - 8}" fill="{colour}" rx="3"/>'
        )
        parts.append(f'<text x="{label_w + bar_w + 8}" y="{y + 16}">{fraction:.1%}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _rate_colour(rate: float) -> str:
    return "#1a7f37" if rate >= 0.95 else ("#bf8700" if rate >= 0.8 else "#cf222e")


def _flip_section(diff: RunDiff) -> str:
    counts = sorted(diff.flip_counts.items(), key=lambda kv: -kv[1])
    biggest = max((n for _, n in counts), default=1)
    chart = (
        _bar_chart(
            [
                (
                    k.replace("->", " → "),
                    n / biggest,
                    "#cf222e" if k.startswith("PASS") else "#1a7f37",
                )
                for k, n in counts
            ]
        )
        if counts
        else "<p>No verdict flips.</p>"
    )
    moved = sorted(diff.assertions.items(), key=lambda kv: kv[1].new_rate - kv[1].old_rate)
    rows = "".join(
        f"<tr><td>{_e(name)}</td><td>{c.old_rate:.1%}</td><td>{c.new_rate:.1%}</td>"
        f'<td class="{"fail" if c.new_rate < c.old_rate else "pass"}">'
        f"{c.new_rate - c.old_rate:+.1%}</td><td>{c.pass_to_fail}</td><td>{c.fail_to_pass}</td>"
        "</tr>"
        for name, c in moved
    )
    flips = "".join(
        f"<tr><td><code>{_e(f['trace_id'])}</code></td><td>{_e(f['old'])} → {_e(f['new'])}</td>"
        f"<td>{_e(', '.join(c['name'] + ' ' + c['old'] + '→' + c['new'] for c in f['changed']))}"
        "</td></tr>"
        for f in diff.flips[:500]
    )
    return (
        f"<h2>Against the baseline: {diff.flipped} verdict flips</h2>"
        f'<p class="meta">{diff.common} traces in both runs, {diff.only_old} only in the '
        f"baseline, {diff.only_new} only in this run.</p>{chart}"
        "<h3>Assertions</h3><table><thead><tr><th>assertion</th><th>baseline</th><th>now</th>"
        f"<th>Δ</th><th>pass→fail</th><th>fail→pass</th></tr></thead><tbody>{rows}</tbody></table>"
        "<h3>Flipped traces</h3><table><thead><tr><th>trace</th><th>verdict</th>"
        f"<th>assertions changed</th></tr></thead><tbody>{flips}</tbody></table>"
    )


def render(
    summary: Summary, diff: RunDiff | None = None, *, title: str = "trajgrade regrade"
) -> str:
    """The report as one HTML string."""
    chart = _bar_chart(
        [(name, s.pass_rate, _rate_colour(s.pass_rate)) for name, s in summary.assertions.items()]
    )
    failures = "".join(
        f'<tr><td><code>{_e(f["trace_id"])}</code></td><td class="fail">{_e(f["verdict"])}'
        "</td><td>"
        + "<br>".join(
            f"<b>{_e(r['name'])}</b> <code>{_e(r['reason_code'])}</code> {_e(r['reason'])}"
            for r in f["failing"]
        )
        + "</td></tr>"
        for f in summary.failures
    )
    shown = len(summary.failures)
    not_passing = summary.failed + summary.errors
    generated = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<title>{_e(title)}</title><style>{_CSS}</style></head><body>
<h1>{_e(title)}</h1>
<div class="meta">suite <code>{_e(summary.suite_id)}</code> · generated {generated}</div>
<div class="cards">
<div class="card">traces<b>{summary.traces:,}</b></div>
<div class="card">pass rate<b class="pass">{summary.pass_rate:.1%}</b></div>
<div class="card">passed<b class="pass">{summary.passed:,}</b></div>
<div class="card">failed<b class="fail">{summary.failed:,}</b></div>
<div class="card">item errors<b class="err">{summary.errors:,}</b></div>
<div class="card">soft failures<b>{summary.soft_failures:,}</b></div>
</div>
<h2>Pass rate per assertion</h2>
{chart}
{_flip_section(diff) if diff is not None else ""}
<h2>Failing traces ({shown:,} of {not_passing:,} shown)</h2>
<p><input id="filter" type="search" placeholder="filter by trace, assertion or reason"></p>
<table id="failures"><thead><tr><th>trace</th><th>verdict</th><th>failing assertions</th></tr>
</thead><tbody>{failures}</tbody></table>
<script>{_JS}</script>
</body></html>
"""


def write_report(path: str, summary: Summary, diff: RunDiff | None = None) -> None:
    """Write the report file."""
    Path(path).write_text(render(summary, diff), encoding="utf-8")
