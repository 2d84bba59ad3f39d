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

import pytest
import regrade_workload
from trajgrade.commands import regrade as regrade_command

WIDTH, HEIGHT = 1200, 900


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
def report(workload: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
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
    html = base / "report.html"
    out = base / "new.jsonl"
    code = regrade_command.main(
        [str(workload["jsonl"]), *common, "--out", str(out), "--report", str(html),
         "--baseline", str(baseline)]
    )  # fmt: skip
    assert code == 0
    return html


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


def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            chromium, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", report.as_uri(),
        ],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert shot.exists()
    width, height, colours = _png_pixels(shot.read_bytes())
    assert (width, height) == (WIDTH, HEIGHT)
    # A blank or failed page has one or two colours; the cards, bars and text have many.
    assert len(colours) > 20, len(colours)
