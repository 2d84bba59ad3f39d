"""GraderService: thin RPC handlers that pass request bytes to the core and bytes back."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeAlias

import grpc

from trajgrade import _core
from trajgrade.errors import LimitExceededError, QueueFullError, ShuttingDownError, with_details
from trajgrade.server import wire
from trajgrade.server.batcher import Batcher
from trajgrade.server.cancel import cancellation
from trajgrade.server.import_suite import ImportSuiteHandler
from trajgrade.server.metrics import ServerMetrics
from trajgrade.server.status import invalid_request, suite_not_found, to_status
from trajgrade.v1 import grader_service_pb2, result_pb2
from trajgrade.wire import length_delimited

SERVICE_NAME: str = grader_service_pb2.DESCRIPTOR.services_by_name["GraderService"].full_name

# Field numbers of the pinned wire shape (SPEC 8). StreamGradeTracesRequest and GradeTraceRequest
# share their layout (trace = 1, suite = 2, suite_id = 3), so a stream message, once its suite is
# filled in, is a GradeTraceRequest as it stands.
_SUITE_REF = (2, 3)
# TraceOutcome.result and GradeTraceResponse.result are both field 1 holding a GradeResult, so a
# GradeTraceResponse is also a TraceOutcome carrying a result; StreamGradeTracesResponse wraps it
# as its field 1.
_OUTCOME = 1
_SUITE = 1
# StreamGradeTracesRequest.traces = 4 (a chunk; the core frames its outcomes as field 2).
_STREAM_TRACE = 1
_STREAM_SUITE = 2
_STREAM_TRACES = 4


class CoreGrader(Protocol):
    """The parts of trajgrade._core.Grader the servicer calls beyond the batcher's."""

    def register_suite(self, suite: bytes) -> str: ...

    def get_suite(self, suite_id: str) -> Any: ...

    def compile_suite(self, suite: bytes) -> Any: ...

    def grade_batch_request(
        self, request: bytes, cancel: _core.CancelToken | None = None
    ) -> bytes: ...

    def grade_stream_chunk(
        self, suite: Any, message: bytes, cancel: _core.CancelToken | None = None
    ) -> bytes: ...


# grpc ships no type information, so the context is effectively Any to mypy.
Ctx: TypeAlias = grpc.aio.ServicerContext


class GraderServicer:
    """One method per RPC; requests and responses are serialized bytes (identity serializers)."""

    def __init__(
        self,
        grader: CoreGrader,
        batcher: Batcher,
        control: concurrent.futures.Executor,
        *,
        stream_window: int,
        max_batch_items: int,
    ) -> None:
        self._grader = grader
        self._batcher = batcher
        # Suite compilation runs off the event loop (a big suite with many regexes takes a while)
        # and off the grading threads (so registration never waits behind a huge batch).
        self._control = control
        self._window = stream_window
        self._max_batch_items = max_batch_items
        self._windows: set[_Window] = set()  # the open streams, for close_streams()

    def close_streams(self) -> None:
        """Drain: every open stream ends (UNAVAILABLE / SHUTTING_DOWN) once the answers to the
        messages it had accepted are sent, instead of waiting for its caller's next message."""
        for window in self._windows:
            window.close()

    async def grade_trace(self, request: bytes, context: Ctx) -> bytes:
        """GradeTrace: through the batcher; the core answers GradeTraceResponse bytes."""
        with cancellation(context) as token:
            return await self._batcher.grade(request, context.time_remaining(), token)

    async def batch_grade_traces(self, request: bytes, context: Ctx) -> bytes:
        """BatchGradeTraces: one core call for the whole request, queued like any other work."""
        with cancellation(context) as token:

            def grade(payload: bytes) -> bytes:
                return self._grade_batch_envelope(payload, token)

            return await self._batcher.grade_solo(request, context.time_remaining(), grade, token)

    def _grade_batch_envelope(self, request: bytes, token: _core.CancelToken) -> bytes:
        """Runs on a grading thread: the whole BatchGradeTracesRequest in one core call.

        The core keeps each trace as bytes while it reads the envelope, so a trace that does
        not decode (invalid UTF-8, broken framing inside it) or is over a limit is that item's
        ItemError and its siblings are graded (SPEC 7). A malformed envelope (its framing, a
        field of the wrong wire type, a suite_id that is not UTF-8, an undecodable inline
        suite), no suite, too many traces, or a bad or unknown suite fails the whole call, as
        in GradeTrace.
        """
        return self._grader.grade_batch_request(request, token)

    def _suite(self, *, inline: bool, value: bytes) -> Any:
        """The compiled suite of a suite_ref: an inline Suite's bytes, or a suite_id's text."""
        if inline:
            return self._grader.compile_suite(value)
        suite_id = wire.text(value, "suite_id")
        suite = self._grader.get_suite(suite_id)
        if suite is None:
            raise suite_not_found(f"unknown suite_id {suite_id!r}", field="suite_id")
        return suite

    def _grade_chunk(
        self, inline: bool, suite: bytes, message: bytes, token: _core.CancelToken
    ) -> bytes:
        """Runs on a grading thread: one stream chunk in one core call, as BatchGradeTraces.

        The core splits the message's traces and answers the StreamGradeTracesResponse bytes:
        one `outcomes` entry per trace, in order; a trace that does not decode or is over a
        limit gets its ItemError (field traces[i], i within the message) and its siblings are
        graded.
        """
        compiled = self._suite(inline=inline, value=suite)
        return self._grader.grade_stream_chunk(compiled, message, token)

    async def register_suite(self, request: bytes, context: Ctx) -> bytes:
        """RegisterSuite: validate, compile and keep; answers the content-hash id."""
        suite = wire.message_field(request, _SUITE, "suite") or b""
        loop = asyncio.get_running_loop()
        suite_id = await loop.run_in_executor(self._control, self._grader.register_suite, suite)
        return grader_service_pb2.RegisterSuiteResponse(suite_id=suite_id).SerializeToString()

    async def get_suite(self, request: bytes, context: Ctx) -> bytes:
        """GetSuite: the registered suite, as the core keeps it."""
        # Read by hand, not by protobuf: a malformed request or an id that is not UTF-8 is
        # the caller's INVALID_ARGUMENT, not a decode exception (INTERNAL).
        suite_id = wire.string_field(request, _SUITE, "suite_id")
        if not suite_id:
            raise invalid_request("suite_id is required", field="suite_id")
        compiled = self._grader.get_suite(suite_id)
        if compiled is None:
            raise suite_not_found(f"no suite with id {suite_id!r} is registered", field="suite_id")
        return length_delimited(_SUITE, compiled.suite_bytes())

    async def stream_grade_traces(
        self, requests: AsyncIterator[bytes], context: Ctx
    ) -> AsyncIterator[bytes]:
        """StreamGradeTraces: one answer per message, in request order, read ahead boundedly.

        A single-trace message is queued as a GradeTraceRequest (the batcher coalesces it with
        other work); a chunk message (`traces`) is graded alone in one core call, like
        BatchGradeTraces. A bad trace becomes that item's ItemError; a bad or unknown suite, or
        a malformed or oversized chunk, ends the stream with its status after the answers
        already due. Reading goes on while fewer than stream_window traces are in flight, or
        while at most one message is (so the next chunk is read and queued while the current
        one grades). A full queue pauses reading instead of failing, as long as this stream has
        work in flight to wait for.
        """
        with cancellation(context) as token:
            window = _Window(self._window)
            if self._batcher.closed:
                window.close()
            self._windows.add(window)
            reader = asyncio.get_running_loop().create_task(
                self._read_stream(requests, context, window, token)
            )
            try:
                while True:
                    item = await window.next()
                    if item is None:
                        return
                    if isinstance(item, BaseException):
                        raise item
                    assert item.future is not None  # set before the reader queues it
                    try:
                        response = await item.future
                    except (_core.InvalidRequestError, _core.LimitExceededError) as exc:
                        if item.chunk:
                            raise  # not per item: the chunk's suite (SUITE_TOO_LARGE, ...)
                        response = _item_error(item.request, exc)
                    if item.chunk:
                        yield response  # already a StreamGradeTracesResponse (outcomes)
                    else:
                        yield length_delimited(_OUTCOME, response)
                    window.release(item)
            finally:
                self._windows.discard(window)
                reader.cancel()
                # Whatever is still queued for this stream has nobody to go to: let the batcher
                # skip it.
                window.cancel_all()

    async def _read_stream(
        self,
        requests: AsyncIterator[bytes],
        context: Ctx,
        window: _Window,
        token: _core.CancelToken,
    ) -> None:
        # The suite as last set: its whole field (appended to single-trace messages) and, for
        # chunks, whether it is inline and its value.
        suite_field: bytes | None = None
        suite: tuple[bool, bytes] = (False, b"")
        checked: tuple[bool, bytes] | None = None  # the suite reference last found usable
        try:
            async for message in requests:
                traces, found = wire.count_fields(
                    message, _STREAM_TRACES, (_STREAM_TRACE, *_SUITE_REF)
                )
                refs = [n for n in _SUITE_REF if n in found]
                if refs:
                    # Both set: the later one wins, as when protobuf parses a oneof.
                    number = max(refs, key=lambda n: found[n][0])
                    start, value_start, end = found[number]
                    suite_field = message[start:end]
                    suite = (number == _STREAM_SUITE, message[value_start:end])
                    if suite != checked:
                        await self._check_suite(*suite)
                        checked = suite
                elif suite_field is None:
                    raise invalid_request(
                        "the first StreamGradeTracesRequest must set suite or suite_id",
                        field="suite_ref",
                    )
                if traces:
                    item = self._chunk(message, traces, _STREAM_TRACE in found, suite, token)
                else:
                    # The single-trace form (also a message with neither field: proto3 reads
                    # an absent trace as an empty Trace, as before chunks existed). Appended
                    # fields merge, so adding the suite is the same as setting the oneof.
                    item = _Pending(message if refs else message + suite_field)
                await window.wait_for_room()
                item.future = await self._submit_with_backpressure(item, context, window, token)
                window.add(item)
            window.finish(None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # delivered in order, after the outcomes already accepted
            window.finish(exc)

    async def _check_suite(self, inline: bool, value: bytes) -> None:
        """A stream's suite reference, checked when it is set: a bad suite (undecodable,
        invalid, over max_suite_bytes) or a bad or unknown suite_id ends the stream with its
        status. Without this, the core would see the suite only inside each single-trace
        message, where an undecodable suite is indistinguishable from an undecodable trace."""
        if inline:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._control, self._grader.compile_suite, value)
        else:
            self._suite(inline=False, value=value)

    def _chunk(
        self,
        message: bytes,
        traces: int,
        has_trace: bool,
        suite: tuple[bool, bytes],
        token: _core.CancelToken,
    ) -> _Pending:
        """A chunk message of ``traces`` traces, checked, ready to be graded alone in one core
        call."""
        if has_trace:
            raise invalid_request(
                "a StreamGradeTracesRequest sets trace or traces, not both", field="traces"
            )
        if traces > self._max_batch_items:
            raise with_details(
                LimitExceededError(
                    f"{traces} traces in one StreamGradeTracesRequest; the limit is "
                    f"{self._max_batch_items} (max_batch_items)"
                ),
                reason_code="TOO_MANY_TRACES",
                field="traces",
            )
        inline, value = suite
        grade = self._grade_chunk

        def solo(chunk: bytes) -> bytes:
            return grade(inline, value, chunk, token)

        return _Pending(message, solo=solo, traces=traces)

    async def _submit_with_backpressure(
        self, item: _Pending, context: Ctx, window: _Window, token: _core.CancelToken
    ) -> asyncio.Future[bytes]:
        while True:
            try:
                return self._batcher.submit(
                    item.request, context.time_remaining(), solo=item.solo, cancel=token
                )
            except QueueFullError:
                pending = window.in_flight()
                if pending:  # its own earlier messages free room as they are graded
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                else:  # nothing of its own to wait for: stop reading until the queue has room
                    await self._batcher.wait_for_room(len(item.request))


class _Pending:
    """One message of a stream on its way through the batcher."""

    __slots__ = ("future", "request", "solo", "traces")

    def __init__(
        self, request: bytes, *, solo: Callable[[bytes], bytes] | None = None, traces: int = 1
    ) -> None:
        self.request = request  # single: the GradeTraceRequest; chunk: the message (its size)
        self.solo = solo  # a chunk: grades it alone, in one core call
        self.traces = traces  # what it counts against the window
        self.future: asyncio.Future[bytes] | None = None

    @property
    def chunk(self) -> bool:
        return self.solo is not None


class _Window:
    """The messages of one stream in flight, in request order, and the read-ahead bound.

    A message counts from the moment it is read until its answer was handed to gRPC. Reading
    goes on while fewer than ``limit`` traces are in flight, or while only the message being
    answered is (so the next chunk is always read and queued while the current one grades).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._queued: collections.deque[_Pending] = collections.deque()  # not yet taken
        self._head: _Pending | None = None  # taken by the responder, answer not yet sent
        self._traces = 0
        self._end: tuple[BaseException | None] | None = None
        self._closing = False  # the server drains: end once nothing accepted is left
        # One event for both sides; each waiter re-checks its condition after waking.
        self._changed = asyncio.Event()

    def close(self) -> None:
        """The server is draining: next() ends the stream once no accepted message is left."""
        self._closing = True
        self._changed.set()

    def add(self, item: _Pending) -> None:
        self._queued.append(item)
        self._traces += item.traces
        self._changed.set()

    def finish(self, error: BaseException | None) -> None:
        """No more messages: the end of the input (None), or the error that ends the stream."""
        self._end = (error,)
        self._changed.set()

    def release(self, item: _Pending) -> None:
        """The answer to ``item`` was sent."""
        self._traces -= item.traces
        self._head = None
        self._changed.set()

    async def next(self) -> _Pending | BaseException | None:
        """The oldest message in flight; once reading stopped and none is left, the end."""
        while True:
            if self._queued:
                self._head = self._queued.popleft()
                self._changed.set()
                return self._head
            if self._end is not None:
                return self._end[0]
            if self._closing:
                # Every accepted message is answered; what the caller sends next is refused
                # as it would be by a new call (the Python client resends unanswered traces).
                return ShuttingDownError(
                    "the server is shutting down; retry the rest of the stream on another replica"
                )
            self._changed.clear()
            await self._changed.wait()

    async def wait_for_room(self) -> None:
        """Return once the read-ahead bound allows reading one more message."""
        while self._traces >= self._limit and self._queued:
            self._changed.clear()
            await self._changed.wait()

    def in_flight(self) -> list[asyncio.Future[bytes]]:
        """This stream's futures still grading (what a full queue can wait for)."""
        items = [self._head, *self._queued] if self._head is not None else list(self._queued)
        return [i.future for i in items if i.future is not None and not i.future.done()]

    def cancel_all(self) -> None:
        """The stream is over: whatever is queued has nobody to go to (the batcher skips it)."""
        for item in [self._head, *self._queued]:
            if item is not None and item.future is not None:
                item.future.cancel()
        self._queued.clear()
        self._head = None


def _item_error(request: bytes, exc: BaseException) -> bytes:
    """A TraceOutcome holding the ItemError for one stream item."""
    error = result_pb2.ItemError(
        trace_id=wire.trace_id(request),
        reason_code=str(getattr(exc, "reason_code", "") or "INVALID_TRACE"),
        field=str(getattr(exc, "field", "") or ""),
        message=str(getattr(exc, "message", "") or exc),
    )
    return result_pb2.TraceOutcome(error=error).SerializeToString()


# --- handler registration ----------------------------------------------------------------------

Unary = Callable[[bytes, Ctx], Awaitable[bytes]]
Streaming = Callable[[AsyncIterator[bytes], Ctx], AsyncIterator[bytes]]


def _guard_unary(rpc: str, behavior: Unary, metrics: ServerMetrics) -> Unary:
    """The one place where a handler's exception becomes its gRPC status (status.to_status)."""

    async def handler(request: bytes, context: Ctx) -> bytes:
        started = time.perf_counter()
        try:
            response = await behavior(request, context)
        except asyncio.CancelledError:
            metrics.count(rpc, grpc.StatusCode.CANCELLED, time.perf_counter() - started)
            raise
        except Exception as exc:
            status = to_status(exc, rpc=rpc)
            metrics.count(rpc, status.code, time.perf_counter() - started)
            await context.abort_with_status(status)
        metrics.count(rpc, grpc.StatusCode.OK, time.perf_counter() - started)
        return response

    return handler


def _guard_stream(rpc: str, behavior: Streaming, metrics: ServerMetrics) -> Streaming:
    """As _guard_unary, for a response stream (outcomes already sent stay sent)."""

    async def handler(requests: AsyncIterator[bytes], context: Ctx) -> AsyncIterator[bytes]:
        started = time.perf_counter()
        try:
            async for response in behavior(requests, context):
                yield response
        except asyncio.CancelledError:
            metrics.count(rpc, grpc.StatusCode.CANCELLED, time.perf_counter() - started)
            raise
        except Exception as exc:
            status = to_status(exc, rpc=rpc)
            metrics.count(rpc, status.code, time.perf_counter() - started)
            await context.abort_with_status(status)
        metrics.count(rpc, grpc.StatusCode.OK, time.perf_counter() - started)

    return handler


def generic_handler(servicer: GraderServicer, metrics: ServerMetrics) -> grpc.GenericRpcHandler:
    """The GraderService handlers, registered with identity (de)serializers.

    No request_deserializer / response_serializer: gRPC hands the handlers the raw request bytes
    and sends the bytes they return, so traces are decoded and results encoded only in the core.
    Errors are mapped here, at registration, rather than in an interceptor: same single place,
    without an interceptor's per-call cost on every RPC.
    """
    handlers = {
        "GradeTrace": grpc.unary_unary_rpc_method_handler(
            _guard_unary("GradeTrace", servicer.grade_trace, metrics)
        ),
        "BatchGradeTraces": grpc.unary_unary_rpc_method_handler(
            _guard_unary("BatchGradeTraces", servicer.batch_grade_traces, metrics)
        ),
        "StreamGradeTraces": grpc.stream_stream_rpc_method_handler(
            _guard_stream("StreamGradeTraces", servicer.stream_grade_traces, metrics)
        ),
        "RegisterSuite": grpc.unary_unary_rpc_method_handler(
            _guard_unary("RegisterSuite", servicer.register_suite, metrics)
        ),
        "GetSuite": grpc.unary_unary_rpc_method_handler(
            _guard_unary("GetSuite", servicer.get_suite, metrics)
        ),
        # Suite-format conversion lives in its own module (server/import_suite.py).
        "ImportSuite": grpc.unary_unary_rpc_method_handler(
            _guard_unary(
                "ImportSuite", ImportSuiteHandler(servicer._grader, servicer._control), metrics
            )
        ),
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
