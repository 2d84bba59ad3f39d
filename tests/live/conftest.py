"""Live grading tests: a real server with its OTLP receivers, real exporters, real regrade."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace_pb2
from trajgrade import regrade as regrade_api
from trajgrade.importers import otlp
from trajgrade.importers.report import ImportReport
from trajgrade.server.app import GradingServer
from trajgrade.server.settings import Settings
from trajgrade.v1 import grader_service_pb2, grader_service_pb2_grpc

HERE = Path(__file__).parent
IMPORTERS = HERE.parent / "importers"
sys.path.insert(0, str(IMPORTERS))

import fake_openai  # type: ignore[import-not-found]  # noqa: E402 - from IMPORTERS

WEATHER_SUITE = """\
name: weather
assertions:
  - tool_sequence:
      steps:
        - tool: get_weather
        - tool: get_time
  - forbidden_tools:
      tools: ["delete_*"]
  - tool_call_args:
      tool: get_weather
      match:
        mode: MATCH_MODE_SUBSET
        args_json: '{"city": "Paris"}'
"""
# Fails on every run of the agent: it never books a table.
STRICT_SUITE = """\
name: strict
assertions:
  - tool_sequence:
      steps:
        - tool: get_weather
        - tool: book_table
  - no_repeated_calls: {}
"""
ROUTES = """\
routes:
  - name: dual
    match:
      service.name: "dual-*"
      gen_ai.agent.name: weather_agent
    suites: [weather.yaml, strict.yaml]
  - name: weather
    match:
      service.name: "weather-*"
    suites: [weather.yaml]
"""
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOGS_EXPORT = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


async def eventually(check: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Poll `check` until it holds (no fixed sleeps that race), failing after `timeout`."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.01)


def drive(
    protocol: str, endpoint: str, out: Path, runs: int = 1, service: str = "weather-agent"
) -> Path:
    """Run the instrumented agent (tests/live/live_driver.py): spans to `endpoint` by the real
    OTLP exporter and to the OTLP JSON file `out`."""
    with fake_openai.serve() as base_url:
        command = [
            sys.executable,
            str(HERE / "live_driver.py"),
            protocol,
            endpoint,
            base_url,
            str(out),
            str(runs),
            service,
        ]
        done = subprocess.run(command, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, f"driver failed:\n{done.stderr.decode()}"
    return out


@pytest.fixture(scope="session")
def spans_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs of the agent, exported to a file only (for tests that send spans by hand)."""
    out = tmp_path_factory.mktemp("spans") / "two-runs.traces.json"
    return drive("none", "-", out, runs=2)


@dataclass
class SpanItem:
    """One span with its resource and scope, as a test re-sends it."""

    resource: Any
    scope: Any
    span: otlp_trace_pb2.Span

    @property
    def trace_id(self) -> str:
        return self.span.trace_id.hex()


def span_items(path: Path) -> list[SpanItem]:
    """Every span of an OTLP file, in file order."""
    items = []
    for request in otlp.load_trace_requests(path, ImportReport()):
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    items.append(SpanItem(resource_spans.resource, scope_spans.scope, span))
    return items


def by_trace(items: list[SpanItem]) -> dict[str, list[SpanItem]]:
    out: dict[str, list[SpanItem]] = {}
    for item in items:
        out.setdefault(item.trace_id, []).append(item)
    return out


def export_request(
    items: list[SpanItem], service: str | None = None
) -> trace_service_pb2.ExportTraceServiceRequest:
    """One export request holding `items` in this order (one ResourceSpans per item, so the
    order is kept exactly); `service` renames the resource's service.name."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    for item in items:
        resource_spans = request.resource_spans.add()
        resource_spans.resource.CopyFrom(item.resource)
        if service is not None:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    attribute.value.string_value = service
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.CopyFrom(item.scope)
        scope_spans.spans.add().CopyFrom(item.span)
    return request


def write_pb(path: Path, request: trace_service_pb2.ExportTraceServiceRequest) -> Path:
    """The spans of a request as an OTLP protobuf file (`trajgrade regrade` reads it)."""
    path.write_bytes(request.SerializeToString())
    return path


def regrade_lines(inputs: list[Path], suite: Path, out: Path) -> list[bytes]:
    """`trajgrade regrade` of the files: its JSONL rows."""
    regrade_api.regrade([str(p) for p in inputs], str(suite), str(out))
    return out.read_bytes().splitlines(keepends=True)


def strip_live(line: bytes) -> bytes:
    """A sink row without its trailing `live` key: the regrade row, byte for byte."""
    head, sep, _ = line.rpartition(b',"live":')
    assert sep, line
    return head + b"}\n"


@dataclass
class Watch:
    """A WatchResults call read in the background."""

    call: Any
    items: list[grader_service_pb2.WatchResultsResponse] = field(default_factory=list)
    error: grpc.aio.AioRpcError | None = None
    done: bool = False

    async def read(self) -> None:
        try:
            async for response in self.call:
                self.items.append(response)
        except grpc.aio.AioRpcError as exc:
            self.error = exc
        finally:
            self.done = True

    async def wait(self, count: int, timeout: float = 30.0) -> list[Any]:
        await eventually(lambda: len(self.items) >= count, timeout, f"{count} results")
        return self.items


@dataclass
class Live:
    """A started server with live grading, and what the tests reach it with."""

    server: GradingServer
    channel: grpc.aio.Channel
    otlp_channel: grpc.aio.Channel
    stub: grader_service_pb2_grpc.GraderServiceStub
    dir: Path
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def grpc_endpoint(self) -> str:
        return f"127.0.0.1:{self.server.otlp_grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.otlp_http_port}"

    @property
    def sink(self) -> Path:
        return self.dir / "results.jsonl"

    @property
    def routes(self) -> Path:
        return self.dir / "routes.yaml"

    def suite(self, name: str) -> Path:
        return self.dir / f"{name}.yaml"

    async def watch(self, **filters: Any) -> Watch:
        """Start WatchResults and return once the server holds the watcher."""
        before = len(self.server.live.hub)
        watch = Watch(self.stub.WatchResults(grader_service_pb2.WatchResultsRequest(**filters)))
        self.tasks.append(asyncio.get_running_loop().create_task(watch.read()))
        await eventually(lambda: len(self.server.live.hub) > before, what="the watcher")
        return watch

    async def export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, **kwargs: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        call = self.otlp_channel.unary_unary(
            TRACE_EXPORT,
            request_serializer=trace_service_pb2.ExportTraceServiceRequest.SerializeToString,
            response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
        )
        response: trace_service_pb2.ExportTraceServiceResponse = await call(request, **kwargs)
        return response

    def metric(self, name: str, **labels: str) -> float:
        value = self.server.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    def sink_lines(self) -> list[bytes]:
        return self.sink.read_bytes().splitlines(keepends=True) if self.sink.exists() else []


LiveFactory = Callable[..., Awaitable[Live]]


def write_config(directory: Path, routes: str = ROUTES) -> None:
    (directory / "weather.yaml").write_text(WEATHER_SUITE, encoding="utf-8")
    (directory / "strict.yaml").write_text(STRICT_SUITE, encoding="utf-8")
    (directory / "routes.yaml").write_text(routes, encoding="utf-8")


@pytest.fixture
async def make_live(tmp_path: Path) -> AsyncIterator[LiveFactory]:
    """Start servers with live grading on 127.0.0.1:0; each is drained afterwards."""
    started: list[Live] = []

    async def make(routes: str = ROUTES, **overrides: Any) -> Live:
        directory = tmp_path / f"server{len(started)}"
        directory.mkdir()
        write_config(directory, routes)
        values: dict[str, Any] = {
            "listen": ("127.0.0.1:0",),
            "otlp_grpc": "127.0.0.1:0",
            "otlp_http": "127.0.0.1:0",
            "routes": str(directory / "routes.yaml"),
            "results_jsonl": str(directory / "results.jsonl"),
            "live_settle_s": 0.3,
            "live_idle_timeout_s": 30.0,
            "routes_poll_s": 0.05,
        }
        values.update(overrides)
        server = GradingServer(Settings.from_sources(environ={}, overrides=values))
        ports = await server.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{ports[0]}")
        otlp_target = values["otlp_grpc"]
        if otlp_target is not None and not otlp_target.startswith("unix:"):
            otlp_target = f"127.0.0.1:{server.otlp_grpc_port}"
        otlp_channel = grpc.aio.insecure_channel(otlp_target or "127.0.0.1:1")
        live = Live(
            server,
            channel,
            otlp_channel,
            grader_service_pb2_grpc.GraderServiceStub(channel),
            directory,
        )
        started.append(live)
        return live

    yield make
    for live in started:
        await live.server.shutdown(grace=0)
        for task in live.tasks:
            task.cancel()
        await live.channel.close()
        await live.otlp_channel.close()


def subprocess_env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}
