"""The blocking shell: `Client` makes the calls and sleeps the plans ask for, nothing else."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, Final, TypeAlias, TypeVar

import grpc

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


class Client(ClientBase):
    """Blocking client; thread-safe (share one per process). Use as a context manager or
    call `close()`.

    `target` is `host:port` or `unix:/path`. `timeout` (seconds, None for none) is the default
    deadline of each unary call, retries included; every method takes `timeout=` to override
    it. `token` adds `authorization: Bearer <token>`. TLS: `tls=True` with the system roots,
    or `root_certificates` (PEM bytes or a path); mutual TLS adds `certificate_chain` and
    `private_key`; `server_name` overrides the name checked in the server certificate.
    """

    _grpc = grpc

    def close(self) -> None:
        """Close the channel (calls in progress are cancelled)."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _drive(self, plan: Plan[T]) -> T:
        """Runs a plan: each Call made, each Sleep slept; its result or its exception."""
        reply: object = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                result: T = done.value
                return result
            reply = None
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                continue
            try:
                reply = self._invoke(step)
            except grpc.RpcError as rpc_error:
                reply = Failed.of(rpc_error)

    def _call(self, method: str, request: bytes, deadline: float | None) -> Any:
        """One unary call (retried) by the monotonic-clock `deadline`; its decoded answer."""
        return self._drive(self._calls.call(method, request, Deadline(deadline)))

    def register_suite(self, suite: SuiteInput, *, timeout: Unset = DEFAULT) -> str:
        """Validates, compiles and keeps the suite on the server; returns its `suite_id`.

        Raises InvalidSuiteError (`field` = first problem, `problems` = all of them).
        """
        return self._drive(self._calls.register_suite(suite, self._deadline(timeout)))

    def get_suite(self, suite_id: str, *, timeout: Unset = DEFAULT) -> suite_pb2.Suite:
        """The suite registered under `suite_id`.

        A replica that does not hold it answers NOT_FOUND; if this client registered that id,
        its own copy is returned instead (the id is a hash of the content, so it is the same
        suite). Otherwise SuiteNotFoundError is raised.
        """
        return self._drive(self._calls.get_suite(suite_id, self._deadline(timeout)))

    def import_suite(
        self,
        text: str,
        *,
        format: str = "auto",
        skip_unsupported: bool = False,
        name: str = "",
        timeout: Unset = DEFAULT,
    ) -> grader_service_pb2.ImportSuiteResponse:
        """Converts a suite file's text (Orbit, promptfoo, ADK or native; `format` to force one)
        on the server and registers it: the response holds the native `suite`, its `suite_id`
        and what was left out (`unsupported`, with `skip_unsupported=True`). `name` picks one
        suite of a source holding several. Raises InvalidSuiteError naming each problem.
        """
        plan = self._calls.import_suite(
            text, format, skip_unsupported, name, self._deadline(timeout)
        )
        return self._drive(plan)

    def grade(
        self, trace: TraceInput, suite: SuiteInput, *, timeout: Unset = DEFAULT
    ) -> result_pb2.GradeResult:
        """Grades one trace (message, dict, JSON text or bytes) against `suite` (message, dict,
        path, JSON/YAML text, bytes, or a `suite_id` this client or the server knows).

        A trace that cannot be graded raises InvalidRequestError or LimitExceededError.
        """
        return self._drive(self._calls.grade(trace, suite, self._deadline(timeout)))

    def grade_batch(
        self, traces: Iterable[TraceInput], suite: SuiteInput, *, timeout: Unset = DEFAULT
    ) -> list[Outcome]:
        """Grades many traces in one call: one GradeResult or ItemError per trace, in order.

        At most the server's `max_batch_items` (default 10,000) traces per call.
        """
        return self._drive(self._calls.grade_batch(traces, suite, self._deadline(timeout)))

    def grade_stream(
        self,
        traces: Iterable[TraceInput],
        suite: SuiteInput,
        *,
        timeout: float | None = None,
        chunk_size: int | None = None,
    ) -> Iterator[Outcome]:
        """Grades traces over one StreamGradeTraces call, yielding outcomes in input order.

        Traces go out in chunks of `chunk_size` (default: the client's `stream_chunk`, 256)
        per message, each graded by the server as one batch; a chunk is sent when full, when
        the input ends, or when `stream_window` traces are waiting for answers. `chunk_size=1`
        sends one trace per message (the form servers without chunks understand). Traces are
        read lazily, at most `stream_window` ahead of the outcomes. If the stream breaks with
        UNAVAILABLE (or a full queue) it is reopened and the unanswered traces are sent again;
        a replica that does not know the suite gets it inline. `timeout` bounds the whole
        stream (default: none).
        """
        deadline = Deadline.after(timeout)
        ref = self._drive(self._calls.by_id(suite, deadline))
        state, plan = self._stream_plan(ref, deadline, chunk_size)
        return self._run_stream(state, plan, iter(traces))

    def watch_results(
        self,
        *,
        suite_ids: Iterable[str] = (),
        verdicts: Iterable[VerdictInput] = (),
        service_names: Iterable[str] = (),
        timeout: float | None = None,
    ) -> Iterator[grader_service_pb2.WatchResultsResponse]:
        """Follows live grading (`trajgrade serve --otlp-grpc/--otlp-http`): one
        WatchResultsResponse per result as runs are graded, from now on, until the caller stops
        iterating (the call is then cancelled), the server drains, or `timeout` (seconds,
        default none) passes. Filters: suite ids, verdicts ("PASS"/"FAIL") and the runs'
        `service.name`; an empty filter matches everything.

        Not retried: results graded while no watch is open are not replayed (the server's
        JSONL sink has them). A server without live grading raises LiveGradingOffError; a
        watcher that falls behind the server's queue raises WatcherTooSlowError.
        """
        request = watch_request(suite_ids, verdicts, service_names)
        return self._watch_results(request, timeout)

    def _watch_results(
        self, request: bytes, timeout: float | None
    ) -> Iterator[grader_service_pb2.WatchResultsResponse]:
        call = self._watch(request, timeout=timeout, metadata=self._opts.metadata)
        try:
            yield from call
        except grpc.RpcError as rpc_error:
            raise error_from_rpc(rpc_error) from None
        finally:
            call.cancel()

    def _run_stream(
        self, state: StreamState, plan: StreamPlan, source: Iterator[TraceInput]
    ) -> Iterator[Outcome]:
        """Runs a stream plan. The plan advances under the feed's lock (gRPC's thread reads
        the same state to send requests), and the feed is woken after every step."""
        feed = _SyncFeed(state, source)
        call: Any = None
        responses: Iterator[Any] = iter(())
        reply: object = None
        try:
            while True:
                with feed.cond:
                    try:
                        step = plan.send(reply)
                    except StopIteration:
                        return
                    finally:
                        feed.cond.notify_all()
                reply = None
                if isinstance(step, Emit):
                    yield from step.outcomes
                elif isinstance(step, Sleep):
                    time.sleep(step.seconds)
                elif isinstance(step, Open):
                    call = self._reopen(call, feed.requests(state.epoch), step)
                    responses = iter(call)
                else:
                    try:
                        reply = next(responses, END)
                    except grpc.RpcError as rpc_error:
                        reply = Failed.of(rpc_error)
        finally:
            if call is not None:
                call.cancel()
            with feed.cond:
                state.epoch += 1
                feed.cond.notify_all()


_WOULD_WAIT: Final = result_pb2.ItemError()  # a sentinel entry: the window is full
_Entry: TypeAlias = "bytes | result_pb2.ItemError | None"


class _SyncFeed:
    """The request iterators of one blocking grade_stream (gRPC runs them on its own thread)."""

    def __init__(self, state: StreamState, source: Iterator[TraceInput]) -> None:
        self.state = state
        self.source = source
        self.cond = threading.Condition()

    def _next_entry(self, seq: int, epoch: int, *, block: bool) -> _Entry:  # noqa: PLR0911 - one exit per case
        """Entry `seq`, taking a trace from the source if needed; None ends this iterator.

        With `block` False, a full window answers _WOULD_WAIT instead of waiting (the caller
        sends its partial chunk first: its outcomes are what would free the window).
        """
        state = self.state
        with self.cond:
            if state.epoch != epoch:
                return None
            entry = state.entry(seq)
            if entry is not None or state.exhausted:
                return entry
            if state.window_full and not block:
                return _WOULD_WAIT
            while state.window_full and state.epoch == epoch:
                self.cond.wait()
            if state.epoch != epoch:
                return None
            try:
                state.take(next(self.source))
            except StopIteration:
                state.end_source()
                return None
            except Exception as exc:  # the caller's iterable failed: end the stream cleanly
                state.end_source(exc)
                return None
            return state.entry(seq)

    def requests(self, epoch: int) -> Iterator[bytes]:
        """Attempt `epoch`: the unanswered traces again, then new ones from the source."""
        out = Messages(self.state)
        while (entry := self._next_entry(out.seq, epoch, block=not out.chunk)) is not None:
            if entry is _WOULD_WAIT or out.full:
                yield out.flush()
                continue
            out.add(entry)
        last = out.rest(epoch)
        if last is not None:
            yield last
