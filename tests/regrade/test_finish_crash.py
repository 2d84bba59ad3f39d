"""A crash at every step of the finish (the renames and unlinks that put the output in place
and remove the run state): --resume, and a fresh run, then complete with the same bytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from trajgrade.regrade import pipeline, regrade, resume
from trajgrade.regrade.resume import RunState

_STEPS = ("replace", "unlink", "rmdir")
CHUNK = 200  # 601 rows: four chunks, so a Parquet finish removes four parts


@pytest.fixture(autouse=True)
def _commit_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    # One commit a chunk (none grouped), so a Parquet run has four parts to remove.
    monkeypatch.setattr(pipeline, "COMMIT_SECONDS", 0.0)


class SimulatedCrash(BaseException):
    """Stands for kill -9: nothing after it runs (BaseException: no handler catches it)."""


class _CrashingOs:
    """The os module as resume.py sees it, failing just before filesystem step `at` (0-based;
    None only records the steps)."""

    def __init__(self, at: int | None) -> None:
        self.at = at
        self.steps: list[str] = []

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if name not in _STEPS:
            return real

        def step(*args: Any, **kwargs: Any) -> Any:
            if len(self.steps) == self.at:
                raise SimulatedCrash(f"before {name}{args}")
            self.steps.append(f"{name} {Path(args[0]).name}")
            return real(*args, **kwargs)

        return step


def _run_crashing(
    workload: dict[str, Path], out: Path, at: int | None, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """A regrade toward `out` whose finish() crashes before step `at`; the steps it made."""
    fake = _CrashingOs(at)
    original: Callable[[RunState], None] = RunState.finish

    def finish(state: RunState) -> None:
        monkeypatch.setattr(resume, "os", fake)
        try:
            original(state)
        finally:
            monkeypatch.setattr(resume, "os", os)

    with monkeypatch.context() as patch:
        patch.setattr(RunState, "finish", finish)
        if at is None:
            regrade([str(workload["jsonl"])], workload["suite"], str(out), chunk_size=CHUNK)
        else:
            with pytest.raises(SimulatedCrash):
                regrade([str(workload["jsonl"])], workload["suite"], str(out), chunk_size=CHUNK)
    return fake.steps


def _finish_steps(workload: dict[str, Path], tmp_path: Path, suffix: str, mp: Any) -> list[str]:
    out = tmp_path / f"steps.{suffix}"
    steps = _run_crashing(workload, out, None, mp)
    assert not out.with_name(out.name + ".parts").exists()
    return steps


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
@pytest.mark.parametrize("rerun", ["resume", "fresh"])
def test_crash_at_every_finish_step_recovers_the_same_bytes(
    workload: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    suffix: str,
    rerun: str,
) -> None:
    reference = tmp_path / f"reference.{suffix}"
    regrade([str(workload["jsonl"])], workload["suite"], str(reference), chunk_size=CHUNK)
    expected = reference.read_bytes()
    steps = _finish_steps(workload, tmp_path, suffix, monkeypatch)
    # The sequence under test: mark the manifest finished, rename the staged output onto OUT,
    # remove the run directory with the manifest last.
    staged = "rows.jsonl" if suffix == "jsonl" else resume.ASSEMBLED
    assert steps[:2] == [f"replace {resume.MANIFEST}.tmp", f"replace {staged}"]
    assert steps[-2:] == [f"unlink {resume.MANIFEST}", f"rmdir steps.{suffix}.parts"]
    if suffix == "parquet":
        assert sum(s.startswith("unlink part-") for s in steps) == 4
    for at in range(len(steps)):
        out = tmp_path / f"crash-{at}.{suffix}"
        out.write_bytes(b"the previous output")  # a rerun toward an existing file
        _run_crashing(workload, out, at, monkeypatch)
        parts = out.with_name(out.name + ".parts")
        # The output is the previous file or the complete new one, never anything else.
        assert out.read_bytes() in (b"the previous output", expected), at
        if rerun == "fresh" and at == 0:
            # The manifest does not say finished yet: committed work is never silently
            # dropped, a fresh run asks for --resume (as after any other interruption).
            with pytest.raises(resume.ResumeError, match="--resume"):
                regrade([str(workload["jsonl"])], workload["suite"], str(out), chunk_size=CHUNK)
        summary = regrade(
            [str(workload["jsonl"])],
            workload["suite"],
            str(out),
            chunk_size=CHUNK,
            resume=rerun == "resume" or at == 0,
        )
        assert summary.traces == 601, (at, steps[at])
        assert out.read_bytes() == expected, (at, steps[at])
        assert not parts.exists(), (at, steps[at])


def test_resume_after_the_output_is_in_place_does_not_grade_again(
    workload: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window of the original defect: OUT renamed, the run directory not yet removed."""
    out = tmp_path / "results.jsonl"
    steps = _finish_steps(workload, tmp_path, "jsonl", monkeypatch)
    after_rename = steps.index("replace rows.jsonl") + 1
    _run_crashing(workload, out, after_rename, monkeypatch)
    complete = out.read_bytes()
    assert (out.with_name(out.name + ".parts") / resume.MANIFEST).exists()
    graded: list[int] = []
    summary = regrade(
        [str(workload["jsonl"])],
        workload["suite"],
        str(out),
        chunk_size=CHUNK,
        resume=True,
        on_commit=graded.append,
    )
    assert graded == []  # nothing graded again: the summary comes from the manifest
    assert summary.traces == 601
    assert out.read_bytes() == complete
    assert not out.with_name(out.name + ".parts").exists()


def test_finished_run_whose_output_was_deleted_says_what_to_do(
    workload: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results.jsonl"
    steps = _finish_steps(workload, tmp_path, "jsonl", monkeypatch)
    _run_crashing(workload, out, steps.index("replace rows.jsonl") + 1, monkeypatch)
    out.unlink()
    with pytest.raises(resume.ResumeError, match="output is gone"):
        regrade([str(workload["jsonl"])], workload["suite"], str(out), resume=True)


_KILL_AT_FIRST_UNLINK = """
import os, signal, sys
from trajgrade.regrade import pipeline, regrade, resume

class KillingOs:
    def __getattr__(self, name):
        if name == "unlink":  # the first removal after OUT was renamed into place
            return lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        return getattr(os, name)

real_finish = resume.RunState.finish
def finish(state):
    resume.os = KillingOs()
    real_finish(state)
resume.RunState.finish = finish
regrade([sys.argv[1]], sys.argv[2], sys.argv[3], chunk_size=200)
"""


@pytest.mark.parametrize("suffix", ["jsonl", "parquet"])
def test_kill_9_after_out_is_renamed_then_the_cli_completes(
    workload: dict[str, Path], tmp_path: Path, suffix: str
) -> None:
    """The reported defect, with a real kill -9 in the window between the rename onto OUT and
    the removal of OUT.parts: both `--resume` and a fresh run exited 2."""
    reference = tmp_path / f"reference.{suffix}"
    regrade([str(workload["jsonl"])], workload["suite"], str(reference), chunk_size=CHUNK)
    for rerun in ("--resume", None):
        out = tmp_path / f"{rerun or 'fresh'}.{suffix}"
        args = [str(workload["jsonl"]), str(workload["suite"]), str(out)]
        killed = subprocess.run(
            [sys.executable, "-c", _KILL_AT_FIRST_UNLINK, *args], check=False, timeout=120
        )
        assert killed.returncode == -signal.SIGKILL
        assert out.read_bytes() == reference.read_bytes()  # OUT complete, state left behind
        assert (out.with_name(out.name + ".parts") / resume.MANIFEST).exists()
        command = [
            sys.executable, "-m", "trajgrade.commands.regrade", str(workload["jsonl"]),
            "--suite", str(workload["suite"]), "--out", str(out), "--chunk-size", str(CHUNK),
            "--no-progress", *([rerun] if rerun else []),
        ]  # fmt: skip
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert out.read_bytes() == reference.read_bytes()
        assert not out.with_name(out.name + ".parts").exists()
