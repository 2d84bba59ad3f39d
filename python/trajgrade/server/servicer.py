"""GraderService: thin RPC handlers that pass request bytes to the core and bytes back."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeAlias

import grpc

from trajgrade import _core
from trajgrade.server import wire
from trajgrade.server.batcher import Batcher
from trajgrade.server.metrics import ServerMetrics
from trajgrade.server.status import (
    QueueFullError,
    RequestInvalidError,
    SuiteUnknownError,
    to_status,
)
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
# BatchGradeTracesRequest: suite = 1, suite_id = 2, traces = 3; its response: outcomes = 1.
_BATCH_SUITE = 1
_BATCH_SUITE_REF = (1, 2)
_BATCH_TRACES = 3


class CoreGrader(Protocol):
    """The parts of trajgrade._core.Grader the servicer calls beyond the batcher's."""

    def register_suite(self, suite: bytes) -> str: ...

    def get_suite(self, suite_id: str) -> Any: ...

    def compile_suite(self, suite: bytes) -> Any: ...

    def grade_batch_request(self, request: bytes) -> bytes: ...

    def grade_traces(self, suite: Any, traces: list[bytes]) -> list[bytes]: ...


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

    async def grade_trace(self, request: bytes, context: Ctx) -> bytes:
        """GradeTrace: through the batcher; the core answers GradeTraceResponse bytes."""
        return await self._batcher.grade(request, context.time_remaining())

    async def batch_grade_traces(self, request: bytes, context: Ctx) -> bytes:
        """BatchGradeTraces: one core call for the whole request, queued like any other work."""
        return await self._batcher.grade_solo(
            request, context.time_remaining(), self._grade_batch_envelope
        )

    def _grade_batch_envelope(self, request: bytes) -> bytes:
        """Runs on a grading thread: the whole BatchGradeTracesRequest in one core call.

        The core decodes the envelope in one go, so a trace that does not decode (invalid
        UTF-8, broken framing) fails the whole call there. Only then, the envelope is split on
        its outer framing (the traces themselves stay undecoded) and graded trace by trace, so
        that one bad trace gets its own ItemError and its siblings are graded (SPEC 7).
        """
        try:
            return self._grader.grade_batch_request(request)
        except _core.InvalidRequestError:
            pass
        suite_ref: tuple[int, bytes] | None = None
        traces: list[bytes] = []
        for number, _, value_start, end in wire.top_level_fields(request):
            if number in _BATCH_SUITE_REF:
                suite_ref = (number, request[value_start:end])
            elif number == _BATCH_TRACES:
                traces.append(request[value_start:end])
        if suite_ref is None:
            raise RequestInvalidError("set suite or suite_id", field="suite_ref")
        if len(traces) > self._max_batch_items:
            raise RequestInvalidError(
                f"{len(traces)} traces in one call; the limit is {self._max_batch_items}",
                field="traces",
            )
        number, value = suite_ref
        if number == _BATCH_SUITE:
            suite = self._grader.compile_suite(value)
        else:
            suite_id = value.decode("utf-8", errors="replace")
            suite = self._grader.get_suite(suite_id)
            if suite is None:
                raise SuiteUnknownError(f"unknown suite_id {suite_id!r}", field="suite_id")
        outcomes = self._grader.grade_traces(suite, traces)
        return b"".join(length_delimited(_OUTCOME, o) for o in outcomes)

    async def register_suite(self, request: bytes, context: Ctx) -> bytes:
        """RegisterSuite: validate, compile and keep; answers the content-hash id."""
        suite = wire.field_value(request, _SUITE) or b""
        loop = asyncio.get_running_loop()
        suite_id = await loop.run_in_executor(self._control, self._grader.register_suite, suite)
        return grader_service_pb2.RegisterSuiteResponse(suite_id=suite_id).SerializeToString()

    async def get_suite(self, request: bytes, context: Ctx) -> bytes:
        """GetSuite: the registered suite, as the core keeps it."""
        suite_id = grader_service_pb2.GetSuiteRequest.FromString(request).suite_id
        if not suite_id:
            raise RequestInvalidError("suite_id is required", field="suite_id")
        compiled = self._grader.get_suite(suite_id)
        if compiled is None:
            raise SuiteUnknownError(
                f"no suite with id {suite_id!r} is registered", field="suite_id"
            )
        return length_delimited(_SUITE, compiled.suite_bytes())

    async def stream_grade_traces(
        self, requests: AsyncIterator[bytes], context: Ctx
    ) -> AsyncIterator[bytes]:
        """StreamGradeTraces: outcomes in request order, at most stream_window in flight.

        A bad trace becomes that item's ItemError; a bad or unknown suite ends the stream with
        its status (every later item would fail the same way). A full queue pauses reading
        instead of failing, as long as this stream has work in flight to wait for.
        """
        window: asyncio.Queue[tuple[bytes, asyncio.Future[bytes]] | BaseException | None]
        window = asyncio.Queue(maxsize=self._window)
        reader = asyncio.get_running_loop().create_task(
            self._read_stream(requests, context, window)
        )
        try:
            while True:
                item = await window.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                request, future = item
                try:
                    response = await future
                except (_core.InvalidRequestError, _core.LimitExceededError) as exc:
                    yield length_delimited(_OUTCOME, _item_error(request, exc))
                    continue
                yield length_delimited(_OUTCOME, response)
        finally:
            reader.cancel()
            # Whatever is still queued for this stream has nobody to go to: let the batcher skip it.
            while not window.empty():
                left = window.get_nowait()
                if isinstance(left, tuple):
                    left[1].cancel()

    async def _read_stream(
        self,
        requests: AsyncIterator[bytes],
        context: Ctx,
        window: asyncio.Queue[tuple[bytes, asyncio.Future[bytes]] | BaseException | None],
    ) -> None:
        suite_ref: bytes | None = None
        oldest: list[asyncio.Future[bytes]] = []
        try:
            async for received in requests:
                message = received
                found = wire.last_field(message, _SUITE_REF)
                if found is not None:
                    suite_ref = found[1]
                elif suite_ref is None:
                    raise RequestInvalidError(
                        "the first StreamGradeTracesRequest must set suite or suite_id",
                        field="suite_ref",
                    )
                else:
                    message += suite_ref  # appended fields merge: same as setting the oneof
                future = await self._submit_with_backpressure(message, context, oldest)
                oldest.append(future)
                if len(oldest) > self._window:
                    del oldest[0]
                await window.put((message, future))
            await window.put(None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # delivered in order, after the outcomes already accepted
            await window.put(exc)

    async def _submit_with_backpressure(
        self, message: bytes, context: Ctx, in_flight: list[asyncio.Future[bytes]]
    ) -> asyncio.Future[bytes]:
        while True:
            try:
                return self._batcher.submit(message, context.time_remaining())
            except QueueFullError:
                pending = [f for f in in_flight if not f.done()]
                if not pending:
                    raise
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)


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
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
