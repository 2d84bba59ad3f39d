"""Fixtures for the Python client tests: real servers, each on its own thread and event loop.

The blocking `Client` must not share an event loop with the server it calls, so every server
here runs `GradingServer` (the code `trajgrade serve` runs) in a thread of its own. A server
can be stopped and started again on the same port, or started late, to exercise retries.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from trajgrade.server.app import GradingServer
from trajgrade.server.settings import Settings

SUITE: dict[str, Any] = {
    "name": "refunds",
    "assertions": [
        {"tool_called": {"tool": "lookup_order"}},
        {
            "tool_call_args": {
                "tool": "issue_refund",
                "match": {"mode": "MATCH_MODE_SUBSET", "args_json": '{"amount_cents": 5000}'},
            }
        },
        {"forbidden_tools": {"tools": ["delete_*"]}},
    ],
}


def trace(trace_id: str, amount: int = 5000) -> dict[str, Any]:
    """A trace that passes SUITE when amount is 5000 and fails its argument check otherwise."""
    return {
        "id": trace_id,
        "calls": [
            {"name": "lookup_order", "arguments_json": '{"order_id": "A1"}', "result": "{}"},
            {"name": "issue_refund", "arguments_json": f'{{"amount_cents": {amount}}}'},
        ],
        "final_answer": "Refunded.",
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThreadedServer:
    """A real GradingServer on a fixed address, served from a background thread."""

    def __init__(self, address: str, grader: Any = None, **overrides: Any) -> None:
        self.address = address
        self.target = address
        self._grader = grader
        self._overrides = overrides
        self.server: GradingServer | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def start(self) -> ThreadedServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        async def main() -> None:
            settings = Settings.from_sources(
                environ={}, overrides={"listen": (self.address,), **self._overrides}
            )
            server = GradingServer(settings, grader=self._grader)
            try:
                await server.start()
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                raise
            self.server = server
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            ready.set()
            await self._stop.wait()
            await server.shutdown(grace=0)

        self._thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
        self._thread.start()
        assert ready.wait(30), "server did not start"
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        self._thread = None

    @property
    def grader(self) -> Any:
        assert self.server is not None
        return self.server.grader

    def answered(self, rpc: str, code: str = "OK") -> int:
        """How many `rpc` calls this server answered with `code` (from its own metrics)."""
        assert self.server is not None
        total = 0
        for metric in self.server.metrics.requests.collect():
            for sample in metric.samples:
                labels = sample.labels
                if sample.name.endswith("_total") and labels == {"rpc": rpc, "code": code}:
                    total += int(sample.value)
        return total


@pytest.fixture
def servers() -> Iterator[list[ThreadedServer]]:
    """A list to put servers in; every one is stopped after the test."""
    started: list[ThreadedServer] = []
    yield started
    for server in started:
        server.stop()


@pytest.fixture
def make_server(servers: list[ThreadedServer]) -> Any:
    def make(*, start: bool = True, grader: Any = None, **overrides: Any) -> ThreadedServer:
        server = ThreadedServer(f"127.0.0.1:{free_port()}", grader=grader, **overrides)
        servers.append(server)
        return server.start() if start else server

    return make


@pytest.fixture
def server(make_server: Any) -> ThreadedServer:
    server: ThreadedServer = make_server()
    return server


@pytest.fixture
def unix_server(servers: list[ThreadedServer]) -> Iterator[ThreadedServer]:
    directory = Path(tempfile.mkdtemp(prefix="tg-client-"))  # short: sun_path is 108 bytes
    server = ThreadedServer(f"unix:{directory / 'tg.sock'}")
    servers.append(server)
    yield server.start()
    server.stop()
