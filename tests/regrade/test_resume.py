"""--resume after kill -9 / Ctrl-C of a real subprocess: no duplicates, no gaps, same bytes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import regrade_workload
from trajgrade.regrade import pipeline, read_rows, regrade
from trajgrade.regrade.resume import RunState
from trajgrade.regrade.source import Position
from trajgrade.regrade.summary import Summary


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
    """A regrade toward `out` interrupted (KeyboardInterrupt) right after its n-th commit (one
    commit a chunk: none grouped)."""
    commits: list[int] = []

    def crash(traces: int) -> None:
        commits.append(traces)
        if len(commits) == n:
            raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(pipeline, "COMMIT_SECONDS", 0.0)
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


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_grouped_commits_and_a_crash_mid_group_write_the_same_bytes(
    big: dict[str, Path], tmp_path: Path, fmt: str
) -> None:
    """Chunks committed several at a time, with a crash after rows appended but not committed,
    give the same output as one commit a chunk: the uncommitted rows are dropped on resume and
    the Parquet output is rebuilt from the committed parts with the same row groups."""
    lines = big["reference"].read_bytes().splitlines(keepends=True)
    chunks = [b"".join(lines[i : i + 500]) for i in range(0, len(lines), 500)]
    longest = max(len(line) for line in lines)
    identity = {"inputs": [], "suite_id": "s", "output_format": fmt}

    def append(state: RunState, index: int) -> None:
        state.append(chunks[index], longest_row=longest, table=None)

    def position(index: int) -> Position:
        return Position(0, index + 1, 500 * (index + 1))

    single = tmp_path / f"single.{fmt}"
    state = RunState.open(single, fmt, identity, resume=False)
    for index in range(len(chunks)):
        append(state, index)
        state.commit(position(index), Summary())
    state.finish()

    grouped = tmp_path / f"grouped.{fmt}"
    state = RunState.open(grouped, fmt, identity, resume=False)
    for index in range(3):
        append(state, index)
    state.commit(position(2), Summary())
    append(state, 3)
    append(state, 4)
    state.commit(position(4), Summary())
    append(state, 5)  # appended, never committed: the crash
    state.close()
    state = RunState.open(grouped, fmt, identity, resume=True)
    assert (state.chunks, state.position) == (2, position(4))
    for index in range(5, len(chunks)):
        append(state, index)
        if index % 3 == 0:
            state.commit(position(index), Summary())
    state.commit(position(len(chunks) - 1), Summary())
    state.finish()
    assert grouped.read_bytes() == single.read_bytes()
    if fmt == "parquet":
        assert pq.ParquetFile(grouped).metadata.num_row_groups == len(chunks)
        assert pq.read_table(grouped).num_rows == len(lines)
    else:
        assert grouped.read_bytes() == big["reference"].read_bytes()
