"""SIGTERM on a `trajgrade serve` process (unix sockets) with an open run: it is graded as cut
off (completion `shutdown`), sent to watchers and written to the sink before the exit (0).
SIGHUP before it reloads the routes."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from trajgrade.v1 import grader_service_pb2, grader_service_pb2_grpc

from .conftest import (
    TRACE_EXPORT,
    Watch,
    by_trace,
    eventually,
    export_request,
    regrade_lines,
    span_items,
    strip_live,
    subprocess_env,
    write_config,
    write_pb,
)

STRICT_ROUTES = """\
routes:
  - match: {service.name: "weather-*"}
    suites: [strict.yaml]
"""


async def test_sigterm_grades_open_runs_as_cut_off(spans_file: Path, tmp_path: Path) -> None:
    write_config(tmp_path)
    api, otlp_socket, sink = tmp_path / "api.sock", tmp_path / "otlp.sock", tmp_path / "out.jsonl"
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "trajgrade", "serve",
            "--listen", f"unix:{api}",
            "--otlp-grpc", f"unix:{otlp_socket}",
            "--routes", str(tmp_path / "routes.yaml"),
            "--results-jsonl", str(sink),
            "--live-idle-timeout-s", "600",
            "--live-settle-s", "0.2",
            "--routes-poll-s", "3600",  # only SIGHUP reloads the routes here
        ],
        env=subprocess_env(),
        stderr=log,
    )  # fmt: skip
    channel = grpc.aio.insecure_channel(f"unix:{api}")
    otlp_channel = grpc.aio.insecure_channel(f"unix:{otlp_socket}")
    try:
        await eventually(lambda: otlp_socket.exists() and api.exists(), what="the sockets")
        stub = grader_service_pb2_grpc.GraderServiceStub(channel)
        await channel.channel_ready()
        watch = Watch(stub.WatchResults(grader_service_pb2.WatchResultsRequest()))
        reader = asyncio.get_running_loop().create_task(watch.read())
        await otlp_channel.channel_ready()
        export = otlp_channel.unary_unary(
            TRACE_EXPORT,
            request_serializer=trace_service_pb2.ExportTraceServiceRequest.SerializeToString,
            response_deserializer=trace_service_pb2.ExportTraceServiceResponse.FromString,
        )
        first, second = by_trace(span_items(spans_file)).values()
        # A whole run first: its result shows the watcher is in place. Then a run that stays
        # open (its root never comes, the idle timeout is long).
        await export(export_request(first))
        await watch.wait(1)
        open_run = [item for item in second if item.span.parent_span_id]
        await export(export_request(open_run))
        # SIGHUP reloads the routes (the poll is an hour away): the open run goes to strict.
        (tmp_path / "routes.yaml").write_text(STRICT_ROUTES, encoding="utf-8")
        process.send_signal(signal.SIGHUP)
        serve_log = tmp_path / "serve.log"
        await eventually(lambda: "routes reloaded" in serve_log.read_text(), what="the reload")
        process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(process.wait, 60)
        assert code == 0, (tmp_path / "serve.log").read_text()
        await asyncio.wait_for(reader, 10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
        await channel.close()
        await otlp_channel.close()
    lines = sink.read_bytes().splitlines(keepends=True)
    assert len(lines) == 2
    assert lines[0].endswith(b'"completion":"settled","cut_off":false}}\n')
    assert lines[1].endswith(b'"completion":"shutdown","cut_off":true}}\n')
    pb = write_pb(tmp_path / "open.pb", export_request(open_run))
    expected = regrade_lines([pb], tmp_path / "strict.yaml", tmp_path / "e.jsonl")
    assert [strip_live(lines[1])] == expected
    # Watchers got the cut-off result, then the stream ended with UNAVAILABLE (shutting down).
    assert [(i.completion, i.cut_off) for i in watch.items] == [
        ("settled", False),
        ("shutdown", True),
    ]
    assert watch.error is not None and watch.error.code() == grpc.StatusCode.UNAVAILABLE
