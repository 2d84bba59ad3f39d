"""Fixtures: real OTLP JSON exported by the OpenAI instrumentations, driven in subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fake_openai
import pytest

HERE = Path(__file__).parent
MODES = ("openinference", "genai", "genai-events")
TAU_BENCH = (
    Path(__file__).resolve().parents[3] / "shared" / "data" / "tau_bench" / "gpt-4o-airline.json"
)


def _tau_bench_path() -> Path:
    # CI lays shared/ beside the clone; a developer's tree has it at /work/shared.
    for candidate in (TAU_BENCH, Path("/work/shared/data/tau_bench/gpt-4o-airline.json")):
        if candidate.exists():
            return candidate
    raise FileNotFoundError("shared/data/tau_bench/gpt-4o-airline.json not found")


@pytest.fixture(scope="session")
def tau_bench() -> Path:
    return _tau_bench_path()


@pytest.fixture(scope="session")
def golden(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path | None]]:
    """Run the agent once per instrumentation mode; map mode -> (traces file, logs file)."""
    out = tmp_path_factory.mktemp("golden")
    results: dict[str, tuple[Path, Path | None]] = {}
    with fake_openai.serve() as base_url:
        processes = []
        for mode in MODES:
            traces = out / f"{mode}.traces.json"
            logs = out / f"{mode}.logs.json" if mode == "genai-events" else None
            command = [sys.executable, str(HERE / "otel_driver.py"), mode, base_url, str(traces)]
            if logs is not None:
                command.append(str(logs))
            processes.append(
                (mode, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            )
            results[mode] = (traces, logs)
        for mode, process in processes:
            _, stderr = process.communicate(timeout=90)
            assert process.returncode == 0, f"{mode} driver failed:\n{stderr.decode()}"
    return results
