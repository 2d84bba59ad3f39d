"""--server: the same rows through StreamGradeTraces on a real in-process server (127.0.0.1)
that requires a bearer token, through the project's client."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from trajgrade.client import Client
from trajgrade.commands import regrade as regrade_command
from trajgrade.errors import ServiceError
from trajgrade.importers.parquet import SCHEMA
from trajgrade.regrade import arrowcols, regrade
from trajgrade.regrade.arrowjson import json_lines
from trajgrade.server.app import GradingServer
from trajgrade.server.settings import Settings

TOKEN = "regrade-test-token"


@pytest.fixture(scope="module")
def server_address() -> Iterator[str]:
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, object] = {}

    async def main() -> None:
        server = GradingServer(Settings(listen=("127.0.0.1:0",), auth_token=TOKEN))
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
    with Client(server_address, token=TOKEN) as client:
        summary = regrade(
            [str(workload["jsonl"])], workload["suite"], str(remote), chunk_size=64,
            server=client,
        )  # fmt: skip
    assert summary.traces == 601 and summary.errors == 1
    _same_rows(remote, local)


@pytest.mark.parametrize("layout", ["native", "inferred"])
def test_server_mode_equals_local_for_parquet(
    layout: str, workload: dict[str, Path], tmp_path: Path, server_address: str
) -> None:
    """Parquet for a server is read as the local engine reads it: by the core from the Arrow
    buffers (native schema), or as JSON lines (a layout pyarrow inferred from dicts, with a
    row that is not a trace); the rows equal the local engine's, error row included."""
    rows = [json.loads(line) for line in workload["clean"].read_bytes().splitlines()]
    if layout == "native":
        for row in rows:
            row["metadata"] = list((row.get("metadata") or {}).items())
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
    else:
        broken = json.loads(json.dumps(rows[0]))
        broken["id"], broken["calls"][0]["start_time_unix_nano"] = "broken", -1
        rows.insert(100, broken)
        table = pa.Table.from_pylist(rows)
        assert json_lines(table.to_batches()[0]) is not None
    source = tmp_path / "traces.parquet"
    pq.write_table(table, source, row_group_size=128)
    assert (arrowcols.columns(table.to_batches()[0]) is not None) == (layout == "native")
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    regrade([str(source)], workload["suite"], str(local), chunk_size=64)
    with Client(server_address, token=TOKEN) as client:
        summary = regrade(
            [str(source)], workload["suite"], str(remote), chunk_size=64, server=client
        )
    assert summary.traces == len(rows)
    assert remote.read_bytes() == local.read_bytes()
    if layout == "inferred":
        assert summary.errors == 1
        assert b'"field":"traces.parquet:row 101"' in local.read_bytes()


def _same_rows(remote: Path, local: Path) -> None:
    """The local engine's rows byte for byte, the bad line's error row included: the core
    decodes the lines for the server (`_core.jsonl_traces`) with the decoder that words the
    local engine's errors, at the same `file:line N`."""
    assert remote.read_bytes() == local.read_bytes()
    assert b'"field":"traces.jsonl:line ' in local.read_bytes()


def test_server_mode_without_the_token_is_refused(
    workload: dict[str, Path], tmp_path: Path, server_address: str
) -> None:
    with pytest.raises(ServiceError, match=r"RegisterSuite on 127\.0\.0\.1:\d+: "):
        regrade(
            [str(workload["jsonl"])], workload["suite"], str(tmp_path / "out.jsonl"),
            server=server_address,
        )  # fmt: skip


def test_cli_server_flags(
    workload: dict[str, Path],
    tmp_path: Path,
    server_address: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--token-file or TRAJGRADE_TOKEN give the token; without one the run exits 2 saying
    why; the rows equal the local engine's (a chunk of 256 goes out as several messages)."""
    local = tmp_path / "local.jsonl"
    regrade([str(workload["jsonl"])], workload["suite"], str(local), chunk_size=256)
    base = [str(workload["jsonl"]), "--suite", str(workload["suite"]), "--server", server_address]
    base += ["--chunk-size", "256", "--no-progress"]
    monkeypatch.delenv(regrade_command.TOKEN_ENV, raising=False)
    assert regrade_command.main([*base, "--out", str(tmp_path / "refused.jsonl")]) == 2
    assert "UNAUTHENTICATED" in capsys.readouterr().err.replace("\n", " ").upper()

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    by_file = tmp_path / "by-file.jsonl"
    with_file = [*base, "--token-file", str(token_file)]
    assert regrade_command.main([*with_file, "--out", str(by_file)]) == 0
    _same_rows(by_file, local)

    monkeypatch.setenv(regrade_command.TOKEN_ENV, TOKEN)
    by_env = tmp_path / "by-env.jsonl"
    assert regrade_command.main([*base, "--out", str(by_env)]) == 0
    _same_rows(by_env, local)

    token_file.write_text(" \n", encoding="utf-8")
    assert regrade_command.main([*with_file, "--out", str(by_env)]) == 2
    assert "the file is empty" in capsys.readouterr().err
