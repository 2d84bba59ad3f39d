"""The client's sans-IO core without a server: the status table and the retry decision per
status, the back-off schedule, the deadline budget, the plans' steps, and a stream's
bookkeeping across reconnects. The shells' I/O is tested against real servers in
test_client.py and test_client_retry.py."""

from __future__ import annotations

import random
from typing import Any

import grpc
import pytest
import trajgrade
import trajgrade.client
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from trajgrade import errors
from trajgrade.client.plans import Call, Calls, Plan, Sleep, call
from trajgrade.client.requests import SuiteRef
from trajgrade.client.retry import Deadline, Retry, RetryPolicy
from trajgrade.client.status import Failed, error_from_status, retryable
from trajgrade.client.stream import END, Emit, Messages, Open, Receive, StreamState, stream_plan
from trajgrade.v1 import grader_service_pb2, result_pb2
from trajgrade.wire import length_delimited

from .conftest import SUITE, trace

Code = grpc.StatusCode


class Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _trailing(reason: str | None, **metadata: str) -> tuple[tuple[str, bytes], ...]:
    """Trailing metadata as the server sends it: a google.rpc.Status with an ErrorInfo."""
    if reason is None:
        return ()
    packed = any_pb2.Any()
    packed.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="trajgrade", metadata=metadata))
    status = status_pb2.Status(details=[packed])
    return (("grpc-status-details-bin", status.SerializeToString()),)


class FakeRpcError(grpc.RpcError):
    def __init__(
        self, code: grpc.StatusCode, reason: str | None = None, details: str = "", **metadata: str
    ) -> None:
        self._code, self._trailing = code, _trailing(reason, **metadata)
        self._details = details or f"{code.name} from the test"

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailing


# --- statuses: which class, retried or not -------------------------------------------------------

STATUSES = [
    # code, ErrorInfo reason (None: no ErrorInfo), class, retried
    (Code.UNAVAILABLE, None, errors.UnavailableError, True),
    (Code.UNAVAILABLE, "SHUTTING_DOWN", errors.ShuttingDownError, True),
    (Code.RESOURCE_EXHAUSTED, "QUEUE_FULL", errors.QueueFullError, True),
    (Code.RESOURCE_EXHAUSTED, "TOO_MANY_RPCS", errors.TooManyRpcsError, True),
    (Code.RESOURCE_EXHAUSTED, None, errors.ResourceExhaustedError, False),  # message too large
    (Code.CANCELLED, None, errors.CallCancelledError, True),  # dropped before any handler
    (Code.CANCELLED, "CANCELLED", errors.CallCancelledError, False),  # a handler answered
    (Code.INVALID_ARGUMENT, "INVALID_SUITE", errors.InvalidSuiteError, False),
    (Code.INVALID_ARGUMENT, "TOO_MANY_TRACES", errors.LimitExceededError, False),
    (Code.INVALID_ARGUMENT, "WORK_LIMIT_EXCEEDED", errors.LimitExceededError, False),
    (Code.INVALID_ARGUMENT, "INVALID_TRACE", errors.InvalidRequestError, False),
    (Code.NOT_FOUND, "SUITE_NOT_FOUND", errors.SuiteNotFoundError, False),
    (Code.DEADLINE_EXCEEDED, None, errors.DeadlineExceededError, False),
    (Code.UNAUTHENTICATED, "UNAUTHENTICATED", errors.UnauthenticatedError, False),
    (Code.INTERNAL, "INTERNAL", errors.InternalError, False),
    (Code.PERMISSION_DENIED, None, errors.ServiceError, False),  # outside the table
]


@pytest.mark.parametrize(("code", "reason", "cls", "retried"), STATUSES)
def test_status_table_and_retry_decision(
    code: grpc.StatusCode, reason: str | None, cls: type[errors.TrajgradeError], retried: bool
) -> None:
    error = error_from_status(code, "the message", _trailing(reason, field="traces[0]"))
    assert type(error) is cls
    assert error.reason_code == (reason or code.name)
    assert error.message == "the message"
    assert error.field == ("traces[0]" if reason else "")
    if isinstance(error, errors.ServiceError):
        assert error.code == code
    assert retryable(error) is retried


def test_a_stream_that_got_answers_is_not_retried_on_cancelled() -> None:
    error = error_from_status(Code.CANCELLED, "CANCELLED", ())
    assert retryable(error) and not retryable(error, answered=True)


# --- back-off and deadline -----------------------------------------------------------------------


def test_backoff_is_bounded_and_its_jitter_repeats_with_the_seed() -> None:
    policy = RetryPolicy(initial_backoff=0.1, max_backoff=1.0, multiplier=3.0, jitter=0.25)
    schedule = [[policy.backoff(n, random.Random(seed)) for n in range(1, 8)] for seed in (1, 1)]
    assert schedule[0] == schedule[1]  # the same seed, the same waits
    other = [policy.backoff(n, random.Random(2)) for n in range(1, 8)]
    assert other != schedule[0]
    for n, wait in enumerate(schedule[0], start=1):
        base = min(1.0, 0.1 * 3.0 ** (n - 1))
        assert base * 0.75 <= wait <= base


def test_retry_stops_at_max_attempts_and_resets_on_progress() -> None:
    unavailable = error_from_status(Code.UNAVAILABLE, "down", ())
    retry = Retry(RetryPolicy(max_attempts=3, jitter=0.0), Deadline(None), random.Random(0))
    assert retry.delay(unavailable) == pytest.approx(0.1)
    assert retry.delay(unavailable) == pytest.approx(0.2)
    assert retry.delay(unavailable) is None  # the third failure was the last attempt
    retry.progress()
    assert retry.delay(unavailable) == pytest.approx(0.1)


def test_retry_after_is_a_floor_and_the_deadline_a_ceiling() -> None:
    clock = Clock()
    deadline = Deadline.after(1.0, clock)
    retry = Retry(RetryPolicy(jitter=0.0), deadline, random.Random(0))
    full = error_from_status(
        Code.RESOURCE_EXHAUSTED, "full", _trailing("QUEUE_FULL", retry_after_ms="600")
    )
    assert retry.delay(full) == pytest.approx(0.6)  # not the 0.1 s back-off
    clock.now += 0.5
    assert deadline.remaining() == pytest.approx(0.5)
    assert retry.delay(full) is None  # 0.6 s would pass the deadline
    clock.now += 10
    assert deadline.remaining() == 0.0
    assert Deadline.after(None, clock).remaining() is None


def _drive(plan: Plan[Any], replies: list[object]) -> tuple[list[Call | Sleep], Any]:
    """Runs a plan on canned replies (one per Call); its steps and its result."""
    steps: list[Call | Sleep] = []
    reply: object = None
    while True:
        try:
            step = plan.send(reply)
        except StopIteration as done:
            return steps, done.value
        steps.append(step)
        reply = replies.pop(0) if isinstance(step, Call) else None


def test_a_unary_plan_retries_within_the_budget_then_raises_the_last_error() -> None:
    clock = Clock()
    down = FakeRpcError(Code.UNAVAILABLE)
    policy = RetryPolicy(max_attempts=3, jitter=0.0)
    retry = Retry(policy, Deadline.after(5.0, clock), random.Random(0))
    plan = call("GradeTrace", b"req", retry)
    with pytest.raises(errors.UnavailableError) as err:
        _drive(plan, [Failed.of(down)] * 3)
    assert err.value.__cause__ is down
    assert retry.failures == 3

    retry = Retry(policy, Deadline.after(5.0, clock), random.Random(0))
    steps, answer = _drive(call("GradeTrace", b"req", retry), [Failed.of(down), "answer"])
    assert answer == "answer"
    assert steps == [Call("GradeTrace", b"req", 5.0), Sleep(0.1), Call("GradeTrace", b"req", 5.0)]


def test_a_plan_sends_the_suite_inline_to_a_replica_that_does_not_hold_its_id() -> None:
    calls = Calls(RetryPolicy(), random.Random(0))
    suite = trajgrade.load_suite(SUITE).SerializeToString(deterministic=True)
    registered = grader_service_pb2.RegisterSuiteResponse(suite_id="s1-" + "0" * 32)
    graded = grader_service_pb2.GradeTraceResponse(result=result_pb2.GradeResult(trace_id="t"))
    unknown = Failed.of(FakeRpcError(Code.NOT_FOUND, "SUITE_NOT_FOUND"))
    steps, result = _drive(
        calls.grade(trace("t"), SUITE, Deadline(None)), [registered, unknown, graded]
    )
    assert result.trace_id == "t"
    register, by_id, inline = (s for s in steps if isinstance(s, Call))
    assert register.request == length_delimited(1, suite)
    assert by_id.request.endswith(length_delimited(3, b"s1-" + b"0" * 32))
    assert inline.request.endswith(length_delimited(2, suite))


# --- a stream's bookkeeping ----------------------------------------------------------------------


def _state(chunk: int = 2, window: int = 4) -> StreamState:
    return StreamState(SuiteRef("s1-" + "0" * 32, None), window, chunk)


def _result(trace_id: str) -> result_pb2.GradeResult:
    return result_pb2.GradeResult(trace_id=trace_id)


def _messages(state: StreamState) -> list[bytes]:
    """One attempt's messages over the entries taken so far, as a feed sends them."""
    out = Messages(state)
    sent = []
    while (entry := state.entry(out.seq)) is not None:
        out.add(entry)
        if out.full:
            sent.append(out.flush())
    last = out.rest(state.epoch)
    return [*sent, last] if last is not None else sent


BAD_TRACE = 12345  # not a trace form: encoding fails here, before anything is sent


def test_messages_skip_local_errors_and_resend_the_unanswered_after_a_reconnect() -> None:
    state = _state(chunk=2)
    for item in (trace("a"), BAD_TRACE, trace("b"), trace("c")):
        state.take(item)
    assert state.unanswered == 3 and len(state.pending) == 4
    a, b, c = (trajgrade.trace_bytes(trace(n)) for n in "abc")
    suite_id = length_delimited(3, b"s1-" + b"0" * 32)
    # The suite goes in the first message only; the bad trace is not sent.
    assert _messages(state) == [
        length_delimited(4, a) + length_delimited(4, b) + suite_id,
        length_delimited(4, c),
    ]
    # "a" answered, then the stream broke: the next attempt sends "b" and "c" again, from
    # the first unanswered slot, with the suite again.
    assert [o.trace_id for o in state.answer(_result("a"))] == ["a"]
    state.epoch += 1
    assert _messages(state) == [length_delimited(4, b) + length_delimited(4, c) + suite_id]
    # An attempt that is over sends no partial chunk of its own.
    out = Messages(state)
    first = state.entry(out.seq)
    assert first is not None
    out.add(first)
    assert out.rest(state.epoch - 1) is None


def test_the_window_bounds_the_traces_in_flight() -> None:
    state = _state(chunk=8, window=2)
    state.take(trace("a"))
    assert not state.window_full
    state.take(trace("b"))
    assert state.window_full
    state.answer(_result("a"))
    assert not state.window_full


def test_the_single_trace_form_when_chunks_are_off() -> None:
    state = _state(chunk=1)
    state.take(trace("a"))
    (message,) = _messages(state)
    a = trajgrade.trace_bytes(trace("a"))
    assert message == length_delimited(1, a) + length_delimited(3, b"s1-" + b"0" * 32)


def test_answers_come_back_in_input_order_with_the_caller_s_indexes() -> None:
    state = _state(chunk=2)
    for item in (trace("a"), BAD_TRACE, trace("b")):
        state.take(item)
    # The server numbers a chunk's traces within the message: traces[0] of the 2nd message.
    bad = result_pb2.ItemError(trace_id="b", reason_code="TRACE_TOO_LARGE", field="traces[0]")
    first = state.answer(_result("a"))
    second = state.answer(bad)
    assert [type(o).__name__ for o in first + second] == ["GradeResult", "ItemError", "ItemError"]
    local = second[0]
    assert isinstance(local, result_pb2.ItemError) and local.field.startswith("traces[1]")
    assert second[1].field == "traces[2]"
    state.end_source()
    assert state.tail() == [] and state.finished


def _outcomes(*ids: str) -> grader_service_pb2.StreamGradeTracesResponse:
    outcomes = [result_pb2.TraceOutcome(result=_result(i)) for i in ids]
    return grader_service_pb2.StreamGradeTracesResponse(outcomes=outcomes)


def test_the_stream_plan_reconnects_inlines_the_suite_and_ends() -> None:
    state = StreamState(SuiteRef("s1-" + "0" * 32, b"suite"), 8, 2)
    for name in "abc":
        state.take(trace(name))
    retry = Retry(RetryPolicy(jitter=0.0), Deadline(None), random.Random(0))
    plan = stream_plan(state, retry)
    assert plan.send(None) == Open(None)
    assert isinstance(plan.send(None), Receive)
    assert plan.send(Failed.of(FakeRpcError(Code.NOT_FOUND, "SUITE_NOT_FOUND"))) == Open(None)
    assert state.inline and state.epoch == 1  # reopened at once, the suite inline
    assert isinstance(plan.send(None), Receive)
    emitted = plan.send(_outcomes("a"))
    assert isinstance(emitted, Emit) and [o.trace_id for o in emitted.outcomes] == ["a"]
    assert isinstance(plan.send(None), Receive)
    assert plan.send(Failed.of(FakeRpcError(Code.UNAVAILABLE))) == Sleep(0.1)
    assert plan.send(None) == Open(None) and state.epoch == 2 and state.first_seq == 1
    assert isinstance(plan.send(None), Receive)
    emitted = plan.send(_outcomes("b", "c"))
    assert isinstance(emitted, Emit) and [o.trace_id for o in emitted.outcomes] == ["b", "c"]
    state.end_source()
    assert isinstance(plan.send(None), Receive)
    assert plan.send(END) == Emit([])
    with pytest.raises(StopIteration):
        plan.send(None)


def test_the_stream_plan_reopens_after_the_internal_grpc_aio_makes_up() -> None:
    state = _state()
    plan = stream_plan(state, Retry(RetryPolicy(jitter=0.0), Deadline(None), random.Random(0)))
    plan.send(None)
    plan.send(None)
    made_up = FakeRpcError(Code.INTERNAL, details="Internal error from Core")
    assert plan.send(Failed.of(made_up)) == Sleep(0.1)  # the real status was lost: retried
    assert plan.send(None) == Open(None)
    plan.send(None)
    ours = FakeRpcError(Code.INTERNAL, "INTERNAL", details="Internal error from Core")
    with pytest.raises(errors.InternalError):  # the server's own INTERNAL: never retried
        plan.send(Failed.of(ours))


def test_the_stream_plan_raises_what_it_does_not_retry() -> None:
    state = _state()
    retry = Retry(RetryPolicy(), Deadline(None), random.Random(0))
    plan = stream_plan(state, retry)
    plan.send(None)
    plan.send(None)
    denied = FakeRpcError(Code.UNAUTHENTICATED, "UNAUTHENTICATED")
    with pytest.raises(errors.UnauthenticatedError) as err:
        plan.send(Failed.of(denied))
    assert err.value.__cause__ is denied


# --- one set of error names ----------------------------------------------------------------------


def test_old_error_names_are_the_one_class() -> None:
    client = trajgrade.client
    assert client.CancelledError is errors.CallCancelledError
    for name in (
        "ServiceError",
        "UnavailableError",
        "ResourceExhaustedError",
        "DeadlineExceededError",
        "UnauthenticatedError",
        "InvalidRequestError",
        "SuiteNotFoundError",
    ):
        assert getattr(client, name) is getattr(errors, name), name
    assert trajgrade.InvalidRequestError is errors.InvalidRequestError
    assert trajgrade.SuiteNotFoundError is errors.SuiteNotFoundError
    assert issubclass(errors.ServiceError, trajgrade.TrajgradeError)
    # The server's old names (server/status.py) are the same classes.
    from trajgrade.server import status  # noqa: PLC0415

    assert status.ServerError is errors.ServiceError
    assert status.RequestInvalidError is errors.InvalidRequestError
    assert status.SuiteUnknownError is errors.SuiteNotFoundError
    assert status.DeadlinePassedError is errors.DeadlineExceededError
    assert status.RequestCancelledError is errors.CallCancelledError
    assert status.UnauthenticatedError is errors.UnauthenticatedError
