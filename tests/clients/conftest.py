"""Fixtures for the cross-language client tests: a real `trajgrade serve`, the vector."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import trajgrade
from google.protobuf import json_format
from trajgrade.v1 import grader_service_pb2, result_pb2

from .clients_support import (
    CLIENT_SPECS,
    VECTORS,
    Expected,
    Server,
    build,
    free_port,
    missing_toolchains,
    start_server,
    stop_server,
    wait_serving,
)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Repeat every skipped toolchain at the end, where nobody can miss it."""
    missing = missing_toolchains()
    if missing:
        terminalreporter.section("client tests skipped for missing toolchains", sep="!")
        for line in missing:
            terminalreporter.line(line)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`trajgrade serve --listen 127.0.0.1:<free port> --listen unix:<socket>`, as a user would."""
    address = f"127.0.0.1:{free_port()}"
    # Short: a unix socket path must fit in 108 bytes.
    socket_dir = Path(tempfile.mkdtemp(prefix="tg-clients-"))
    unix_address = f"unix:{socket_dir / 'trajgrade.sock'}"
    log = tmp_path_factory.mktemp("server") / "serve.log"
    proc = start_server([address, unix_address], log)
    try:
        try:
            wait_serving(address, proc)
        except AssertionError as exc:
            stop_server(proc)
            pytest.fail(f"{exc}\n--- server log ---\n{log.read_text(errors='replace')[-4000:]}")
        yield Server(address=address, unix_address=unix_address, log=log)
    finally:
        stop_server(proc)
        shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def vectors() -> dict[str, Any]:
    with VECTORS.open(encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


@pytest.fixture(scope="session")
def expected(vectors: dict[str, Any]) -> Expected:
    """`trajgrade.compile_suite(suite).grade(trace)` for every trace of the vector, and what
    the library makes of every ImportSuite request's text."""
    compiled = trajgrade.compile_suite(vectors["suite"])
    outcomes = [
        result_pb2.TraceOutcome(result=compiled.grade(trace)) for trace in vectors["traces"]
    ]
    imports = [_imported(request) for request in vectors["imports"]]
    return Expected(suite_id=compiled.suite_id, outcomes=outcomes, imports=imports)


def _imported(fields: dict[str, Any]) -> grader_service_pb2.ImportSuiteResponse:
    request = json_format.ParseDict(fields, grader_service_pb2.ImportSuiteRequest())
    found = trajgrade.load_suites(
        request.text,
        format=request.format or "auto",
        allow_unsupported=request.skip_unsupported,
    )
    suite = found.pick(request.name or None)
    return grader_service_pb2.ImportSuiteResponse(
        suite=suite,
        suite_id=trajgrade.compile_suite(suite).suite_id,
        unsupported=found.skipped,
        format=found.format,
    )


@pytest.fixture(scope="session")
def builds() -> Iterator[dict[str, Future[None]]]:
    """Every client whose toolchain is present starts building at once, in the background."""
    from shutil import which  # noqa: PLC0415 -- only to decide what to start

    with ThreadPoolExecutor(max_workers=len(CLIENT_SPECS)) as pool:
        futures = {
            name: pool.submit(build, spec)
            for name, spec in CLIENT_SPECS.items()
            if all(which(tool) for tool in spec.tools)
        }
        yield futures
