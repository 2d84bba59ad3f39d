"""Early verdicts (--early-verdicts): an assertion that has already failed for good is reported
on WatchResults, marked early, while its run is still open; the final result follows unchanged.

The agent is the real OpenTelemetry SDK exporting over OTLP/gRPC with a SimpleSpanProcessor
(one export per ended span), run on a thread that holds its root span open until the test
says so: an early verdict that arrives before the release came before the root span ended.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1 import trace_pb2 as otlp_trace_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from trajgrade import _core
from trajgrade.live.early import EarlySuites, early_capable, early_suite
from trajgrade.server.settings import Settings, SettingsError
from trajgrade.suites import suite_from_text
from trajgrade.v1 import assertion_pb2, result_pb2, trace_pb2

from .conftest import Live, LiveFactory, Watch, eventually, regrade_lines, strip_live
from .test_live_writeback import start_sink

pytestmark = pytest.mark.timeout(120)

# Assertion 0 (forbidden tool) and 6 (duration) fail at the second call, 5 (step count) at the
# third; 1-4 fail too but are never early (SOFT, report_only, scoped, negated); 7 (tool_called)
# is not monotone. A run that books a table and nothing else passes every one.
EARLY_SUITE = """\
name: early
assertions:
  - forbidden_tools: {tools: ["delete_*"]}
  - name: soft forbidden
    severity: SEVERITY_SOFT
    forbidden_tools: {tools: ["delete_*"]}
  - name: report-only forbidden
    report_only: true
    forbidden_tools: {tools: ["delete_*"]}
  - name: scoped forbidden
    scope: {agent: "*"}
    forbidden_tools: {tools: ["delete_*"]}
  - name: negated
    negate: true
    forbidden_tools: {tools: ["book_*"]}
  - step_count: {max: 2}
  - duration: {tool: delete_file, max_call_ms: 1000}
  - tool_called: {tool: book_table}
"""
EARLY_FAILING = {0: "FORBIDDEN_TOOL", 5: "TOO_MANY_STEPS", 6: "TOO_SLOW"}


def routes(directory: Path) -> str:
    """Runs of `early-*` services graded by the early suite, except those of the agent named
    `special` (on the root span only: its early verdicts are never confirmed)."""
    (directory / "early.yaml").write_text(EARLY_SUITE, encoding="utf-8")
    return f"""\
routes:
  - name: special
    match: {{service.name: "early-*", gen_ai.agent.name: special}}
    suites: [weather.yaml]
  - name: early
    match: {{service.name: "early-*"}}
    suites: ["{directory / "early.yaml"}"]
"""


class Agent:
    """The real SDK: every ended span is one OTLP/gRPC export to the server (and a line in an
    OTLP JSON file for `trajgrade regrade`)."""

    def __init__(self, endpoint: str, out: Path, service: str = "early-agent") -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        self.provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True))
        )
        self.provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(str(out))))
        self.tracer = self.provider.get_tracer("trajgrade.early-test")
        self.out = out
        self.calls = 0

    @contextmanager
    def run(self, agent: str = "early_agent") -> Iterator[None]:
        attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}
        with self.tracer.start_as_current_span(f"invoke_agent {agent}", attributes=attributes):
            yield

    def tool(self, name: str, arguments: str = "{}", took_ms: int = 5) -> None:
        """One executed tool call (GenAI conventions), ended, so exported, at once."""
        self.calls += 1
        start = time.time_ns()
        span = self.tracer.start_span(
            f"execute_tool {name}",
            start_time=start,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": f"call_{self.calls}",
                "gen_ai.tool.call.arguments": arguments,
                "gen_ai.tool.call.result": "ok",
            },
        )
        span.end(end_time=start + took_ms * 1_000_000)

    def close(self) -> None:
        self.provider.shutdown()


async def in_thread(live: Live, body: Any, out: Path, service: str = "early-agent") -> None:
    def go() -> None:
        agent = Agent(live.grpc_endpoint, out, service)
        try:
            body(agent)
        finally:
            agent.close()

    await asyncio.to_thread(go)


def early_items(watch: Watch) -> list[Any]:
    return [item for item in watch.items if item.early]


def final_items(watch: Watch) -> list[Any]:
    return [item for item in watch.items if not item.early]


async def wait_then_set(event: threading.Event, what: Any) -> None:
    """Wait for `what`, then let the agent thread go on (also on failure: it must end)."""
    try:
        await eventually(what, 30.0, "early verdicts")
    finally:
        event.set()


async def test_early_failures_arrive_before_the_run_ends_once_each(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    live = await make_live(routes(tmp_path), early_verdicts=True)
    suite_id = live.server.live.routes.current.routes[1].suites[0].suite_id
    watch = await live.watch()
    again, release = threading.Event(), threading.Event()

    def body(agent: Agent) -> None:
        with agent.run():
            agent.tool("get_weather", '{"city": "Paris"}')
            agent.tool("delete_file", '{"path": "/tmp/x"}', took_ms=2_500)
            agent.tool("get_time")
            assert again.wait(60)
            agent.tool("get_time", '{"tz": "UTC"}')
            assert release.wait(60)

    spans = tmp_path / "early.traces.json"
    task = asyncio.create_task(in_thread(live, body, spans))
    # Three early failures while the root span is still open (the agent waits for `again`).
    await wait_then_set(again, lambda: len(early_items(watch)) >= 3)
    checks = live.metric("trajgrade_live_early_checks_total")
    # One more call: checked again, the three still fail, and are not reported again.
    await wait_then_set(release, lambda: live.metric("trajgrade_live_early_checks_total") > checks)
    assert not final_items(watch)
    await task
    await watch.wait(4)
    await eventually(lambda: len(live.sink_lines()) == 1, what="the sink row")

    early, final = early_items(watch), final_items(watch)
    assert len(final) == 1
    # Each early failure exactly once, all before the final result.
    assert watch.items.index(final[0]) == len(watch.items) - 1
    by_name = {item.result.results[0].name: item for item in early}
    assert len(by_name) == len(early) == 3
    results = final[0].result.results
    for index, code in EARLY_FAILING.items():
        item = by_name[results[index].name]
        assert item.trace_id == final[0].trace_id
        assert item.suite_id == suite_id
        assert item.service_name == "early-agent"
        assert not item.cut_off and item.completion == ""
        assert item.result.verdict == result_pb2.VERDICT_FAIL
        assert len(item.result.results) == 1
        assert item.result.results[0].status == result_pb2.ASSERTION_STATUS_FAIL
        assert item.result.results[0].reason_code == code
        assert results[index].status == result_pb2.ASSERTION_STATUS_FAIL
    # The assertions that are never early failed too, in the final result only.
    for index in (1, 2, 3, 4, 7):
        assert results[index].status == result_pb2.ASSERTION_STATUS_FAIL, results[index]

    # The final result is the one regrade (no early verdicts) gives, and the only one counted.
    expected = regrade_lines([spans], tmp_path / "early.yaml", tmp_path / "regrade.jsonl")
    assert [strip_live(line) for line in live.sink_lines()] == expected
    assert (
        live.metric("trajgrade_live_results_total", suite_id=suite_id, verdict="VERDICT_FAIL") == 1
    )
    assert live.metric("trajgrade_live_early_verdicts_total") == 3
    assert live.metric("trajgrade_live_early_outcomes_total", outcome="confirmed") == 3
    assert live.metric("trajgrade_live_early_outcomes_total", outcome="overturned") == 0
    assert live.metric("trajgrade_live_early_outcomes_total", outcome="not_graded") == 0


def test_flag_env_and_defaults() -> None:
    defaults = Settings.from_sources(environ={})
    assert (defaults.early_verdicts, defaults.live_early_max_spans) == (False, 1000)
    env = {"TRAJGRADE_EARLY_VERDICTS": "true", "TRAJGRADE_LIVE_EARLY_MAX_SPANS": "7"}
    from_env = Settings.from_sources(environ=env)
    assert (from_env.early_verdicts, from_env.live_early_max_spans) == (True, 7)
    parser = argparse.ArgumentParser()
    Settings.add_arguments(parser)
    flags = Settings.from_namespace(parser.parse_args(["--early-verdicts"]), environ={})
    assert flags.early_verdicts is True
    # The flag wins over the env var.
    off = parser.parse_args(["--no-early-verdicts"])
    assert Settings.from_namespace(off, environ=env).early_verdicts is False
    with pytest.raises(SettingsError, match="live_early_max_spans"):
        Settings.from_sources(environ={"TRAJGRADE_LIVE_EARLY_MAX_SPANS": "0"})


async def test_off_by_default_and_a_passing_run_has_none(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    off = await make_live(routes(tmp_path))
    # A longer settle time: the last check of the passing run comes before its completion.
    on = await make_live(routes(tmp_path), early_verdicts=True, live_settle_s=1.0)
    watches = [await off.watch(), await on.watch()]

    def failing(agent: Agent) -> None:
        with agent.run():
            agent.tool("delete_file", took_ms=2_000)
            agent.tool("get_time")

    def passing(agent: Agent) -> None:
        with agent.run():
            agent.tool("book_table")

    await in_thread(off, failing, tmp_path / "off.json")
    await in_thread(on, passing, tmp_path / "on.json")
    for watch in watches:
        await watch.wait(1)
    assert [item.early for watch in watches for item in watch.items] == [False, False]
    assert watches[0].items[0].result.verdict == result_pb2.VERDICT_FAIL
    assert watches[1].items[0].result.verdict == result_pb2.VERDICT_PASS
    assert off.metric("trajgrade_live_early_checks_total") == 0
    # The passing run was checked (one export per span), and nothing failed.
    assert on.metric("trajgrade_live_early_checks_total") >= 1
    assert on.metric("trajgrade_live_early_verdicts_total") == 0


async def test_span_cap_and_watch_filters(make_live: LiveFactory, tmp_path: Path) -> None:
    capped = await make_live(routes(tmp_path), early_verdicts=True, live_early_max_spans=1)
    # A longer settle time: the check after the forbidden call comes before the completion.
    live = await make_live(routes(tmp_path), early_verdicts=True, live_settle_s=1.0)
    suite_id = live.server.live.routes.current.routes[1].suites[0].suite_id
    capped_watch = await capped.watch()
    every = await live.watch(service_names=["early-agent"], verdicts=[result_pb2.VERDICT_FAIL])
    other_suite = await live.watch(suite_ids=["s1-0"])
    passes = await live.watch(verdicts=[result_pb2.VERDICT_PASS])
    other_service = await live.watch(service_names=["someone-else"])

    def body(agent: Agent) -> None:
        with agent.run():
            agent.tool("get_weather")
            agent.tool("delete_file")

    await in_thread(capped, body, tmp_path / "capped.json")
    await in_thread(live, body, tmp_path / "live.json")
    await capped_watch.wait(1)
    await every.wait(2)
    # Over the cap (2 spans > 1) the run is checked only while it has one span (at most once:
    # the check may come after the second span, and is then skipped).
    assert capped.metric("trajgrade_live_early_checks_total") <= 1
    assert capped.metric("trajgrade_live_early_verdicts_total") == 0
    assert [item.early for item in capped_watch.items] == [False]

    assert [(item.early, item.suite_id) for item in every.items] == [
        (True, suite_id),
        (False, suite_id),
    ]
    await asyncio.sleep(0.2)
    assert not other_suite.items and not passes.items and not other_service.items


async def test_an_early_verdict_the_final_routing_drops_is_not_graded(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    # The `special` agent's name is on its root span only: before the root ends, the run
    # routes to the early suite; with its root, to weather.yaml.
    live = await make_live(routes(tmp_path), early_verdicts=True)
    watch = await live.watch()
    release = threading.Event()

    def body(agent: Agent) -> None:
        with agent.run(agent="special"):
            agent.tool("delete_file")
            assert release.wait(60)

    task = asyncio.create_task(in_thread(live, body, tmp_path / "special.json"))
    await wait_then_set(release, lambda: len(early_items(watch)) == 1)
    await task
    await eventually(lambda: len(final_items(watch)) == 1, what="the final result")
    early_suite_id = live.server.live.routes.current.routes[1].suites[0].suite_id
    weather = live.server.live.routes.current.routes[0].suites[0].suite_id
    # Once the root span is in (the run settling), a check routes it to weather.yaml, whose
    # forbidden_tools fails early too (unless the run completed first): that one is confirmed.
    first, *rest, final = watch.items
    assert (first.early, first.suite_id) == (True, early_suite_id)
    assert (final.early, final.suite_id) == (False, weather)
    assert [(i.early, i.suite_id) for i in rest] in ([], [(True, weather)])
    for outcome, count in (("not_graded", 1), ("confirmed", len(rest)), ("overturned", 0)):
        await eventually(
            lambda o=outcome, c=count: (
                live.metric("trajgrade_live_early_outcomes_total", outcome=o) == c
            ),
            what=f"{count} {outcome}",
        )


def assertion(text: str) -> assertion_pb2.Assertion:
    return suite_from_text(f"name: t\nassertions:\n  - {text}\n").assertions[0]


@pytest.mark.parametrize(
    ("text", "capable"),
    [
        ('forbidden_tools: {tools: ["x"]}', True),
        ('allowed_tools: {tools: ["x"]}', True),
        ("tool_count: {tool: x, max: 2}", True),
        ("tool_count: {tool: x, min: 2}", False),
        ("step_count: {max: 3}", True),
        ("step_count: {min: 3}", False),
        ("{severity: SEVERITY_HARD, efficiency: {reference_steps: 2}}", True),
        ("efficiency: {reference_steps: 2}", False),
        ("{severity: SEVERITY_HARD, no_repeated_calls: {}}", True),
        ("no_repeated_calls: {}", False),
        ("tool_call_args: {tool: x, quantifier: QUANTIFIER_ALL, match: {args_json: '{}'}}", True),
        ("tool_call_args: {tool: x, match: {args_json: '{}'}}", False),
        ("trajectory_match: {reference: [{name: x}], mode: TRAJECTORY_MODE_SUBSET}", True),
        ("trajectory_match: {reference: [{name: x}]}", False),
        ("duration: {max_total_ms: 5}", True),
        ("budget: {max_total_tokens: 5}", True),
        ("tool_called: {tool: x}", False),
        ("order: {before: a, after: b}", False),
        ("{negate: true, forbidden_tools: {tools: [x]}}", False),
        ("{severity: SEVERITY_SOFT, forbidden_tools: {tools: [x]}}", False),
        ("{report_only: true, forbidden_tools: {tools: [x]}}", False),
        ("{scope: {per_turn: true}, forbidden_tools: {tools: [x]}}", False),
        ("{scope: {server: s}, budget: {max_model_calls: 1}}", False),
    ],
)
def test_which_assertions_are_early_capable(text: str, capable: bool) -> None:
    assert early_capable(assertion(text)) is capable


def test_the_sub_suite_keeps_the_early_capable_assertions_once() -> None:
    grader = _core.Grader()
    suite = suite_from_text(EARLY_SUITE)
    compiled = grader.compile_suite(suite.SerializeToString(deterministic=True))
    sub = early_suite(grader, compiled)
    assert sub is not None
    assert sub.suite_id == compiled.suite_id != sub.compiled.suite_id
    assert sub.index == tuple(EARLY_FAILING)
    assert sub.kinds == ("forbidden_tools", "step_count", "duration")
    plain = suite_from_text("name: p\nassertions:\n  - tool_called: {tool: x}\n")
    assert early_suite(grader, grader.compile_suite(plain.SerializeToString())) is None


def test_sub_suites_of_registered_suites_live_as_long_as_the_routes_name_them() -> None:
    grader = _core.Grader()
    a, b = (
        grader.compile_suite(
            suite_from_text(
                f"name: {name}\nassertions:\n  - forbidden_tools: {{tools: [x]}}\n"
            ).SerializeToString(deterministic=True)
        )
        for name in ("a", "b")
    )
    subs = EarlySuites(grader)
    named = frozenset({a.suite_id, b.suite_id})
    assert subs.get(a, named) is not None and subs.get(b, named) is not None
    assert len(subs) == 2
    # Reloaded routes that name only b: a's sub-suite is dropped, b's kept.
    reloaded = frozenset({b.suite_id})
    kept = subs.get(b, reloaded)
    assert len(subs) == 1 and subs.get(b, reloaded) is kept


async def test_early_verdicts_are_not_written_back(make_live: LiveFactory, tmp_path: Path) -> None:
    server, sink, port = await start_sink()
    try:
        live = await make_live(
            routes(tmp_path),
            early_verdicts=True,
            otlp_export_endpoint=f"127.0.0.1:{port}",
            otlp_export_insecure=True,
        )
        watch = await live.watch()
        release = threading.Event()

        def body(agent: Agent) -> None:
            with agent.run():
                agent.tool("delete_file")
                assert release.wait(60)

        task = asyncio.create_task(in_thread(live, body, tmp_path / "wb.json"))
        await wait_then_set(release, lambda: len(early_items(watch)) == 1)
        await task
        await eventually(lambda: len(final_items(watch)) == 1, what="the final result")
        (final,) = final_items(watch)
        expected = len(final.result.results)
        await eventually(
            lambda: (
                live.metric("trajgrade_live_writeback_records_total", outcome="sent") == expected
            ),
            what="the final result's records",
        )
        # One record per assertion of the final result: none for the early verdict.
        assert len(sink.records) == expected == len(suite_from_text(EARLY_SUITE).assertions)
    finally:
        await server.stop(0)


@pytest.mark.parametrize(
    ("calls", "early"),
    [
        (["x"], []),  # COUNT_OUT_OF_RANGE below min: more calls may still come
        (["x", "x"], []),
        (["x", "x", "x", "y"], [0, 1]),  # over max (3 counted > 2) and over step_count's max
        (["x", "y", "y", "z"], [1]),
    ],
)
def test_failures_are_read_from_reason_codes_and_counts(calls: list[str], early: list[int]) -> None:
    grader = _core.Grader()
    suite = suite_from_text(
        "name: t\nassertions:\n"
        "  - tool_count: {tool: x, min: 2, max: 2}\n"
        "  - step_count: {min: 2, max: 3}\n"
    )
    sub = early_suite(grader, grader.compile_suite(suite.SerializeToString()))
    assert sub is not None
    trace = trace_pb2.Trace(id="t", calls=[trace_pb2.ToolCall(name=name) for name in calls])
    outcome = result_pb2.TraceOutcome.FromString(
        sub.compiled.grade_batch([trace.SerializeToString()])[0]
    )
    assert [index for index, _ in sub.failures(outcome)] == early


OVERTURN_SUITE = """\
name: overturn
assertions:
  - tool_count: {tool: get_weather, max: 1}
"""


def hand_span(
    trace: bytes, span_id: int, parent: int | None, name: str, **attrs: str
) -> otlp_trace_pb2.Span:
    span = otlp_trace_pb2.Span(
        trace_id=trace,
        span_id=span_id.to_bytes(8, "big"),
        parent_span_id=b"" if parent is None else parent.to_bytes(8, "big"),
        name=name,
        start_time_unix_nano=1_000_000_000 + span_id,
        end_time_unix_nano=2_000_000_000 - span_id,
    )
    for key, value in attrs.items():
        span.attributes.add(key=key, value=AnyValue(string_value=value))
    return span


def spans_request(spans: list[otlp_trace_pb2.Span]) -> trace_service_pb2.ExportTraceServiceRequest:
    request = trace_service_pb2.ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.add(
        key="service.name", value=AnyValue(string_value="early-agent")
    )
    resource_spans.scope_spans.add().spans.extend(spans)
    return request


async def test_an_early_verdict_can_be_overturned_by_spans_arriving_out_of_order(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    """Early failures are monotone in the calls, not in the spans: the mapping merges an MCP
    tool span into the agent's tool span of the same tool above it (one call), but only once
    the spans between them are in. Sent out of order (a Collector's parallel queues), the
    agent's tool span and the MCP span arrive before the wrapper span that links them: two
    calls on the spans so far, over tool_count's max, reported early; once the wrapper is in,
    one call, and the final result passes: the early verdict is counted as overturned."""
    (tmp_path / "overturn.yaml").write_text(OVERTURN_SUITE, encoding="utf-8")
    routes_text = f"""\
routes:
  - match: {{service.name: "early-*"}}
    suites: ["{tmp_path / "overturn.yaml"}"]
"""
    live = await make_live(routes_text, early_verdicts=True)
    watch = await live.watch()
    trace = bytes(range(1, 17))
    root = hand_span(
        trace, 1, None, "invoke_agent weather", **{"gen_ai.operation.name": "invoke_agent"}
    )
    tool = hand_span(
        trace,
        2,
        1,
        "execute_tool get_weather",
        **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"},
    )
    wrapper = hand_span(trace, 3, 2, "tool wrapper")
    mcp = hand_span(trace, 4, 3, "tools/call get_weather", **{"mcp.method.name": "tools/call"})
    await live.export(spans_request([tool, mcp]))
    (early,) = await eventually_items(watch, early=True)
    assert early.result.results[0].reason_code == "COUNT_OUT_OF_RANGE"
    await live.export(spans_request([wrapper, root]))
    (final,) = await eventually_items(watch, early=False)
    assert final.result.verdict == result_pb2.VERDICT_PASS
    await eventually(
        lambda: live.metric("trajgrade_live_early_outcomes_total", outcome="overturned") == 1,
        what="the overturned count",
    )
    assert live.metric("trajgrade_live_early_outcomes_total", outcome="confirmed") == 0


async def eventually_items(watch: Watch, *, early: bool) -> list[Any]:
    pick = early_items if early else final_items
    await eventually(lambda: len(pick(watch)) >= 1, what="early" if early else "final")
    return pick(watch)


async def test_a_run_is_checked_at_most_once_per_interval(
    make_live: LiveFactory, tmp_path: Path
) -> None:
    """A run sent span by span (one export each, as a SimpleSpanProcessor does) is checked
    once at its first span, then once when the interval is over, for every span that came
    meanwhile: not once per span (each check maps every span so far). The forbidden call in
    the second span is reported by that deferred check, with no span after it."""
    (tmp_path / "forbid.yaml").write_text(
        "name: forbid\nassertions:\n  - forbidden_tools: {tools: [delete_*]}\n", encoding="utf-8"
    )
    routes_text = f"""\
routes:
  - match: {{service.name: "early-*"}}
    suites: ["{tmp_path / "forbid.yaml"}"]
"""
    live = await make_live(routes_text, early_verdicts=True, live_early_interval_ms=2000)
    watch = await live.watch()
    trace = bytes(range(2, 18))
    started = time.monotonic()
    for index in range(12):
        name = "delete_file" if index == 1 else "get_weather"
        tool = hand_span(
            trace,
            10 + index,
            1,  # the root (span 1) never comes: the run stays open
            f"execute_tool {name}",
            **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name},
        )
        await live.export(spans_request([tool]))
    assert time.monotonic() - started < 2.0, "the exports took longer than the interval"
    (early,) = await eventually_items(watch, early=True)
    assert early.result.results[0].reason_code == "FORBIDDEN_TOOL"
    assert time.monotonic() - started >= 1.9  # the deferred check, not one per export
    assert live.metric("trajgrade_live_early_checks_total") == 2
    assert not final_items(watch)
