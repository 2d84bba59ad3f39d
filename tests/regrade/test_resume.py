"""--resume after kill -9 / Ctrl-C of a real subprocess: no duplicates, no gaps, same bytes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import regrade_workload
from trajgrade.regrade import read_rows, regrade


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("big")
    suite = regrade_workload.write_suite(base / "suite.json")
    traces = regrade_workload.write_jsonl(base / "traces.jsonl", 6000, seed=3)
    reference = base / "reference.jsonl"
    regrade([str(traces)], suite, str(reference), chunk_size=100)
    return {"suite": suite, "traces": traces, "reference": reference}


def _command(big: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "trajgrade.commands.regrade", str(big["traces"]),
        "--suite", str(big["suite"]), "--out", str(out), "--chunk-size", "50",
        "--threads", "1", "--no-progress", *extra,
    ]  # fmt: skip


def _committed_chunks(manifest: Path) -> int:
    try:
        return int(json.loads(manifest.read_text(encoding="utf-8"))["chunks"])
    except (OSError, ValueError):
        return 0


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_resume_after_interrupt(big: dict[str, Path], tmp_path: Path, signum: int) -> None:
    out = tmp_path / "results.jsonl"
    manifest = tmp_path / "results.jsonl.parts" / "manifest.json"
    process = subprocess.Popen(
        _command(big, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while _committed_chunks(manifest) < 5 and process.poll() is None:
        assert time.monotonic() < deadline, "the run never committed a chunk"
        time.sleep(0.005)
    os.kill(process.pid, signum)
    _, stderr = process.communicate(timeout=60)
    if signum == signal.SIGINT:
        assert process.returncode == 130, stderr
    else:
        assert process.returncode == -signal.SIGKILL
    assert not out.exists(), "the output must not appear before the run is complete"
    done = _committed_chunks(manifest)
    assert 5 <= done < 120

    # Without --resume the committed work is never silently thrown away.
    refused = subprocess.run(_command(big, out), check=False, capture_output=True, timeout=60)
    assert refused.returncode == 2 and b"--resume" in refused.stderr

    resumed = subprocess.run(
        _command(big, out, "--resume"), check=False, capture_output=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    ids = [row["trace_id"] for row in read_rows(str(out))]
    assert ids == [f"t{i:08d}" for i in range(6000)]  # no duplicates, no gaps, in order
    assert out.read_bytes() == big["reference"].read_bytes()
    assert not manifest.parent.exists()


def _crash_after_commits(big: dict[str, Path], out: Path, n: int, *, chunk_size: int) -> None:
    """A regrade toward `out` interrupted (KeyboardInterrupt) right after its n-th commit."""
    commits: list[int] = []

    def crash(traces: int) -> None:
        commits.append(traces)
        if len(commits) == n:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        regrade([str(big["traces"])], big["suite"], str(out), chunk_size=chunk_size,
                on_commit=crash)  # fmt: skip


def test_orphan_part_after_crash_is_regraded(big: dict[str, Path], tmp_path: Path) -> None:
    """A part written but not yet in the manifest (crash between the renames) is redone."""
    out = tmp_path / "results.parquet"
    _crash_after_commits(big, out, 3, chunk_size=1000)
    parts = out.with_name(out.name + ".parts")
    (parts / "part-000003.arrow").write_bytes(b"half-written garbage")
    summary = regrade([str(big["traces"])], big["suite"], str(out), chunk_size=700, resume=True)
    assert summary.traces == 6000
    rows = list(read_rows(str(out)))
    reference = list(read_rows(str(big["reference"])))
    assert rows == reference


def test_uncommitted_rows_after_crash_are_regraded(big: dict[str, Path], tmp_path: Path) -> None:
    """JSONL rows appended but not yet in the manifest (crash before its rename) are cut off
    by --resume and graded again: no duplicates, no garbage."""
    out = tmp_path / "results.jsonl"
    _crash_after_commits(big, out, 4, chunk_size=900)
    rows = out.with_name(out.name + ".parts") / "rows.jsonl"
    committed = rows.stat().st_size
    assert committed > 0 and not out.exists()
    with rows.open("ab") as handle:
        handle.write(b'{"trace_id":"t00000000","half-written')
    summary = regrade([str(big["traces"])], big["suite"], str(out), chunk_size=700, resume=True)
    assert summary.traces == 6000
    assert out.read_bytes() == big["reference"].read_bytes()
    assert not rows.parent.exists()
