"""OTLP/HTTP by hand: JSON bodies with hex ids, gzip, the answer in the request's content type,
400 with a Status body for a malformed body, 415 for an unknown content type, 401 without the
token."""

from __future__ import annotations

import base64
import gzip
import json
import threading
from pathlib import Path
from typing import Any

import aiohttp
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from trajgrade.live import otlp_http

from .conftest import (
    LiveFactory,
    by_trace,
    eventually,
    export_request,
    regrade_lines,
    span_items,
    strip_live,
    write_pb,
)


def otlp_json(request: trace_service_pb2.ExportTraceServiceRequest) -> dict[str, Any]:
    """OTLP/JSON as the specification writes it: lowerCamelCase, hex trace and span ids."""
    document = json_format.MessageToDict(request)

    def hexed(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: base64.b64decode(v).hex()
                if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
                else hexed(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [hexed(v) for v in value]
        return value

    return hexed(document)  # type: ignore[no-any-return]


async def test_json_gzip_and_protobuf_bodies(
    make_live: LiveFactory, spans_file: Path, tmp_path: Path
) -> None:
    live = await make_live()
    watch = await live.watch()
    run = next(iter(by_trace(span_items(spans_file)).values()))
    url = live.http_endpoint + "/v1/traces"
    async with aiohttp.ClientSession() as session:
        body = gzip.compress(json.dumps(otlp_json(export_request(run[:4]))).encode())
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        async with session.post(url, data=body, headers=headers) as response:
            assert response.status == 200
            assert response.content_type == "application/json"
            assert await response.json() == {}
        body = export_request(run[4:]).SerializeToString()
        headers = {"Content-Type": "application/x-protobuf"}
        async with session.post(url, data=body, headers=headers) as response:
            assert response.status == 200
            assert response.content_type == "application/x-protobuf"
            answer = trace_service_pb2.ExportTraceServiceResponse.FromString(await response.read())
            assert not answer.HasField("partial_success")
    await watch.wait(1)
    await eventually(lambda: len(live.sink_lines()) == 1)
    expected = regrade_lines(
        [write_pb(tmp_path / "run.pb", export_request(run))],
        live.suite("weather"),
        tmp_path / "e.jsonl",
    )
    assert [strip_live(line) for line in live.sink_lines()] == expected


async def test_partial_success_in_json(make_live: LiveFactory, spans_file: Path) -> None:
    live = await make_live(live_max_spans_per_trace=2)
    run = next(iter(by_trace(span_items(spans_file)).values()))
    async with aiohttp.ClientSession() as session:
        body = json.dumps(otlp_json(export_request(run[:3]))).encode()
        async with session.post(
            live.http_endpoint + "/v1/traces",
            data=body,
            headers={"Content-Type": "application/json; charset=utf-8"},
        ) as response:
            assert response.status == 200
            answer = await response.json()
    assert answer["partialSuccess"]["rejectedSpans"] == "1"
    assert "spans_per_trace" in answer["partialSuccess"]["errorMessage"]


async def test_malformed_unknown_and_unauthenticated(
    make_live: LiveFactory, spans_file: Path
) -> None:
    live = await make_live(auth_token="s3cret")
    url = live.http_endpoint + "/v1/traces"
    auth = {"Authorization": "Bearer s3cret"}
    async with aiohttp.ClientSession() as session:
        async with session.post(
            url, data=b"\x0a\xff\xff", headers={"Content-Type": "application/x-protobuf", **auth}
        ) as response:
            assert response.status == 400
            status = status_pb2.Status.FromString(await response.read())
            assert status.code == code_pb2.INVALID_ARGUMENT
            assert "malformed OTLP traces export" in status.message
        async with session.post(
            url, data=b"{not json", headers={"Content-Type": "application/json", **auth}
        ) as response:
            assert response.status == 400
            assert (await response.json())["code"] == code_pb2.INVALID_ARGUMENT
        async with session.post(
            url, data=b"spans", headers={"Content-Type": "text/plain", **auth}
        ) as response:
            assert response.status == 415
        async with session.post(
            url, data=b"", headers={"Content-Type": "application/x-protobuf"}
        ) as response:
            assert response.status == 401
            status = status_pb2.Status.FromString(await response.read())
            assert status.code == code_pb2.UNAUTHENTICATED
        run = next(iter(by_trace(span_items(spans_file)).values()))
        async with session.post(
            live.http_endpoint + "/v1/traces",
            data=export_request(run).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf", **auth},
        ) as response:
            assert response.status == 200
    malformed = live.metric(
        "trajgrade_live_export_requests_total",
        signal="traces",
        transport="http",
        result="malformed",
    )
    assert malformed == 2
    assert live.metric("trajgrade_live_spans_total", outcome="accepted") == len(run)


async def test_large_json_bodies_are_parsed_off_the_event_loop(
    make_live: LiveFactory, spans_file: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """The protobuf JSON mapping is Python (about 0.3 s a MB): a JSON body from
    JSON_OFF_LOOP_BYTES is parsed on the receiver's own thread, so the loop goes on assembling
    and grading meanwhile; a small one is parsed on the loop (no hand-over). Both are graded
    as their protobuf form is, and a large malformed body is still a 400."""
    threads: list[tuple[int, str]] = []
    parse = otlp_http._parse

    def recording(body: bytes, content_type: str, message: Any) -> None:
        threads.append((len(body), threading.current_thread().name))
        parse(body, content_type, message)

    monkeypatch.setattr(otlp_http, "_parse", recording)
    live = await make_live()
    runs = list(by_trace(span_items(spans_file)).values())[:2]
    large = export_request(runs[0])
    # Padding an attribute the suite does not read: the body is over the threshold.
    large.resource_spans[0].scope_spans[0].spans[0].attributes.add(
        key="padding", value=common_pb2.AnyValue(string_value="x" * otlp_http.JSON_OFF_LOOP_BYTES)
    )
    small = export_request(runs[1])
    url = live.http_endpoint + "/v1/traces"
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as session:
        for request in (large, small):
            body = json.dumps(otlp_json(request)).encode()
            async with session.post(url, data=body, headers=headers) as response:
                assert response.status == 200, await response.text()
        malformed = b'{"resourceSpans": [' + b" " * otlp_http.JSON_OFF_LOOP_BYTES + b"}"
        async with session.post(url, data=malformed, headers=headers) as response:
            assert response.status == 400
            assert (await response.json())["code"] == code_pb2.INVALID_ARGUMENT
    loop_thread = threading.current_thread().name  # the test's loop is the server's
    assert [name for _, name in threads[:2]] == ["trajgrade-otlp-json_0", loop_thread]
    assert threads[0][0] >= otlp_http.JSON_OFF_LOOP_BYTES > threads[1][0]
    await eventually(lambda: len(live.sink_lines()) == 2)
    expected = regrade_lines(
        [write_pb(tmp_path / "runs.pb", export_request([*runs[0], *runs[1]]))],
        live.suite("weather"),
        tmp_path / "e.jsonl",
    )
    assert sorted(strip_live(line) for line in live.sink_lines()) == sorted(expected)
