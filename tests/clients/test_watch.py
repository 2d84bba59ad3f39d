"""WatchResults in the Go, Node, Java and Rust clients, against live grading of real OTLP spans.

A real `trajgrade serve` runs with its OTLP/gRPC receiver, a routes file, the JSONL sink and a
bearer token. For each client, two watchers start through its conformance program's `watch`
mode (one filter per transport), then the instrumented agent of tests/live exports runs with
the real OTel SDK exporter: runs that match each filter and runs that do not. Each watcher
must print exactly the matching results, in the order the server graded them, and each
printed result must be the sink's row for it byte for byte (trace id, suite, verdict, score,
every assertion result, service, completion, cut-off) and equal, message for message, what a
Python watcher with the same filter received; the project's Python client (blocking and
asyncio) is held to the same. Without the token every client's watch fails
with UNAUTHENTICATED; on a server without live grading with FAILED_PRECONDITION; and a watch
whose deadline passes ends with an error.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import trajgrade
from google.protobuf import json_format
from live.conftest import STRICT_SUITE, WEATHER_SUITE, drive
from trajgrade.client import AsyncClient, Client, DeadlineExceededError, UnauthenticatedError
from trajgrade.errors import LiveGradingOffError
from trajgrade.live.grading import LiveResult
from trajgrade.v1 import grader_service_pb2, grader_service_pb2_grpc, result_pb2

from .clients_support import (
    BUILD_TIMEOUT_S,
    CLIENT_SPECS,
    Server,
    free_port,
    parse_output,
    require,
    trajgrade_bin,
    wait_serving,
)

pytestmark = pytest.mark.timeout(900)

TOKEN = "watch-secret"
# weather-* runs are graded against weather.yaml (they pass); dual-* runs against weather.yaml
# (pass) and strict.yaml (fails on every run of the agent).
ROUTES = """\
routes:
  - name: dual
    match: {service.name: "dual-*"}
    suites: [weather.yaml, strict.yaml]
  - name: weather
    match: {service.name: "weather-*"}
    suites: [weather.yaml]
"""
DUAL_RUNS = 2
WEATHER_RUNS = 1
WATCH_TIMEOUT_S = 180.0


def suite_id(text: str) -> str:
    return trajgrade.compile_suite(trajgrade.load_suites(text).pick(None)).suite_id


@dataclass(frozen=True)
class LiveServer:
    address: str
    unix_address: str
    otlp_endpoint: str
    metrics_url: str
    sink: Path
    log: Path

    def watchers(self) -> int:
        """The server's `trajgrade_live_watchers` gauge."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
            text = response.read().decode()
        found = re.search(r"^trajgrade_live_watchers (\S+)$", text, re.MULTILINE)
        return 0 if found is None else int(float(found.group(1)))

    def wait_watchers(self, count: int, procs: list[subprocess.Popen[str]]) -> None:
        deadline = time.monotonic() + 120
        while self.watchers() != count:
            for proc in procs:
                if proc.poll() is not None:
                    _, err = proc.communicate()
                    pytest.fail(f"a watcher exited with {proc.returncode} early:\n{err}")
            if time.monotonic() > deadline:
                pytest.fail(f"the server never held {count} watchers (it has {self.watchers()})")
            time.sleep(0.05)

    def rows(self, services: set[str], count: int) -> list[bytes]:
        """The sink's rows of runs of these services, once there are `count` of them."""
        deadline = time.monotonic() + 60
        while True:
            lines = self.sink.read_bytes().splitlines(keepends=True) if self.sink.exists() else []
            rows = [line for line in lines if json.loads(line)["live"]["service"] in services]
            if len(rows) >= count or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """`trajgrade serve` with the OTLP/gRPC receiver, routes, the sink, metrics and a token."""
    config = tmp_path_factory.mktemp("live")
    (config / "weather.yaml").write_text(WEATHER_SUITE, encoding="utf-8")
    (config / "strict.yaml").write_text(STRICT_SUITE, encoding="utf-8")
    (config / "routes.yaml").write_text(ROUTES, encoding="utf-8")
    socket_dir = Path(tempfile.mkdtemp(prefix="tg-watch-"))  # a socket path fits in 108 bytes
    address, otlp, metrics = (f"127.0.0.1:{free_port()}" for _ in range(3))
    server = LiveServer(
        address=address,
        unix_address=f"unix:{socket_dir / 'trajgrade.sock'}",
        otlp_endpoint=otlp,
        metrics_url=f"http://{metrics}/metrics",
        sink=config / "results.jsonl",
        log=config / "serve.log",
    )
    command = [
        str(trajgrade_bin()),
        "serve",
        *("--listen", server.address, "--listen", server.unix_address),
        *("--otlp-grpc", otlp, "--routes", str(config / "routes.yaml")),
        *("--results-jsonl", str(server.sink), "--live-settle-s", "0.3"),
        *("--metrics-port", metrics.rpartition(":")[2], "--auth-token", TOKEN),
    ]
    with server.log.open("wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_serving(server.address, proc)  # health needs no token
        except AssertionError as exc:
            pytest.fail(f"{exc}\n--- server log ---\n{server.log.read_text(errors='replace')}")
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(socket_dir, ignore_errors=True)


@pytest.fixture
def token_in_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent's OTLP exporter sends the token (the receivers check it as well)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", f"authorization=Bearer%20{TOKEN}")


def filter_args(request: grader_service_pb2.WatchResultsRequest) -> list[str]:
    args: list[str] = []
    for value in request.suite_ids:
        args += ["--suite", value]
    for verdict in request.verdicts:
        args += ["--verdict", result_pb2.Verdict.Name(verdict)]
    for value in request.service_names:
        args += ["--service", value]
    return args


def wants(request: grader_service_pb2.WatchResultsRequest, row: dict[str, Any]) -> bool:
    """The server's filter, applied to a sink row."""
    verdict = result_pb2.Verdict.Value(row["verdict"])
    return (
        (not request.suite_ids or row["suite_id"] in request.suite_ids)
        and (not request.verdicts or verdict in request.verdicts)
        and (not request.service_names or row["live"]["service"] in request.service_names)
    )


class PythonWatcher:
    """The reference: the same filter through the generated Python stub, read in a thread."""

    def __init__(self, address: str, request: grader_service_pb2.WatchResultsRequest, count: int):
        self.channel = grpc.insecure_channel(address)
        stub = grader_service_pb2_grpc.GraderServiceStub(self.channel)
        self.call = stub.WatchResults(
            request, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=WATCH_TIMEOUT_S
        )
        self.items: list[grader_service_pb2.WatchResultsResponse] = []
        self.error: grpc.RpcError | None = None
        self.thread = threading.Thread(target=self._read, args=(count,), daemon=True)
        self.thread.start()

    def _read(self, count: int) -> None:
        try:
            for response in self.call:
                self.items.append(response)
                if len(self.items) == count:
                    break
        except grpc.RpcError as exc:  # shown by the comparison's message
            self.error = exc

    def result(self) -> list[grader_service_pb2.WatchResultsResponse]:
        self.thread.join(WATCH_TIMEOUT_S)
        self.call.cancel()
        self.channel.close()
        return self.items


def sink_line(response: grader_service_pb2.WatchResultsResponse) -> bytes:
    """The sink row the server writes for the result a watcher received."""
    return LiveResult(
        run_key=response.trace_id,
        suite_id=response.suite_id,
        service=response.service_name,
        cut_off=response.cut_off,
        completion=response.completion,
        outcome=result_pb2.TraceOutcome(result=response.result),
    ).sink_line()


def start_client(client: str, args: list[str]) -> subprocess.Popen[str]:
    spec = CLIENT_SPECS[client]
    return subprocess.Popen(
        [*spec.command, "watch", *args],
        cwd=spec.cwd,
        env={**os.environ, **spec.env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )


def finish(proc: subprocess.Popen[str], what: str) -> str:
    try:
        out, err = proc.communicate(timeout=WATCH_TIMEOUT_S + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    assert proc.returncode == 0, f"{what} exited {proc.returncode}\n{out[-4000:]}\n{err[-4000:]}"
    return out


@pytest.mark.usefixtures("token_in_exporter")
@pytest.mark.parametrize("client", sorted(CLIENT_SPECS))
def test_client_watches_live_results(
    client: str, builds: dict[str, Future[None]], live_server: LiveServer, tmp_path: Path
) -> None:
    spec = CLIENT_SPECS[client]
    for tool in spec.tools:
        require(tool, f"the {client} client watch test")
    builds[client].result(timeout=BUILD_TIMEOUT_S)
    dual, weather = f"dual-{client}", f"weather-{client}"
    weather_id = suite_id(WEATHER_SUITE)
    # Over TCP: the failing results of this client's dual runs (its weather runs are left out by
    # service, the dual runs' passing weather results by verdict).
    failing = grader_service_pb2.WatchResultsRequest(
        service_names=[dual], verdicts=[result_pb2.VERDICT_FAIL]
    )
    # Over the unix socket: every weather.yaml result of this client's runs (strict.yaml's are
    # left out by suite).
    by_suite = grader_service_pb2.WatchResultsRequest(
        suite_ids=[weather_id], service_names=[dual, weather]
    )
    watches = [
        (failing, live_server.address, DUAL_RUNS),
        (by_suite, live_server.unix_address, DUAL_RUNS + WEATHER_RUNS),
    ]
    live_server.wait_watchers(0, [])  # the previous test's watchers are gone
    procs = [
        start_client(
            client,
            [
                *("--addr", address, "--count", str(count), "--token", TOKEN),
                *("--timeout-s", str(WATCH_TIMEOUT_S), *filter_args(request)),
            ],
        )
        for request, address, count in watches
    ]
    python = PythonWatcher(live_server.address, failing, DUAL_RUNS)
    live_server.wait_watchers(3, procs)

    drive("grpc", live_server.otlp_endpoint, tmp_path / "weather.json", WEATHER_RUNS, weather)
    drive("grpc", live_server.otlp_endpoint, tmp_path / "dual.json", DUAL_RUNS, dual)

    outputs = [finish(proc, f"{client} watch") for proc in procs]
    reference = python.result()
    rows = live_server.rows({dual, weather}, WEATHER_RUNS + 2 * DUAL_RUNS)
    assert len(rows) == WEATHER_RUNS + 2 * DUAL_RUNS, live_server.log.read_text()[-4000:]
    parsed_rows = [json.loads(row) for row in rows]
    assert {row["verdict"] for row in parsed_rows} == {"VERDICT_PASS", "VERDICT_FAIL"}

    for (request, _, count), output in zip(watches, outputs, strict=True):
        pairs = zip(rows, parsed_rows, strict=True)
        want = [row for row, fields in pairs if wants(request, fields)]
        assert len(want) == count < len(rows)  # the filter left some out
        lines = parse_output(output)
        assert [line["rpc"] for line in lines] == ["WatchResults"] * count, output
        assert [line["index"] for line in lines] == list(range(count)), output
        got = [
            json_format.ParseDict(line["response"], grader_service_pb2.WatchResultsResponse())
            for line in lines
        ]
        assert [sink_line(response) for response in got] == want, f"{client} {request}"
        assert all(not r.cut_off and r.completion == "settled" for r in got)
        if request is failing:
            assert got == reference, f"{client}: differs from the Python watcher ({python.error})"


@pytest.mark.parametrize("client", sorted(CLIENT_SPECS))
def test_client_watch_without_token_is_unauthenticated(
    client: str, builds: dict[str, Future[None]], live_server: LiveServer
) -> None:
    spec = CLIENT_SPECS[client]
    for tool in spec.tools:
        require(tool, f"the {client} client watch test")
    builds[client].result(timeout=BUILD_TIMEOUT_S)
    proc = start_client(client, ["--addr", live_server.address, "--count", "1"])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, (out, err)
    assert out == ""
    assert re.search("unauthenticated", err, re.IGNORECASE), err


@pytest.mark.parametrize("client", sorted(CLIENT_SPECS))
def test_client_watch_errors_carry_the_status(
    client: str, builds: dict[str, Future[None]], server: Server, live_server: LiveServer
) -> None:
    """A server without live grading answers FAILED_PRECONDITION (LIVE_GRADING_OFF); a watch
    whose deadline passes with nothing to report ends, as an error, when it was told to."""
    spec = CLIENT_SPECS[client]
    for tool in spec.tools:
        require(tool, f"the {client} client watch test")
    builds[client].result(timeout=BUILD_TIMEOUT_S)
    proc = start_client(client, ["--addr", server.address, "--count", "1"])
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out) == (1, ""), err
    assert re.search("failed.?precondition", err, re.IGNORECASE), err
    assert "live grading is off" in err, err

    started = time.monotonic()
    proc = start_client(
        client,
        [
            *("--addr", live_server.address, "--count", "1", "--token", TOKEN),
            *("--service", "no-such-service", "--timeout-s", "1"),
        ],
    )
    out, err = proc.communicate(timeout=120)
    assert (proc.returncode, out) == (1, ""), err
    # gRPC's DEADLINE_EXCEEDED (Go, Node, Java) or the caller's tokio timeout (Rust).
    assert re.search("deadline.?exceeded|timed out", err, re.IGNORECASE), err
    assert time.monotonic() - started < 60


class ClientWatcher:
    """The project's own Python client (blocking, or asyncio in its own loop) in a thread."""

    def __init__(self, address: str, filters: dict[str, Any], count: int, *, aio: bool):
        self.items: list[grader_service_pb2.WatchResultsResponse] = []
        self.error: BaseException | None = None
        run = self._read_aio if aio else self._read
        self.thread = threading.Thread(target=run, args=(address, filters, count), daemon=True)
        self.thread.start()

    def _read(self, address: str, filters: dict[str, Any], count: int) -> None:
        try:
            with Client(address, token=TOKEN) as client:
                for response in client.watch_results(timeout=WATCH_TIMEOUT_S, **filters):
                    self.items.append(response)
                    if len(self.items) == count:
                        break
        except Exception as exc:  # shown by the comparison's message
            self.error = exc

    def _read_aio(self, address: str, filters: dict[str, Any], count: int) -> None:
        async def read() -> None:
            async with AsyncClient(address, token=TOKEN) as client:
                async for response in client.watch_results(timeout=WATCH_TIMEOUT_S, **filters):
                    self.items.append(response)
                    if len(self.items) == count:
                        break

        try:
            asyncio.run(read())
        except Exception as exc:  # shown by the comparison's message
            self.error = exc

    def result(self) -> list[grader_service_pb2.WatchResultsResponse]:
        self.thread.join(WATCH_TIMEOUT_S)
        assert not self.thread.is_alive(), "the watcher never got its results"
        return self.items


@pytest.mark.usefixtures("token_in_exporter")
def test_python_client_watches_live_results(live_server: LiveServer, tmp_path: Path) -> None:
    """`Client.watch_results` and `AsyncClient.watch_results` receive exactly the filtered
    results, each the sink's row and what the generated stub received; leaving the loop ends
    the call (the server's watcher gauge goes back to zero)."""
    dual, weather = "dual-python", "weather-python"
    weather_id = suite_id(WEATHER_SUITE)
    failing = grader_service_pb2.WatchResultsRequest(
        service_names=[dual], verdicts=[result_pb2.VERDICT_FAIL]
    )
    by_suite = grader_service_pb2.WatchResultsRequest(
        suite_ids=[weather_id], service_names=[dual, weather]
    )
    live_server.wait_watchers(0, [])
    sync_watch = ClientWatcher(
        live_server.address, {"service_names": [dual], "verdicts": ["fail"]}, DUAL_RUNS, aio=False
    )
    aio_watch = ClientWatcher(
        live_server.unix_address,
        {"suite_ids": [weather_id], "service_names": (dual, weather)},
        DUAL_RUNS + WEATHER_RUNS,
        aio=True,
    )
    stub = PythonWatcher(live_server.address, failing, DUAL_RUNS)
    live_server.wait_watchers(3, [])

    drive("grpc", live_server.otlp_endpoint, tmp_path / "weather.json", WEATHER_RUNS, weather)
    drive("grpc", live_server.otlp_endpoint, tmp_path / "dual.json", DUAL_RUNS, dual)

    got_sync, got_aio, reference = sync_watch.result(), aio_watch.result(), stub.result()
    rows = live_server.rows({dual, weather}, WEATHER_RUNS + 2 * DUAL_RUNS)
    assert len(rows) == WEATHER_RUNS + 2 * DUAL_RUNS, live_server.log.read_text()[-4000:]
    parsed_rows = [json.loads(row) for row in rows]
    for request, got, error in (
        (failing, got_sync, sync_watch.error),
        (by_suite, got_aio, aio_watch.error),
    ):
        want = [
            row for row, fields in zip(rows, parsed_rows, strict=True) if wants(request, fields)
        ]
        assert len(want) < len(rows), "the filter left nothing out"
        assert [sink_line(response) for response in got] == want, error
    assert got_sync == reference, (sync_watch.error, stub.error)
    live_server.wait_watchers(0, [])  # both loops left: their calls were cancelled


def test_python_client_watch_errors(server: Server, live_server: LiveServer) -> None:
    """The statuses of a watch as trajgrade exceptions; bad filters refused before any call."""
    with Client(server.address) as client:
        with pytest.raises(LiveGradingOffError, match="live grading is off"):
            next(client.watch_results())
        with pytest.raises(ValueError, match="unknown verdict 'maybe'"):
            client.watch_results(verdicts=["maybe"])
        with pytest.raises(ValueError, match="unknown verdict 0"):
            client.watch_results(verdicts=[result_pb2.VERDICT_UNSPECIFIED])
        with pytest.raises(TypeError, match="service_names takes a list of strings"):
            client.watch_results(service_names="weather-agent")
    with Client(live_server.address) as client, pytest.raises(UnauthenticatedError):
        next(client.watch_results())
    with Client(live_server.address, token=TOKEN) as client:
        started = time.monotonic()
        with pytest.raises(DeadlineExceededError):
            next(client.watch_results(service_names=["no-such-service"], timeout=1))
        assert time.monotonic() - started < 30

    async def aio_errors() -> None:
        async with AsyncClient(server.address) as client:
            with pytest.raises(LiveGradingOffError):
                await anext(client.watch_results())

    asyncio.run(aio_errors())
