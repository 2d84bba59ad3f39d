"""Routing: globs over resource and span attributes, reload on change and SIGHUP, a bad file
keeps the routes in force."""

from __future__ import annotations

from pathlib import Path

from .conftest import ROUTES, LiveFactory, by_trace, eventually, export_request, span_items

STRICT_ONLY = """\
routes:
  - match: {service.name: "weather-*"}
    suites: [strict.yaml]
"""


async def test_reload_on_change_and_bad_file_keeps_routes(
    make_live: LiveFactory, spans_file: Path
) -> None:
    live = await make_live()
    watch = await live.watch()
    first, second = by_trace(span_items(spans_file)).values()
    weather = live.server.live.routes.current.routes[1].suites[0].suite_id
    await live.export(export_request(first))
    await watch.wait(1)
    assert watch.items[0].suite_id == weather

    # A bad file: logged and counted, the routes in force stay.
    live.routes.write_text("routes: [{match: {}, suites: [missing.yaml]}]\n", encoding="utf-8")
    await eventually(
        lambda: live.metric("trajgrade_live_routes_reloads_total", result="error") == 1,
        what="the failed reload",
    )
    assert live.server.live.routes.current.routes[1].suites[0].suite_id == weather

    # A good file is in force once the poll sees it.
    live.routes.write_text(STRICT_ONLY, encoding="utf-8")
    await eventually(
        lambda: live.metric("trajgrade_live_routes_reloads_total", result="ok") == 2,
        what="the reload",
    )
    await live.export(export_request(second))
    await watch.wait(2)
    assert watch.items[1].suite_id != weather

    # SIGHUP's path reloads even an unchanged file.
    live.server.reload_routes()
    assert live.metric("trajgrade_live_routes_reloads_total", result="ok") == 3


async def test_continue_and_filters(make_live: LiveFactory, spans_file: Path) -> None:
    routes = ROUTES.replace(
        "suites: [weather.yaml, strict.yaml]", "suites: [strict.yaml]\n    continue: true"
    )
    live = await make_live(routes=routes.replace('"dual-*"', '"weather-*"'))
    suites = live.server.live.routes.current
    strict, weather = suites.routes[0].suites[0].suite_id, suites.routes[1].suites[0].suite_id
    only_strict = await live.watch(suite_ids=[strict])
    everything = await live.watch()
    run = next(iter(by_trace(span_items(spans_file)).values()))
    await live.export(export_request(run))
    await everything.wait(2)
    await only_strict.wait(1)
    assert {item.suite_id for item in everything.items} == {strict, weather}
    assert [item.suite_id for item in only_strict.items] == [strict]


BY_OPERATION = """\
routes:
  - match: {gen_ai.operation.name: "execute_tool"}
    suites: [weather.yaml]
"""


async def test_a_reload_with_new_keys_routes_the_runs_already_open(
    make_live: LiveFactory, spans_file: Path
) -> None:
    """Routes reloaded with a key the old ones never matched on: a run whose tool spans came
    before the reload (their attributes read then for the old keys only) is routed by them,
    read again from the spans' bytes, when it completes after it."""
    live = await make_live(routes=STRICT_ONLY)
    watch = await live.watch()
    run = next(iter(by_trace(span_items(spans_file)).values()))
    await live.export(export_request([item for item in run if item.span.parent_span_id]))
    assert live.server.live.assembler.open_runs == 1
    live.routes.write_text(BY_OPERATION, encoding="utf-8")
    await eventually(
        lambda: live.metric("trajgrade_live_routes_reloads_total", result="ok") == 2,
        what="the reload",
    )
    # Only the tool spans, sent before the reload, say execute_tool; the root says invoke_agent.
    await live.export(export_request([item for item in run if not item.span.parent_span_id]))
    await watch.wait(1)
    weather = live.server.live.routes.current.routes[0].suites[0].suite_id
    assert [item.suite_id for item in watch.items] == [weather]
    assert live.metric("trajgrade_live_traces_dropped_total", reason="unrouted") == 0
