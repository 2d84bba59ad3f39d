"""The asyncio shell: `AsyncClient` awaits the calls and sleeps the plans ask for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable
from typing import Any, TypeVar

import grpc
import grpc.aio

from trajgrade.client.channel import DEFAULT, ClientBase, Unset
from trajgrade.client.plans import Plan, Sleep
from trajgrade.client.requests import Outcome
from trajgrade.client.retry import Deadline
from trajgrade.client.status import Failed, error_from_rpc
from trajgrade.client.stream import END, Emit, Messages, Open, StreamPlan, StreamState
from trajgrade.client.watch import VerdictInput, watch_request
from trajgrade.suites import SuiteInput
from trajgrade.traces import TraceInput
from trajgrade.v1 import grader_service_pb2, result_pb2, suite_pb2

T = TypeVar("T")


class AsyncClient(ClientBase):
    """The asyncio twin of `Client` (same options, same methods, awaitable).

    Create it inside the event loop that uses it; `await client.close()` or `async with`.
    `grade_stream` accepts a sync or async iterable and is an async iterator of outcomes.
    """

    _grpc = grpc.aio

    async def close(self) -> None:
        """Close the channel (calls in progress are cancelled)."""
        await self._channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _drive(self, plan: Plan[T]) -> T:
        """Runs a plan: each Call awaited, each Sleep slept; its result or its exception."""
        reply: object = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                result: T = done.value
                return result
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                reply = None
                continue
            try:
                reply = await self._invoke(step)
            except grpc.RpcError as rpc_error:
                reply = Failed.of(rpc_error)

    async def _call(self, method: str, request: bytes, deadline: float | None) -> Any:
        """See `Client._call`."""
        return await self._drive(self._calls.call(method, request, Deadline(deadline)))

    async def register_suite(self, suite: SuiteInput, *, timeout: Unset = DEFAULT) -> str:
        """See `Client.register_suite`."""
        return await self._drive(self._calls.register_suite(suite, self._deadline(timeout)))

    async def get_suite(self, suite_id: str, *, timeout: Unset = DEFAULT) -> suite_pb2.Suite:
        """See `Client.get_suite`."""
        return await self._drive(self._calls.get_suite(suite_id, self._deadline(timeout)))

    async def import_suite(
        self,
        text: str,
        *,
        format: str = "auto",
        skip_unsupported: bool = False,
        name: str = "",
        timeout: Unset = DEFAULT,
    ) -> grader_service_pb2.ImportSuiteResponse:
        """See `Client.import_suite`."""
        deadline = self._deadline(timeout)
        return await self._drive(
            self._calls.import_suite(text, format, skip_unsupported, name, deadline)
        )

    async def grade(
        self, trace: TraceInput, suite: SuiteInput, *, timeout: Unset = DEFAULT
    ) -> result_pb2.GradeResult:
        """See `Client.grade`."""
        return await self._drive(self._calls.grade(trace, suite, self._deadline(timeout)))

    async def grade_batch(
        self, traces: Iterable[TraceInput], suite: SuiteInput, *, timeout: Unset = DEFAULT
    ) -> list[Outcome]:
        """See `Client.grade_batch`."""
        return await self._drive(self._calls.grade_batch(traces, suite, self._deadline(timeout)))

    async def grade_stream(
        self,
        traces: Iterable[TraceInput] | AsyncIterable[TraceInput],
        suite: SuiteInput,
        *,
        timeout: float | None = None,
        chunk_size: int | None = None,
    ) -> AsyncIterator[Outcome]:
        """See `Client.grade_stream`: `async for outcome in client.grade_stream(...)`."""
        deadline = Deadline.after(timeout)
        ref = await self._drive(self._calls.by_id(suite, deadline))
        state, plan = self._stream_plan(ref, deadline, chunk_size)
        # aclosing: a caller that stops early ends the call now, not when the GC gets to it.
        async with contextlib.aclosing(self._run_stream(state, plan, traces)) as outcomes:
            async for outcome in outcomes:
                yield outcome

    def watch_results(
        self,
        *,
        suite_ids: Iterable[str] = (),
        verdicts: Iterable[VerdictInput] = (),
        service_names: Iterable[str] = (),
        timeout: float | None = None,
    ) -> AsyncIterator[grader_service_pb2.WatchResultsResponse]:
        """See `Client.watch_results`: `async for response in client.watch_results(...)`."""
        request = watch_request(suite_ids, verdicts, service_names)
        return self._watch_results(request, timeout)

    async def _watch_results(
        self, request: bytes, timeout: float | None
    ) -> AsyncGenerator[grader_service_pb2.WatchResultsResponse, None]:
        call = self._watch(request, timeout=timeout, metadata=self._opts.metadata)
        try:
            async for response in call:
                yield response
        except grpc.RpcError as rpc_error:
            raise error_from_rpc(rpc_error) from None
        finally:
            call.cancel()

    async def _run_stream(
        self,
        state: StreamState,
        plan: StreamPlan,
        traces: Iterable[TraceInput] | AsyncIterable[TraceInput],
    ) -> AsyncGenerator[Outcome, None]:
        """Runs a stream plan; the feed is woken after every step (the state may have room)."""
        feed = _AsyncFeed(state, traces)
        call: Any = None
        answers: Any = None
        reply: object = None
        try:
            while True:
                try:
                    step = plan.send(reply)
                except StopIteration:
                    return
                finally:
                    feed.space.set()
                reply = None
                if isinstance(step, Emit):
                    for outcome in step.outcomes:
                        yield outcome
                elif isinstance(step, Sleep):
                    await asyncio.sleep(step.seconds)
                elif isinstance(step, Open):
                    call = self._reopen(call, feed.requests(state.epoch), step)
                    answers = aiter(call)
                else:
                    try:
                        reply = await anext(answers, END)
                    except grpc.RpcError as rpc_error:
                        reply = Failed.of(rpc_error)
        finally:
            if call is not None:
                call.cancel()
            state.epoch += 1
            feed.space.set()
            feed.pump.cancel()


class _AsyncFeed:
    """The request iterators of one async grade_stream, fed by a pump task.

    One pump reads the caller's iterable, so a reconnect never interrupts the caller's
    generator mid-item; the request iterators take traces from its queue.
    """

    def __init__(
        self, state: StreamState, traces: Iterable[TraceInput] | AsyncIterable[TraceInput]
    ) -> None:
        self.state = state
        self.space = asyncio.Event()
        self.queue: asyncio.Queue[tuple[TraceInput] | Exception | None] = asyncio.Queue(1)
        self.pump = asyncio.get_running_loop().create_task(_pump(traces, self.queue))

    async def requests(self, epoch: int) -> AsyncIterator[bytes]:
        """Attempt `epoch`: the unanswered traces again, then new ones from the queue."""
        state = self.state
        out = Messages(state)
        while state.epoch == epoch:
            if out.full:
                yield out.flush()
            entry = state.entry(out.seq)
            if entry is None:
                if state.exhausted:
                    break
                if state.window_full and out.chunk:
                    # Send the partial chunk: its answers are what will free the window.
                    yield out.flush()
                    continue
                while state.window_full:
                    self.space.clear()
                    await self.space.wait()
                    if state.epoch != epoch:
                        return
                item = await self.queue.get()
                if not isinstance(item, tuple):
                    state.end_source(item)
                    break
                state.take(item[0])  # no await between get and take: nothing is lost
                continue
            out.add(entry)
        last = out.rest(epoch)
        if last is not None:
            yield last


async def _pump(
    traces: Iterable[TraceInput] | AsyncIterable[TraceInput],
    queue: asyncio.Queue[tuple[TraceInput] | Exception | None],
) -> None:
    """Feeds the caller's traces to the stream; None at the end, or the iterable's error."""
    try:
        if isinstance(traces, AsyncIterable):
            async for trace in traces:
                await queue.put((trace,))
        else:
            for trace in traces:
                await queue.put((trace,))
    except Exception as exc:  # delivered in order, after the traces already read
        await queue.put(exc)
        return
    await queue.put(None)
