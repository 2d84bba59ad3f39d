"""One grade_stream's bookkeeping and its plan (sans-IO): which traces are in flight, what to
send again after a reconnect, how the answers come back in input order, and when to reopen.

The plan yields `Open` (the shell opens a StreamGradeTraces call whose requests are
`StreamState.requests(epoch)` of the shell's feed, and sends back None), `Receive` (the shell
sends back the call's next answer, `END` once it closed normally, or `Failed`), `Emit` (the
shell hands these outcomes to the caller) and plans.Sleep. A shell that feeds requests from
another thread holds its lock while it advances the plan: every change to the state happens
there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass
from typing import Final, TypeAlias

from trajgrade.client.plans import Sleep
from trajgrade.client.requests import TRACES_INDEX, Outcome, SuiteRef, item_error
from trajgrade.client.retry import Retry
from trajgrade.client.status import Failed, protocol_error
from trajgrade.errors import SuiteNotFoundError, TrajgradeError
from trajgrade.traces import TraceInput, trace_bytes
from trajgrade.v1 import grader_service_pb2, result_pb2
from trajgrade.wire import length_delimited as _field


@dataclass(frozen=True)
class Open:
    """Open the stream again (attempt `epoch` of the state), within `timeout`."""

    timeout: float | None


@dataclass(frozen=True)
class Receive:
    """Send back the call's next answer, END, or Failed."""


@dataclass(frozen=True)
class Emit:
    """Hand these outcomes to the caller, in order."""

    outcomes: list[Outcome]


END: Final = object()
"""What a shell sends for Receive once the server closed the stream normally."""

_RECEIVE: Final = Receive()
StreamPlan: TypeAlias = Generator[Open | Receive | Emit | Sleep, object, None]


def _outcome(outcome: result_pb2.TraceOutcome) -> Outcome:
    kind = outcome.WhichOneof("outcome")
    if kind == "result":
        return outcome.result
    if kind == "error":
        return outcome.error
    raise protocol_error("a stream outcome with neither result nor error")


def stream_outcomes(response: grader_service_pb2.StreamGradeTracesResponse) -> list[Outcome]:
    """The outcomes of one stream answer: a chunk's `outcomes`, or a single trace's `outcome`."""
    if len(response.outcomes):
        return [_outcome(o) for o in response.outcomes]
    return [_outcome(response.outcome)]


class StreamState:
    """State of one grade_stream across attempts: the traces sent and not yet answered.

    `pending` holds, in order, every trace taken from the source whose outcome has not been
    yielded: its encoded bytes (sent, or to be sent again after a reconnect) or the ItemError
    it got here. Sequence numbers are absolute, so each attempt's request iterator resumes at
    the first unanswered trace.
    """

    def __init__(self, ref: SuiteRef, window: int, chunk: int) -> None:
        self.ref = ref
        self.window = window
        self.chunk = chunk  # traces per message; 1 sends the single-trace form
        self.inline = False
        self.pending: deque[bytes | result_pb2.ItemError] = deque()
        self.first_seq = 0  # sequence number of pending[0]
        self.taken = 0  # traces taken from the source so far
        self.exhausted = False
        self.epoch = 0
        self.unanswered = 0  # encoded entries in pending
        self.source_error: BaseException | None = None  # raised by the caller's iterable

    def take(self, trace: TraceInput) -> None:
        index = self.taken
        self.taken += 1
        try:
            self.pending.append(trace_bytes(trace, f"traces[{index}]"))
            self.unanswered += 1
        except TrajgradeError as exc:
            self.pending.append(item_error(exc, trace, f"traces[{index}]"))

    def entry(self, seq: int) -> bytes | result_pb2.ItemError | None:
        offset = seq - self.first_seq
        return self.pending[offset] if 0 <= offset < len(self.pending) else None

    def request(self, payloads: list[bytes], first: bool) -> bytes:
        """One StreamGradeTracesRequest: `trace` when chunks are off, else the chunk `traces`."""
        head = self.ref.fields(2, 3, inline=self.inline) if first else b""
        if self.chunk == 1:
            (payload,) = payloads
            return _field(1, payload) + head
        return b"".join([_field(4, p) for p in payloads]) + head

    def answer(self, outcome: Outcome) -> list[Outcome]:
        """The outcomes now due, in order: errors made here, then this answer's trace."""
        due: list[Outcome] = []
        while self.pending and isinstance(self.pending[0], result_pb2.ItemError):
            due.append(self.pop_error())
        if not self.pending:
            raise protocol_error("more stream outcomes than traces")
        self.pending.popleft()
        if isinstance(outcome, result_pb2.ItemError):
            # The server numbers a chunk's traces within the message; sequence numbers are
            # the caller's indexes.
            outcome.field = TRACES_INDEX.sub(f"traces[{self.first_seq}]", outcome.field)
        self.first_seq += 1
        self.unanswered -= 1
        due.append(outcome)
        return due

    def pop_error(self) -> result_pb2.ItemError:
        head = self.pending.popleft()
        self.first_seq += 1
        assert isinstance(head, result_pb2.ItemError)
        return head

    def tail(self) -> list[Outcome]:
        """After the server closed the stream normally: the remaining local errors."""
        if self.source_error is not None:
            raise self.source_error
        if self.unanswered:
            raise protocol_error(f"stream ended with {self.unanswered} traces unanswered")
        due: list[Outcome] = []
        while self.pending:
            due.append(self.pop_error())
        return due

    def end_source(self, error: BaseException | None = None) -> None:
        """The caller's iterable is done (or failed with `error`, raised after the outcomes
        of the traces read before it)."""
        self.exhausted = True
        self.source_error = error

    @property
    def window_full(self) -> bool:
        """`window` traces are waiting for answers: read no more until some come back."""
        return self.unanswered >= self.window

    @property
    def finished(self) -> bool:
        return self.exhausted and not self.pending


class Messages:
    """One attempt's requests, built from the first unanswered trace on: `state.chunk` traces
    per message (errors made here are skipped: they never go out), the suite in the first."""

    def __init__(self, state: StreamState) -> None:
        self.state = state
        self.seq = state.first_seq  # the next entry to add
        self.first = True
        self.chunk: list[bytes] = []

    @property
    def full(self) -> bool:
        return len(self.chunk) == self.state.chunk

    def add(self, entry: bytes | result_pb2.ItemError) -> None:
        self.seq += 1
        if isinstance(entry, bytes):
            self.chunk.append(entry)

    def flush(self) -> bytes:
        """The chunk so far as one message."""
        message = self.state.request(self.chunk, self.first)
        self.first = False
        self.chunk = []
        return message

    def rest(self, epoch: int) -> bytes | None:
        """The last, partial chunk, unless attempt `epoch` is over (its traces go again)."""
        return self.flush() if self.chunk and self.state.epoch == epoch else None


def stream_plan(state: StreamState, retry: Retry) -> StreamPlan:
    """The whole stream: open, read the answers, and after a failure either send the suite
    inline (a replica that does not hold its id), reopen after the back-off and send the
    unanswered traces again, or raise."""
    while True:
        yield Open(retry.deadline.remaining())
        answered = False
        while True:
            reply = yield _RECEIVE
            if isinstance(reply, Failed):
                break
            if reply is END:
                yield Emit(state.tail())
                if state.finished:
                    return
                raise protocol_error("stream closed before every trace was sent")
            assert isinstance(reply, grader_service_pb2.StreamGradeTracesResponse)
            due = [d for o in stream_outcomes(reply) for d in state.answer(o)]
            retry.progress()  # the attempt budget is for consecutive failures
            answered = True
            yield Emit(due)
        state.epoch += 1  # the feed's request iterator of this attempt stops
        error = reply.error
        if isinstance(error, SuiteNotFoundError) and not state.inline:
            if state.ref.encoded is None:
                raise error from reply.cause
            state.inline = True
            continue
        wait = retry.delay(error, answered=answered, lost=reply.lost)
        if wait is None:
            raise error from reply.cause
        yield Sleep(wait)
