"""Fixtures: real OTLP JSON exported by the OpenAI instrumentations, driven in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fake_openai
import pytest

HERE = Path(__file__).parent
MODES = ("openinference", "genai", "genai-events")
# Vendored from shared/data/tau_bench (MIT; see its README and LICENSE).
TAU_BENCH = Path(__file__).resolve().parents[1] / "data" / "tau_bench" / "gpt-4o-airline.json"


@pytest.fixture(scope="session")
def tau_bench() -> Path:
    return TAU_BENCH


@pytest.fixture(scope="session")
def golden(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path | None]]:
    """Run the agent once per instrumentation mode; map mode -> (traces file, logs file)."""
    return _drive(tmp_path_factory.mktemp("golden"), {})


@pytest.fixture(scope="session")
def reused_ids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path | None]]:
    """The same agent, with a model that reuses one tool-call id on every turn."""
    env = {"TRAJGRADE_FAKE_MODEL": fake_openai.REUSE_IDS_MODEL}
    return _drive(tmp_path_factory.mktemp("reused-ids"), env)


@pytest.fixture(scope="session")
def article_spans(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same agent with the promptfoo article's tool spans (tool.name / tool.arguments /
    tool.output) written through the OpenTelemetry SDK: the traces file."""
    traces, _ = _drive(tmp_path_factory.mktemp("article"), {}, modes=("plain",))["plain"]
    return traces


def _drive(
    out: Path, env: dict[str, str], modes: tuple[str, ...] = MODES
) -> dict[str, tuple[Path, Path | None]]:
    results: dict[str, tuple[Path, Path | None]] = {}
    with fake_openai.serve() as base_url:
        processes = []
        for mode in modes:
            traces = out / f"{mode}.traces.json"
            logs = out / f"{mode}.logs.json" if mode == "genai-events" else None
            command = [sys.executable, str(HERE / "otel_driver.py"), mode, base_url, str(traces)]
            if logs is not None:
                command.append(str(logs))
            processes.append(
                (
                    mode,
                    subprocess.Popen(
                        command,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        env={**os.environ, **env},
                    ),
                )
            )
            results[mode] = (traces, logs)
        for mode, process in processes:
            _, stderr = process.communicate(timeout=90)
            assert process.returncode == 0, f"{mode} driver failed:\n{stderr.decode()}"
    return results


@pytest.fixture(scope="session")
def concierge(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two user turns, a sub-agent and a stdio MCP server, through real instrumentation
    (tests/importers/concierge_driver.py): the agent's traces file and the MCP server's."""
    out = tmp_path_factory.mktemp("concierge")
    traces, server_traces = out / "concierge.traces.json", out / "weather-mcp.traces.json"
    with fake_openai.serve() as base_url:
        command = [
            sys.executable,
            str(HERE / "concierge_driver.py"),
            base_url,
            str(traces),
            str(server_traces),
        ]
        process = subprocess.run(command, capture_output=True, timeout=120, check=False)
    assert process.returncode == 0, f"concierge driver failed:\n{process.stderr.decode()}"
    return traces, server_traces
