"""Small unary batches are graded on the event loop thread, bigger ones in the executor; both
answer the library's bytes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest
from trajgrade import _core
from trajgrade.server.batcher import Batcher
from trajgrade.server.metrics import ServerMetrics

from .server_harness import Case, ServerFactory, request_for


class Recorder:
    """The real core, noting on which thread and through which entry point each batch went."""

    def __init__(self) -> None:
        self.inner = _core.Grader()
        self.calls: list[tuple[str, int, int]] = []  # (entry point, items, thread id)

    def grade_requests(
        self, requests: list[bytes], cancels: list[_core.CancelToken | None] | None = None
    ) -> Sequence[bytes | BaseException]:
        self.calls.append(("pool", len(requests), threading.get_ident()))
        return self.inner.grade_requests(requests, cancels)

    def grade_requests_here(
        self,
        requests: list[bytes],
        cancels: list[_core.CancelToken | None] | None = None,
        max_work_units: int = 2**64 - 1,
    ) -> Sequence[bytes | BaseException | None]:
        self.calls.append(("here", len(requests), threading.get_ident()))
        return self.inner.grade_requests_here(requests, cancels, max_work_units)


async def _grade_all(batcher: Batcher, requests: list[bytes]) -> list[bytes]:
    batcher.start()
    try:
        return list(await asyncio.gather(*(batcher.grade(r, None) for r in requests)))
    finally:
        await batcher.stop()


@pytest.mark.parametrize("inline_bytes", [0, 1, 1 << 20])
async def test_batches_go_where_their_size_says(valid_cases: list[Case], inline_bytes: int) -> None:
    requests = [request_for(c).SerializeToString() for c in valid_cases[:20]]
    recorder = Recorder()
    batcher = Batcher(
        recorder,
        max_batch_size=64,
        max_batch_delay_s=0.05,
        max_queue_size=100,
        max_queue_bytes=1 << 30,
        executor_threads=2,
        metrics=ServerMetrics(),
        grade_here=recorder.grade_requests_here,
        inline_bytes=inline_bytes,
    )
    answers = await _grade_all(batcher, requests)
    assert answers == recorder.inner.grade_requests(requests)
    loop_thread = threading.get_ident()
    kinds = {(kind, thread == loop_thread) for kind, _, thread in recorder.calls}
    if inline_bytes < min(len(r) for r in requests):
        assert kinds == {("pool", False)}  # nothing fits: every batch in the executor
    else:
        assert kinds == {("here", True)}  # all fit: graded on the loop thread
    assert sum(n for _, n, _ in recorder.calls) == len(requests)


@pytest.mark.parametrize("units", [1, 100_000])
async def test_items_over_the_inline_work_units_are_graded_again_in_the_pool(
    valid_cases: list[Case], units: int
) -> None:
    # Every conformance trace needs more than one work unit and far fewer than 100,000: with 1
    # each leaves the loop for the pool, with the default none does; the answers never change.
    requests = [request_for(c).SerializeToString() for c in valid_cases[:40]]
    recorder = Recorder()
    batcher = Batcher(
        recorder,
        max_batch_size=64,
        max_batch_delay_s=0.05,
        max_queue_size=100,
        max_queue_bytes=1 << 30,
        executor_threads=2,
        metrics=ServerMetrics(),
        grade_here=recorder.grade_requests_here,
        inline_bytes=1 << 20,
        inline_work_units=units,
    )
    answers = await _grade_all(batcher, requests)
    assert answers == recorder.inner.grade_requests(requests)
    loop_thread = threading.get_ident()
    here = sum(n for kind, n, t in recorder.calls if kind == "here" and t == loop_thread)
    pool = sum(n for kind, n, t in recorder.calls if kind == "pool" and t != loop_thread)
    assert here == len(requests)  # every item tried on the loop first
    assert pool == (len(requests) if units == 1 else 0)


@pytest.mark.parametrize("inline_grade_bytes", [0, 256 * 1024])
async def test_server_answers_the_same_either_way(
    make_server: ServerFactory, valid_cases: list[Case], inline_grade_bytes: int
) -> None:
    server = await make_server(inline_grade_bytes=inline_grade_bytes)
    valid = valid_cases[:40]
    requests = [request_for(c) for c in valid]
    reference = _core.Grader()
    expected = reference.grade_requests([r.SerializeToString() for r in requests])
    answers = await asyncio.gather(*(server.grade(r) for r in requests))
    assert list(answers) == expected
