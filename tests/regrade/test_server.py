"""--server: the same rows through StreamGradeTraces on a real in-process server (127.0.0.1)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from trajgrade.regrade import regrade
from trajgrade.server.app import GradingServer
from trajgrade.server.settings import Settings


@pytest.fixture(scope="module")
def server_address() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, object] = {}

    async def main() -> None:
        server = GradingServer(Settings(listen=("127.0.0.1:0",)))
        holder["ports"] = await server.start()
        holder["server"] = server
        ready.set()
        await server.wait_stopped()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    ports = holder["ports"]
    assert isinstance(ports, list)
    yield f"127.0.0.1:{ports[0]}"
    server = holder["server"]
    assert isinstance(server, GradingServer)
    asyncio.run_coroutine_threadsafe(server.shutdown(grace=1), loop).result(30)
    thread.join(30)
    loop.close()


def test_server_mode_equals_local(
    workload: dict[str, Path], tmp_path: Path, server_address: str
) -> None:
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    regrade([str(workload["jsonl"])], workload["suite"], str(local), chunk_size=64)
    summary = regrade(
        [str(workload["jsonl"])], workload["suite"], str(remote), chunk_size=64,
        server=server_address,
    )  # fmt: skip
    assert summary.traces == 601 and summary.errors == 1
    assert remote.read_bytes() == local.read_bytes()


def test_server_mode_splits_a_chunk_over_several_stream_messages(
    workload: dict[str, Path], tmp_path: Path, server_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regrade chunk larger than one stream message goes out as several chunk messages."""
    from trajgrade.regrade import server as server_engine  # noqa: PLC0415

    monkeypatch.setattr(server_engine, "_MESSAGE_TRACES", 50)
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    regrade([str(workload["jsonl"])], workload["suite"], str(local), chunk_size=256)
    summary = regrade(
        [str(workload["jsonl"])], workload["suite"], str(remote), chunk_size=256,
        server=server_address,
    )  # fmt: skip
    assert summary.traces == 601 and summary.errors == 1
    assert remote.read_bytes() == local.read_bytes()
