"""--report: a self-contained HTML page, rendered by headless Chromium into a non-blank PNG."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import regrade_workload
from regrade_reference import counted
from trajgrade.commands import regrade as regrade_command
from trajgrade.regrade import read_rows
from trajgrade.regrade.output import Row, error_row, jsonl_line
from trajgrade.regrade.report import AMBER_AT, GREEN_AT, rate_class, render
from trajgrade.regrade.report.traces import collect

WIDTH, HEIGHT = 1280, 2400
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
)  # fmt: skip
# Where the screenshot is kept for people to look at (the test's tmp dir otherwise).
SHOT_ENV = "TRAJGRADE_REPORT_SCREENSHOT"


def _chromium() -> str:
    """The Chromium binary; under CI=true it is installed when missing (make deps-system)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("CI") == "true":
        subprocess.run(
            "apt-get update -qq && apt-get install -y -qq chromium",
            shell=True, check=True, timeout=900,
        )  # fmt: skip
        found = shutil.which("chromium")
    if found is None:
        pytest.skip("chromium is not installed (make deps-system installs it)")
    return found


def _png_pixels(data: bytes) -> tuple[int, int, set[bytes]]:
    """(width, height, distinct pixel values) of an 8-bit RGB/RGBA PNG: a tiny decoder."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    previous = bytearray(stride)
    colours: set[bytes] = set()
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up = previous[i]
            corner = previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                pred = left if pa <= pb and pa <= pc else (up if pb <= pc else corner)
                line[i] = (line[i] + pred) & 0xFF
        if y % 4 == 0:  # every 4th row is plenty to tell a chart from a blank page
            colours.update(bytes(line[x : x + 3]) for x in range(0, stride, bpp))
        previous = line
    return width, height, colours


@pytest.fixture(scope="module")
def runs(workload: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A run against a baseline, with its report; and the same run reported with small caps."""
    base = tmp_path_factory.mktemp("report")
    baseline = base / "baseline.jsonl"
    # The baseline ran a laxer suite (any tool allowed): the new run has flips against it.
    laxer = json.loads(json.dumps(regrade_workload.SUITE))
    laxer["assertions"][3] = {"allowed_tools": {"tools": ["*"]}}
    laxer["assertions"][4] = {"forbidden_tools": {"tools": ["delete_account"]}}
    (base / "laxer.json").write_text(json.dumps(laxer), encoding="utf-8")
    old = ["--suite", str(base / "laxer.json"), "--no-progress", "--out", str(baseline)]
    assert regrade_command.main([str(workload["parquet"]), *old]) == 0
    common = ["--suite", str(workload["suite"]), "--no-progress"]
    html, capped = base / "report.html", base / "capped.html"
    out = base / "new.jsonl"
    code = regrade_command.main(
        [str(workload["jsonl"]), *common, "--out", str(out), "--report", str(html),
         "--baseline", str(baseline)]
    )  # fmt: skip
    assert code == 0
    code = regrade_command.main(
        [str(workload["jsonl"]), *common, "--out", str(base / "again.parquet"),
         "--report", str(capped), "--report-traces", "60", "--report-calls", "7"]
    )  # fmt: skip
    assert code == 0
    return {"html": html, "capped": capped, "out": out, "baseline": baseline}


@pytest.fixture(scope="module")
def report(runs: dict[str, Path]) -> Path:
    return runs["html"]


def _data(page: str) -> dict[str, Any]:
    found = re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', page, re.S)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def _failing_rows(out: Path) -> list[tuple[int, Row]]:
    """(1-based place, row) of every row that is not a clean pass, straight from the file."""
    return [
        (n, row)
        for n, row in enumerate(read_rows(str(out)), start=1)
        if row["error"] is not None
        or any(r["status"] != "ASSERTION_STATUS_PASS" for r in row["results"])
    ]


def _input_traces(workload: dict[str, Path]) -> dict[str, dict[str, Any]]:
    lines = workload["jsonl"].read_text(encoding="utf-8").splitlines()
    traces = [json.loads(line) for line in lines if line.strip()]
    return {t["id"]: t for t in traces if isinstance(t.get("calls"), list)}


def test_report_is_self_contained(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    assert "Pass rate per assertion" in page and "<svg" in page
    flips = re.search(r"Against the baseline: (\d+) verdict flips", page)
    assert flips is not None and int(flips.group(1)) > 0
    assert "Failing traces" in page
    assert "INVALID_TRACE" in page  # the broken line, with its reason
    # Nothing is fetched: no external scripts, styles, images or fonts.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_report_names_the_run(runs: dict[str, Path], workload: dict[str, Path]) -> None:
    page = runs["html"].read_text(encoding="utf-8")
    info = re.search(r'<dl class="meta" id="run-info">(.*?)</dl>', page, re.S)
    assert info is not None
    assert "<dt>suite</dt><dd><code>airline-refunds</code>" in info.group(1)
    assert str(workload["jsonl"]) in info.group(1)  # the run's input
    assert str(runs["out"]) in info.group(1) and str(runs["baseline"]) in info.group(1)
    assert "<title>trajgrade regrade: airline-refunds</title>" in page


@pytest.mark.parametrize(
    ("rate", "colour"),
    [(1.0, "green"), (GREEN_AT, "green"), (0.949, "amber"), (AMBER_AT, "amber"),
     (0.578, "red"), (0.0, "red")],
)  # fmt: skip
def test_rate_colours(rate: float, colour: str) -> None:
    assert rate_class(rate) == colour


def test_report_colours_the_pass_rate_by_threshold(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    card = re.search(
        r'id="pass-rate" data-colour="(\w+)">pass rate\n<b class="(\w+)">([\d.]+)%', page
    )
    assert card is not None
    assert card.group(1) == card.group(2) == rate_class(float(card.group(3)) / 100)
    assert "≥ 95% pass" in page and "≥ 80%" in page and "&lt; 80%" in page  # the legend


def test_every_failing_trace_is_listed(runs: dict[str, Path], workload: dict[str, Path]) -> None:
    data = _data(runs["html"].read_text(encoding="utf-8"))
    failing = _failing_rows(runs["out"])
    assert data["total"] == len(failing) == len(data["traces"]) > 200  # the old cap
    assert [(t["n"], t["id"]) for t in data["traces"]] == [(n, r["trace_id"]) for n, r in failing]
    soft = [t for t in data["traces"] if t["s"]]
    assert soft and all(t["v"] == "PASS" for t in soft)  # soft-only failures are included
    assert data["soft_only"] == len(soft)
    assert any(t["v"] == "ERROR" and data["codes"][t["f"][0][1]] == "INVALID_TRACE"
               for t in data["traces"])  # fmt: skip
    # Calls: the first --report-calls (default 1000 > all of them) carry the input's calls.
    inputs = _input_traces(workload)
    assert data["with_calls"] == len(data["traces"]) and data["calls_note"] == ""
    broken = [t for t in data["traces"] if t["id"] not in inputs]
    assert [t["id"] for t in broken] == ["broken"]
    assert broken[0]["c"] == [] and broken[0]["cn"].startswith("not a valid trace: ")
    for t in data["traces"]:
        if t["id"] in inputs:
            assert [c[0] for c in t["c"]] == [c["name"] for c in inputs[t["id"]]["calls"]]


def test_caps_are_explicit(runs: dict[str, Path]) -> None:
    page = runs["capped"].read_text(encoding="utf-8")
    data = _data(page)
    assert len(data["traces"]) == 60 < data["total"] == len(_failing_rows(runs["out"]))
    assert data["soft_only"] == _data(runs["html"].read_text(encoding="utf-8"))["soft_only"]
    assert data["with_calls"] == 7 == sum(1 for t in data["traces"] if "c" in t)
    assert (
        f"{data['total']:,} traces failed; the first 60 are listed (cap 60, --report-traces)"
        in page
    )
    assert "calls are embedded for the first 7 of" in data["calls_note"]


def _dom(chromium: str, page: Path, fragment: str, profile: Path) -> str:
    """The page's DOM after its script ran, opened at #fragment."""
    done = subprocess.run(
        [
            chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
            "--dump-dom", page.as_uri() + fragment,
        ],
        check=True, capture_output=True, timeout=120, text=True,
    )  # fmt: skip
    assert 'data-ready="1"' in done.stdout, done.stderr[-2000:]
    return done.stdout


def _matched(dom: str) -> int:
    found = re.search(r'id="pager" data-matched="(\d+)"', dom)
    assert found is not None
    return int(found.group(1))


def test_filters_pages_and_calls_in_chromium(
    runs: dict[str, Path], workload: dict[str, Path], tmp_path: Path
) -> None:
    chromium = _chromium()
    data = _data(runs["html"].read_text(encoding="utf-8"))
    traces, names, codes = data["traces"], data["assertions"], data["codes"]
    profile = tmp_path / "profile"

    dom = _dom(chromium, runs["html"], "", profile)
    assert _matched(dom) == len(traces)
    assert dom.count('<tr class="trace') == 50  # one page
    assert f"1-50 of {len(traces)} matching traces" in dom
    dom = _dom(chromium, runs["html"], "#p=2", profile)
    assert f"51-100 of {len(traces)}" in dom
    shown = re.findall(r'<tr class="trace[^"]*" data-n="(\d+)"', dom)
    assert shown == [str(t["n"]) for t in traces[50:100]]

    # By assertion, by reason code, by both (the same failure), by kind.
    name = names[traces[0]["f"][0][0]]
    expected = sum(1 for t in traces if any(names[f[0]] == name for f in t["f"]))
    assert 0 < _matched(_dom(chromium, runs["html"], f"#a={quote(name)}", profile)) == expected
    code = codes[traces[0]["f"][0][1]]
    both = sum(
        1 for t in traces if any(names[f[0]] == name and codes[f[1]] == code for f in t["f"])
    )
    dom = _dom(chromium, runs["html"], f"#a={quote(name)}&c={quote(code)}", profile)
    assert 0 < _matched(dom) == both
    soft = sum(1 for t in traces if t["s"])
    assert 0 < _matched(_dom(chromium, runs["html"], "#k=soft", profile)) == soft
    assert _matched(_dom(chromium, runs["html"], "#k=error", profile)) == 1

    # A trace on a later page opens to its calls, failing positions highlighted.
    target = next(t for t in traces[60:] if any(f[3] for f in t["f"]))
    dom = _dom(chromium, runs["html"], f"#open={target['n']}", profile)
    detail = re.search(rf'<tr class="detail" data-n="{target["n"]}">(.*?)</table>', dom, re.S)
    assert detail is not None
    calls = re.findall(r'<tr class="call( hit)?" data-pos="(\d+)"><td>\d+.*?</td><td>([^<]*)</td>',
                       detail.group(1))  # fmt: skip
    expected_calls = _input_traces(workload)[target["id"]]["calls"]
    assert [c[2].removesuffix("  (error)") for c in calls] == [c["name"] for c in expected_calls]
    hits = {int(pos) for hit, pos, _ in calls if hit}
    assert hits == {p for f in target["f"] for p in f[3]} and hits


def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    shot = Path(os.environ.get(SHOT_ENV) or tmp_path / "report.png")
    target = _data(report.read_text(encoding="utf-8"))["traces"][2]["n"]
    subprocess.run(
        [
            chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}",
            report.as_uri() + f"#open={target}",
        ],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert shot.exists()
    width, height, colours = _png_pixels(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    # A blank or failed page has one or two colours; the cards, bars and text have many.
    assert len(colours) > 20, len(colours)


def test_rows_are_classified_as_a_parse_would(tmp_path: Path) -> None:
    """The byte test that skips passing JSONL rows is not fooled by look-alike text."""
    tricky = '"status":"ASSERTION_STATUS_FAIL" "error":{'
    ok = {"name": "a", "status": "ASSERTION_STATUS_PASS", "severity": "SEVERITY_HARD",
          "reason_code": "", "reason": tricky, "positions": [], "score": 1.0}  # fmt: skip
    rows = [
        {"trace_id": tricky, "suite_id": "s", "verdict": "VERDICT_PASS", "score": 1.0,
         "soft_failures": 0, "results": [ok], "mean_score": 1.0, "error": None},
        {"trace_id": "soft", "suite_id": "s", "verdict": "VERDICT_PASS", "score": 1.0,
         "soft_failures": 1, "results": [{**ok, "status": "ASSERTION_STATUS_FAIL",
                                          "severity": "SEVERITY_SOFT", "reason_code": "X",
                                          "score": 0.0}],
         "mean_score": 0.0, "error": None},
        error_row("bad", "s", "INVALID_TRACE", "f:line 3", tricky),
    ]  # fmt: skip
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b"".join(jsonl_line(r) for r in rows) + b"\n")
    found = collect(str(path))
    assert [(t["n"], t["id"], t["v"], t["s"]) for t in found.traces] == [
        (2, "soft", "PASS", True),
        (3, "bad", "ERROR", False),
    ]
    assert found.total == 2 and found.calls_note.startswith("the run's inputs are not known")
    assert found.soft_only == 1
    capped = collect(str(path), max_traces=1)
    assert (capped.total, len(capped.traces), capped.truncated) == (2, 1, True)
    counted = collect(str(path), max_traces=0)  # past the cap: counted without a parse
    assert (counted.total, counted.soft_only, counted.traces) == (2, 1, [])


def test_without_the_results_file_the_summary_sample_is_shown(runs: dict[str, Path]) -> None:
    summary = counted(read_rows(str(runs["out"])), "")
    data = _data(render(summary))
    assert data["total"] == summary.failed + summary.errors > len(data["traces"]) == 200
    assert [t["id"] for t in data["traces"]] == [f["trace_id"] for f in summary.failures]
    assert "without the results file" in data["calls_note"]


def test_calls_are_dropped_with_a_note_when_the_inputs_changed(
    runs: dict[str, Path], workload: dict[str, Path], tmp_path: Path
) -> None:
    # clean.jsonl lacks the broken line: from trace 102 on, the ids no longer line up.
    found = collect(str(runs["out"]), [str(workload["clean"])])
    assert "the inputs changed since the run" in found.calls_note
    assert "'broken'" in found.calls_note
    assert found.with_calls == 0 and not any("c" in t for t in found.traces)
    gone = collect(str(runs["out"]), [str(tmp_path / "gone.jsonl")])
    assert gone.calls_note.startswith("the inputs could not be read again")
    assert len(gone.traces) == gone.total > 0  # the list itself does not need the inputs
