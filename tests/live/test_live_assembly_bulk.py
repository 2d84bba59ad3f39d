"""Assembly takes the spans of one trace in a row of a request at once (Assembler._add_group).
Whatever the requests hold (duplicates, retries, late spans, end markers, every cap), the
result must be the one-span-at-a-time path's, which stays the reference (Assembler._add_each)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from trajgrade.live.assembly import Assembler, AssemblyConfig, Run
from trajgrade.live.records import LiveSpan

_TRACES = ["t1", "t2", "t3", "t4"]

# One span: its trace, its id, whether it is a root, whether it ends its run, its size and its
# resource's service name.
_span = st.tuples(
    st.sampled_from(_TRACES),
    st.sampled_from(["a", "b", "c", "d", "e"]),
    st.booleans(),
    st.booleans() | st.just(False),
    st.integers(1, 60),
    st.sampled_from(["", "svc", "other"]),
)
# Sorted by trace or not: the rows of one trace are what the bulk path takes at once.
_request = st.lists(_span, max_size=12).flatmap(
    lambda spans: st.sampled_from([spans, sorted(spans, key=lambda s: s[0])])
)
_requests = st.lists(_request, min_size=1, max_size=8)
_config = st.builds(
    AssemblyConfig,
    settle_s=st.just(1.0),
    idle_timeout_s=st.just(5.0),
    max_open_traces=st.integers(1, 4),
    max_spans_per_trace=st.integers(1, 6),
    max_bytes=st.integers(50, 400),
    on_cap=st.sampled_from(["grade", "refuse"]),
    late_window_s=st.just(100.0),
)


def _spans(request: list[tuple[str, str, bool, bool, int, str]]) -> list[LiveSpan]:
    # In the order drawn: a trace's spans in a row or interleaved with others' (exporters send
    # them in a row, but nothing holds them to it).
    return [
        LiveSpan(
            trace_id=trace,
            span_id=span_id,
            parent="" if root else "p",
            start=1,
            attrs={},
            resource={"service.name": service} if service else {},
            raw=b"",
            resource_raw=b"",
            keys=frozenset(),
            size=size,
            ends_run=ends,
        )
        for trace, span_id, root, ends, size, service in request
    ]


def _run(run: Run) -> tuple[Any, ...]:
    # Without group_by a run's spans are held in arrival order: the mapping takes them so.
    assert run.in_order
    assert [s.order for s in run.spans] == sorted(s.order for s in run.spans)
    return (
        run.key,
        [(s.trace_id, s.span_id, s.order) for s in run.spans],
        sorted(run.rooted),
        run.ended,
        run.size,
        run.refused,
        run.service,
        run.completion,
        run.trace_ids,
    )


def _feed(assembler: Assembler, requests: list[list[LiveSpan]]) -> list[Any]:
    seen: list[Any] = []
    for at, spans in enumerate(requests):
        out = assembler.add_spans(spans, now=float(at))
        seen.append(
            (
                out.counts,
                out.late_runs,
                [_run(r) for r in out.complete],
                sorted(_run(r) for r in out.open_touched),
                assembler.bytes_held,
                assembler.next_deadline(),
            )
        )
    seen.append([_run(r) for r in assembler.due(1000.0)])
    return seen


@settings(max_examples=300, deadline=None)
@given(_requests, _config)
def test_taking_a_trace_at_once_is_taking_it_span_by_span(
    requests: list[list[tuple[str, str, bool, bool, int, str]]], config: AssemblyConfig
) -> None:
    bulk = Assembler(config)
    reference = Assembler(config)
    # The reference takes every row span by span.
    reference._add_group = (
        lambda spans, row, now, out: reference._add_each(  # type: ignore[method-assign]
            spans[row[1] : row[2]], now, out
        )
    )
    # Each assembler holds its own span objects: assembly sets their arrival order.
    assert _feed(bulk, [_spans(r) for r in requests]) == _feed(
        reference, [_spans(r) for r in requests]
    )
