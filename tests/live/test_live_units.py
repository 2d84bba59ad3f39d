"""The live pieces on their own: settings and flags, the assembler's rules, the watch hub's
bound, the sink's rotation."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry
from trajgrade import _core
from trajgrade.live.assembly import (
    BYTES_CAP,
    IDLE_TIMEOUT,
    SETTLED,
    Assembler,
    AssemblyConfig,
    span_rows,
)
from trajgrade.live.graded import FORGOT_CAP, FORGOT_WINDOW, GradedIds
from trajgrade.live.grading import LiveResult, _incoming
from trajgrade.live.records import LiveSpan
from trajgrade.live.sink import JsonlSink, SinkWriter
from trajgrade.live.watch import TOO_SLOW, Published, WatchHub
from trajgrade.regrade.diff import diff_files
from trajgrade.server.metrics import LiveMetrics
from trajgrade.server.settings import Settings, SettingsError
from trajgrade.v1 import grader_service_pb2, result_pb2


def parse(*argv: str, environ: dict[str, str] | None = None) -> Settings:
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    return Settings.from_namespace(parser.parse_args(list(argv)), environ or {})


def test_otlp_flags_default_env_and_checks() -> None:
    settings = parse("--otlp-grpc", "--otlp-http", "default", "--routes", "r.yaml")
    assert settings.otlp_grpc_address == "127.0.0.1:4317"
    assert settings.otlp_http_address == "127.0.0.1:4318"
    assert parse().live_enabled is False
    settings = parse(
        environ={"TRAJGRADE_OTLP_HTTP": "unix:/run/otlp.sock", "TRAJGRADE_ROUTES": "r"}
    )
    assert (settings.otlp_grpc_address, settings.otlp_http_address) == (None, "unix:/run/otlp.sock")
    with pytest.raises(SettingsError, match="need --routes"):
        parse("--otlp-grpc")
    with pytest.raises(SettingsError, match="grade or refuse"):
        parse("--live-on-cap", "drop")
    with pytest.raises(SettingsError, match=r"must end in \.jsonl"):
        parse("--results-jsonl", "out.parquet")


def span(
    trace: str,
    span_id: str,
    *,
    parent: str = "",
    attrs: dict[str, object] | None = None,
    flags: int = 0,
) -> LiveSpan:
    return LiveSpan(
        trace_id=trace,
        span_id=span_id,
        parent=parent,
        start=1,
        attrs=dict(attrs or {}),
        resource={"service.name": "svc"},
        raw=b"",
        resource_raw=b"",
        keys=frozenset(),
        size=100,
        flags=flags,
    )


def test_group_by_merges_traces_whose_attribute_comes_later() -> None:
    assembler = Assembler(AssemblyConfig(group_by="session.id", settle_s=1.0, idle_timeout_s=10.0))
    # Trace a's first span has no session yet; its second names it; trace b joins the session.
    assembler.add_spans([span("a", "1", parent="0")], now=0.0)
    assembler.add_spans([span("a", "0", attrs={"session.id": "s1"})], now=0.1)
    assembler.add_spans([span("b", "9", attrs={"session.id": "s1"})], now=0.2)
    assert assembler.open_runs == 1
    # b has no root yet (span 9 is one: no parent) -> all roots in: settles 1s after the last.
    (run,) = assembler.due(now=1.3)
    assert (run.key, run.completion, run.cut_off) == ("s1", SETTLED, False)
    assert sorted(s.span_id for s in run.spans) == ["0", "1", "9"]
    assert run.trace_ids == ["a", "b"]
    # Renamed, not merged: still held in arrival order (the mapping's input is not sorted).
    assert run.in_order and [s.order for s in run.spans] == [1, 2, 3]


def test_a_run_merged_by_group_by_is_sorted_for_the_mapping() -> None:
    assembler = Assembler(AssemblyConfig(group_by="session.id", settle_s=1.0, idle_timeout_s=10.0))
    assembler.add_spans([span("a", "0", attrs={"session.id": "s1"})], now=0.0)
    assembler.add_spans([span("b", "1", parent="0")], now=0.1)  # b's session not known yet
    assembler.add_spans([span("a", "2", parent="0")], now=0.2)
    assembler.add_spans([span("b", "0", attrs={"session.id": "s1"})], now=0.3)  # b joins s1
    (run,) = assembler.due(now=20.0)
    assert [(s.trace_id, s.order) for s in run.spans] == [("a", 1), ("a", 3), ("b", 2), ("b", 4)]
    assert not run.in_order  # so _parts sorts them into arrival order


def test_a_span_with_a_remote_parent_is_a_root() -> None:
    assembler = Assembler(AssemblyConfig(settle_s=1.0, idle_timeout_s=50.0))
    # HAS_IS_REMOTE | IS_REMOTE: the parent is in another service.
    remote = span("a", "1", parent="77", flags=0x300)
    assembler.add_spans([remote], now=0.0)
    assert assembler.next_deadline() == 1.0
    local = span("b", "1", parent="77", flags=0x100)  # the parent is local: not a root
    assembler.add_spans([local], now=0.0)
    (run,) = assembler.due(now=1.0)
    assert run.key == "a"


def test_bytes_cap_grades_the_oldest_and_timers_follow_new_spans() -> None:
    assembler = Assembler(AssemblyConfig(max_bytes=250, settle_s=1.0, idle_timeout_s=5.0))
    assembler.add_spans([span("a", "1", parent="0"), span("a", "2", parent="0")], now=0.0)
    out = assembler.add_spans([span("b", "1", parent="0")], now=1.0)
    assert [(r.key, r.completion, r.cut_off) for r in out.complete] == [("a", BYTES_CAP, True)]
    assert assembler.bytes_held == 100
    assert assembler.next_deadline() == 6.0  # b's idle timeout: it has no root
    assembler.add_spans([span("b", "2", parent="0")], now=4.0)
    assert assembler.due(now=6.0) == []
    (run,) = assembler.due(now=9.0)
    assert (run.completion, run.cut_off) == (IDLE_TIMEOUT, True)


def test_graded_ids_are_remembered_within_the_bound() -> None:
    assembler = Assembler(AssemblyConfig(late_memory=1, settle_s=1.0))
    assembler.add_spans([span("a", "0")], now=0.0)
    assembler.add_spans([span("b", "0")], now=0.0)
    assert len(assembler.due(now=2.0)) == 2
    assert assembler.add_spans([span("b", "1", parent="0")], now=3.0).late == 1
    # a fell out of the memory: its span opens a new run (counted accepted, not late).
    out = assembler.add_spans([span("a", "1", parent="0")], now=3.0)
    assert (out.late, out.counts.get("accepted")) == (0, 1)
    assert assembler.take_forgotten() == {FORGOT_CAP: 1}


def test_graded_ids_are_forgotten_after_the_window() -> None:
    # A window of 10 s, in generations of 1.25 s: an id is forgotten 10 to 11.25 s after its
    # last span.
    assembler = Assembler(AssemblyConfig(late_window_s=10.0, settle_s=1.0))
    assembler.add_spans([span("a", "0")], now=0.0)
    assembler.add_spans([span("b", "0")], now=5.0)
    assert len(assembler.due(now=6.0)) == 2  # both graded at 6
    # A late span keeps its id remembered for another window from then.
    assert assembler.add_spans([span("a", "1", parent="0")], now=15.0).late == 1
    assert assembler.take_forgotten() == {}
    # b (graded at 6) is forgotten at 17.25 (11.25 s on), a (late at 15) is not.
    assembler.due(now=17.2)
    assert (assembler.graded_ids, assembler.take_forgotten()) == (2, {})
    assert assembler.add_spans([span("a", "2", parent="0")], now=17.25).late == 1
    assert (assembler.graded_ids, assembler.take_forgotten()) == (1, {FORGOT_WINDOW: 1})
    out = assembler.add_spans([span("b", "2", parent="0")], now=17.3)
    assert (out.late, out.counts.get("accepted"), assembler.open_runs) == (0, 1, 1)
    # The timer forgets too, without a span: a is gone by 11.25 s after its last late span.
    assembler.due(now=28.5)
    assert (assembler.graded_ids, assembler.take_forgotten()) == (0, {FORGOT_WINDOW: 1})


def test_graded_ids_stay_flat_under_a_sustained_stream() -> None:
    # 100 runs a second, each settled 1 s after its root: the window holds 5 to 5.625 s of
    # them (a generation is an eighth of it, begun at the first tick after the last one's).
    assembler = Assembler(AssemblyConfig(late_window_s=5.0, settle_s=1.0))
    most = 0
    for tick in range(3000):
        now = tick / 100
        assembler.add_spans([span(f"t{tick}", "0")], now=now)
        assembler.due(now)
        most = max(most, assembler.graded_ids)
    assert 500 <= most <= 100 * (5.625 + 0.01) + 1
    graded = 3000 - assembler.open_runs
    assert assembler.take_forgotten()[FORGOT_WINDOW] == graded - assembler.graded_ids


async def test_slow_watcher_is_cut_and_others_go_on() -> None:
    hub = WatchHub(queue_size=2)
    slow = hub.watch(grader_service_pb2.WatchResultsRequest())
    fast = hub.watch(grader_service_pb2.WatchResultsRequest(suite_ids=["s"]))
    for number in range(3):
        hub.publish(Published("s", 1, "svc", bytes([number])))
        assert (await fast.queue.get()).payload == bytes([number])  # type: ignore[union-attr]
    assert [slow.queue.get_nowait() for _ in range(3)][2] is TOO_SLOW
    assert (len(hub), hub.take_dropped(), hub.take_dropped()) == (1, 1, 0)
    hub.publish(Published("other", 1, "svc", b"x"))
    assert fast.queue.empty()
    await asyncio.sleep(0)


def test_sink_rotates_and_rotated_files_are_results_files(tmp_path: Path) -> None:
    row = {
        "trace_id": "t",
        "suite_id": "s",
        "verdict": "VERDICT_PASS",
        "score": 1.0,
        "soft_failures": 0,
        "results": [],
        "mean_score": 1.0,
        "live": {"service": "svc", "completion": "settled", "cut_off": False},
    }
    sink = JsonlSink(str(tmp_path / "results.jsonl"), max_bytes=300, keep=2)
    for number in range(8):
        sink.write([json.dumps({**row, "trace_id": f"t{number}"}).encode() + b"\n"])
    sink.close()
    rotated = sink.rotated_files()
    assert [p.name for p in rotated] == ["results.3.jsonl", "results.4.jsonl"]
    compared = diff_files(str(rotated[0]), str(rotated[0]))
    assert (compared.common, compared.flipped) == (2, 0)


@pytest.mark.parametrize(
    ("endpoint", "extra", "protocol", "address", "tls"),
    [
        # A bare address or grpc:// is gRPC, and TLS unless insecure (OTel's rule).
        ("collector:4317", [], "grpc", "collector:4317", True),
        ("collector:4317", ["--otlp-export-insecure"], "grpc", "collector:4317", False),
        ("grpc://collector:4317", [], "grpc", "collector:4317", True),
        ("unix:/run/otlp.sock", ["--otlp-export-insecure"], "grpc", "unix:/run/otlp.sock", False),
        # http(s):// is OTLP/HTTP, its scheme the security; the base URL gets /v1/logs.
        ("http://collector:4318", [], "http/protobuf", "http://collector:4318/v1/logs", False),
        ("https://gw.example/otlp/", [], "http/protobuf", "https://gw.example/otlp/v1/logs", True),
        ("https://gw.example/v1/logs", [], "http/protobuf", "https://gw.example/v1/logs", True),
        # The protocol flag wins over the scheme; for gRPC the scheme is then the security.
        (
            "http://collector:4317",
            ["--otlp-export-protocol", "grpc"],
            "grpc",
            "collector:4317",
            False,
        ),
        (
            "https://collector:4317",
            ["--otlp-export-protocol", "grpc"],
            "grpc",
            "collector:4317",
            True,
        ),
    ],
)
def test_export_endpoint_protocol_and_security(
    endpoint: str, extra: list[str], protocol: str, address: str, tls: bool
) -> None:
    target = parse("--otlp-export-endpoint", endpoint, *extra).export_target()
    assert (target.protocol, target.address, target.tls) == (protocol, address, tls)
    assert target.compression == "none"


def test_export_compression_from_flag_and_env() -> None:
    flag = parse("--otlp-export-endpoint", "c:1", "--otlp-export-compression", "gzip")
    env = parse(
        environ={
            "TRAJGRADE_OTLP_EXPORT_ENDPOINT": "http://c:4318",
            "TRAJGRADE_OTLP_EXPORT_COMPRESSION": "gzip",
        }
    )
    assert flag.export_target().compression == env.export_target().compression == "gzip"
    assert "gzip" in flag.export_target().describe()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("--otlp-export-endpoint ftp://c:1", "scheme must be"),
        ("--otlp-export-endpoint c:4318 --otlp-export-protocol http/protobuf", "needs an http"),
        ("--otlp-export-endpoint c:4317 --otlp-export-protocol http/json", "grpc or http/proto"),
        ("--otlp-export-endpoint grpc://c:4317/v1/logs", "without a path"),
        ("--otlp-export-endpoint https://c --otlp-export-insecure", "insecure is set"),
        ("--otlp-export-endpoint http://c --otlp-export-ca ca.pem", "plaintext"),
        (
            "--otlp-export-endpoint c:1 --otlp-export-insecure "
            "--otlp-export-cert c.pem --otlp-export-key k.pem",
            "plaintext",
        ),
        ("--otlp-export-endpoint c:1 --otlp-export-cert c.pem", "go together"),
        ("--otlp-export-ca ca.pem", "need otlp_export_endpoint"),
        ("--otlp-export-header a=b", "need otlp_export_endpoint"),
        ("--otlp-export-endpoint c:1 --otlp-export-compression br", "none or gzip"),
        ("--otlp-export-compression gzip", "need otlp_export_endpoint"),
    ],
)
def test_export_settings_that_clash_are_refused(argv: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        parse(*argv.split())


def test_export_headers_from_flags_and_env_are_masked() -> None:
    settings = parse(
        "--otlp-export-endpoint", "http://c:4318",
        "--otlp-export-header", "Authorization=Bearer a%20b=c",
        "--otlp-export-header", "x-tenant=blue",
    )  # fmt: skip
    # A flag's value is taken as written (only the key is lowercased).
    assert settings.export_target().headers == (
        ("authorization", "Bearer a%20b=c"),
        ("x-tenant", "blue"),
    )
    env = {
        "TRAJGRADE_OTLP_EXPORT_ENDPOINT": "http://c:4318",
        "TRAJGRADE_OTLP_EXPORT_HEADER": "authorization=Bearer%20s3cret, x-tenant = blue ,",
    }
    settings = parse(environ=env)
    assert settings.otlp_export_header == (("authorization", "Bearer s3cret"), ("x-tenant", "blue"))
    assert settings.describe()["otlp_export_header"] == "***"
    assert "s3cret" not in repr(settings) + repr(settings.describe())
    assert "s3cret" not in settings.export_target().describe()
    # Flags replace the variable's headers rather than adding to them.
    assert parse("--otlp-export-header", "k=v", environ=env).otlp_export_header == (("k", "v"),)
    with pytest.raises(SettingsError, match="TRAJGRADE_OTLP_EXPORT_HEADER") as caught:
        parse(environ={**env, "TRAJGRADE_OTLP_EXPORT_HEADER": "authorization Bearer s3cret"})
    assert "s3cret" not in str(caught.value)
    assert parse().describe()["otlp_export_header"] == []
    with pytest.raises(SystemExit):  # argparse: "invalid header value"
        parse("--otlp-export-endpoint", "c:1", "--otlp-export-header", "token")


async def test_sink_writer_accounts_for_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = CollectorRegistry()
    metrics = LiveMetrics(registry)
    sink = JsonlSink(str(tmp_path / "results.jsonl"), max_bytes=1 << 20, keep=2)
    writer = SinkWriter(sink, metrics)
    writer.submit([b'{"a":1}\n', b'{"a":2}\n'])
    assert await writer.finish(None) == 0
    assert registry.get_sample_value("trajgrade_live_sink_rows_total") == 2

    def full(lines: list[bytes]) -> None:
        raise OSError(28, "No space left on device")

    failing = SinkWriter(sink, metrics)
    monkeypatch.setattr(sink, "write", full)
    failing.submit([b'{"a":3}\n'] * 3)
    assert await failing.finish(None) == 0  # written or failed: none left pending
    assert failing.failed_rows == 3
    assert registry.get_sample_value("trajgrade_live_sink_errors_total") == 1
    assert registry.get_sample_value("trajgrade_live_sink_rows_total") == 2
    failing.close()
    writer.close()
    assert (tmp_path / "results.jsonl").read_bytes() == b'{"a":1}\n{"a":2}\n'


def test_graded_ids_cap_forgets_the_oldest_and_a_refiled_id_moves_on() -> None:
    graded = GradedIds(window_s=80.0, cap=3)  # generations of 10 s
    for at, trace_id in enumerate(("a", "b", "c")):
        graded.remember(trace_id, trace_id, now=at * 10.0)
    graded.remember("a", "a", now=30.0)  # a late span: a is now the newest
    graded.remember("d", "session-1", now=31.0)  # over the cap: b, the oldest, goes
    assert [graded.key_of(t) for t in "abcd"] == ["a", None, "c", "session-1"]
    assert graded.forgotten == {FORGOT_CAP: 1}
    # a's old place (generation 0, gone at 90) is stale: its expiry does not forget a.
    graded.expire(now=90.0)
    assert (len(graded), graded.forgotten) == (3, {FORGOT_CAP: 1})
    graded.expire(now=110.0)  # c's generation (20 to 30) ends its window
    assert [graded.key_of(t) for t in "acd"] == ["a", None, "session-1"]
    assert graded.forgotten == {FORGOT_CAP: 1, FORGOT_WINDOW: 1}
    graded.expire(now=120.0)
    assert len(graded) == 0 and graded.forgotten[FORGOT_WINDOW] == 3


def test_intake_decodes_heads_and_keyed_attributes_in_the_core() -> None:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    attribute = resource_spans.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", "svc"
    spans = resource_spans.scope_spans.add().spans
    root = spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8, start_time_unix_nano=5, flags=0x100)
    root.events.add(name="trajgrade.run.end")
    for key, value in (("route", "a"), ("other", "x"), ("route", "b")):
        attribute = root.attributes.add()
        attribute.key, attribute.value.string_value = key, value
    child = spans.add(trace_id=b"\1" * 16, span_id=b"\3" * 8, parent_span_id=b"\2" * 8)
    attribute = child.attributes.add()
    attribute.key, attribute.value.int_value = "route", 7
    marker = child.attributes.add()
    marker.key, marker.value.bool_value = "trajgrade.run.end", False

    (first, second), rows = _incoming(request.SerializeToString(), ["route", "service.name"])
    assert (first.trace_id, first.span_id, first.parent) == (
        "01" * 16,
        "02" * 8,
        "",
    )
    assert (first.start, first.flags, first.ends_run, first.is_root) == (
        5,
        0x100,
        True,
        True,
    )
    assert first.size == root.ByteSize()
    assert first.raw == root.SerializeToString()
    assert first.resource_raw == resource_spans.resource.SerializeToString()
    assert first.attrs == {"route": "b"}  # the last of a repeated key, as the importer
    assert first.resource == {"service.name": "svc"}
    assert first.resource is second.resource  # one dict per resource
    # A non-string value: the importer's conversion (an int stays an int, for str() and globs).
    assert second.attrs == {"route": 7}
    assert (second.parent, second.ends_run, second.is_root) == ("02" * 8, False, False)
    assert first.key == ("01" * 16, "02" * 8) and first.keys == {"route", "service.name"}
    # One row: both spans are of one trace (its size, marker, root, keys and service at once).
    assert rows == [
        ("01" * 16, 0, 2, first.size + second.size, True, True, {first.key, second.key}, "svc")
    ]
    assert rows == span_rows([first, second])
    with pytest.raises(ValueError, match="traces"):
        _incoming(b"\x0a\xff", ["route"])


@pytest.mark.parametrize("outcome_kind", ["result", "error"])
def test_watch_response_spliced_from_the_core_bytes_equals_the_built_message(
    outcome_kind: str,
) -> None:
    """LiveResult.response re-tags the core's TraceOutcome bytes instead of copying the
    decoded result: the watcher decodes the same message as the one built field by field
    (the bytes may differ in field order only)."""
    outcome = result_pb2.TraceOutcome()
    if outcome_kind == "result":
        outcome.result.verdict = result_pb2.VERDICT_FAIL
        outcome.result.score = 0.5
        item = outcome.result.results.add()
        item.name = "tool_sequence"
        item.status = result_pb2.ASSERTION_STATUS_FAIL
    else:
        outcome.error.message = "over a limit"
    args = ("ab" * 16, "suite-1", "svc-é", True, "idle_timeout", outcome)
    spliced = LiveResult(*args, outcome_bytes=outcome.SerializeToString()).response()
    built = LiveResult(*args).response()  # no core bytes: the message built and encoded
    expected = grader_service_pb2.WatchResultsResponse.FromString(built)
    assert grader_service_pb2.WatchResultsResponse.FromString(spliced) == expected
    assert expected.HasField(outcome_kind)
    assert getattr(expected, outcome_kind) == getattr(outcome, outcome_kind)
    assert expected.trace_id == "ab" * 16 and expected.cut_off and expected.service_name == "svc-é"


def test_core_transport_takes_tcp_addresses_only() -> None:
    """Unix sockets are served by grpc.aio (h2 refuses the socket path C-core clients send as
    :authority); the core's transport says so rather than serving clients it would fail."""
    with pytest.raises(ValueError, match="unix socket"):
        _core.OtlpGrpcTransport("unix:/tmp/never.sock", 1 << 20)
    with pytest.raises(ValueError, match="not a port number"):
        _core.OtlpGrpcTransport("127.0.0.1:http", 1 << 20)
    transport = _core.OtlpGrpcTransport("127.0.0.1:0", 1 << 20)
    try:
        assert transport.port > 0 and transport.take() == []
    finally:
        transport.stop(0.0)


def _span_fields(span: LiveSpan) -> tuple[object, ...]:
    return (
        span.trace_id, span.span_id, span.parent, span.start, span.attrs, span.resource,
        span.raw, span.resource_raw, span.keys, span.size, span.ends_run, span.flags,
        span.is_root, span.key,
    )  # fmt: skip


def test_core_transport_decodes_exports_as_they_arrive_with_the_keys_set() -> None:
    """The core's transport decodes a traces export on its own thread with the keys last set;
    `OtlpExport.spans` makes the spans from those heads when asked for the same keys, decodes
    again for others (a routes reload in between), and raises for a malformed body: the same
    spans and rows as `_core.otlp_spans` of the body in every case."""
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    attribute = resource_spans.resource.attributes.add()
    attribute.key, attribute.value.string_value = "service.name", "svc"
    spans = resource_spans.scope_spans.add().spans
    root = spans.add(trace_id=b"\1" * 16, span_id=b"\2" * 8, start_time_unix_nano=5)
    attribute = root.attributes.add()
    attribute.key, attribute.value.int_value = "route", 7  # converted by the callback
    spans.add(trace_id=b"\1" * 16, span_id=b"\3" * 8, parent_span_id=b"\2" * 8)
    spans.add(trace_id=b"\4" * 16, span_id=b"\5" * 8)
    body = request.SerializeToString()
    converted: list[bool] = []

    def convert(raw: bytes, resource: bool) -> dict[str, object]:
        converted.append(resource)
        return {"route": 7}

    transport = _core.OtlpGrpcTransport("127.0.0.1:0", 1 << 20)
    channel = grpc.insecure_channel(f"127.0.0.1:{transport.port}")
    export_call = channel.unary_unary(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        request_serializer=None,
        response_deserializer=None,
    )
    try:

        def taken(payload: bytes) -> tuple[Any, Any]:
            call = export_call.future(payload, timeout=10)
            deadline = time.monotonic() + 10
            while not (exports := transport.take()):
                assert time.monotonic() < deadline, "the export never reached the loop's side"
                time.sleep(0.005)
            (export,) = exports
            return export, call

        for keys in (["route", "service.name"], ["service.name"]):
            transport.set_keys(["route", "service.name"])
            export, call = taken(body)
            if keys == ["route", "service.name"]:
                # The body taken first: the spans can only come from the transport's heads.
                assert export.body() == body
            got, rows = export.spans(keys, frozenset(keys), convert)
            want, want_rows = _core.otlp_spans(body, keys, frozenset(keys), convert)
            assert [_span_fields(s) for s in got] == [_span_fields(s) for s in want]
            assert rows == want_rows and len(rows) == 2
            export.reply(b"")
            assert call.result() == b""
        assert converted == [False, False]  # the int route, once per decode that reads it
        export, call = taken(b"\x0a\xff")
        with pytest.raises(ValueError, match="traces"):
            export.spans(["route"], frozenset(["route"]), convert)
        export.fail(grpc.StatusCode.INVALID_ARGUMENT.value[0], "malformed")
        with pytest.raises(grpc.RpcError):
            call.result()
    finally:
        channel.close()
        transport.stop(0.0)
