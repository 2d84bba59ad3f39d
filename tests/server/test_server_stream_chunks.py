"""StreamGradeTraces with chunks (`traces`): real server, real channel, library bytes compared."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import grpc
import pytest
from trajgrade import _core
from trajgrade._core import bench
from trajgrade.errors import InvalidRequestError
from trajgrade.server import wire
from trajgrade.v1 import grader_service_pb2 as g
from trajgrade.v1 import trace_pb2
from trajgrade.wire import length_delimited

from .server_harness import Case, GatedGrader, Harness, ServerFactory, bad_utf8_trace, status_of


def _traces(case: Case, n: int, prefix: str = "t") -> list[bytes]:
    return [
        trace_pb2.Trace(id=f"{prefix}{i}", calls=case.trace.calls).SerializeToString()
        for i in range(n)
    ]


def chunk_message(traces: Sequence[bytes], suite_ref: bytes = b"") -> bytes:
    """A StreamGradeTracesRequest with `traces` (field 4) framed around already-encoded traces."""
    return b"".join(length_delimited(4, t) for t in traces) + suite_ref


def single_message(trace: bytes, suite_ref: bytes = b"") -> bytes:
    return length_delimited(1, trace) + suite_ref


def inline(case: Case) -> bytes:
    return length_delimited(2, case.suite.SerializeToString())


def by_id(suite_id: str) -> bytes:
    return length_delimited(3, suite_id.encode())


def library_chunk(reference: _core.Grader, suite: bytes, traces: Sequence[bytes]) -> bytes:
    """What the server must answer for a chunk: the library's outcomes as `outcomes` (field 2)."""
    outcomes = bench.grade_traces(reference.compile_suite(suite), list(traces))
    return b"".join(length_delimited(2, o) for o in outcomes)


async def _messages(messages: Sequence[bytes]) -> AsyncIterator[bytes]:
    for m in messages:
        yield m


async def test_chunked_stream_is_byte_identical_to_the_library(
    server: Harness, valid_cases: list[Case], reference: _core.Grader
) -> None:
    case = valid_cases[0]
    traces = _traces(case, 700)
    sizes = [1, 2, 100, 256, 341]  # 700 traces in chunks of uneven sizes
    messages: list[bytes] = []
    expected: list[bytes] = []
    start = 0
    for k, size in enumerate(sizes):
        chunk = traces[start : start + size]
        start += size
        messages.append(chunk_message(chunk, inline(case) if k == 0 else b""))
        expected.append(library_chunk(reference, case.suite.SerializeToString(), chunk))
    answers = [bytes(a) async for a in server.raw_stream()(_messages(messages))]
    assert answers == expected
    # One answer per message; together one outcome per trace, in order, each equal to the
    # single-trace answer of the library.
    outcomes = [o for a in answers for o in g.StreamGradeTracesResponse.FromString(a).outcomes]
    assert [o.result.trace_id for o in outcomes] == [f"t{i}" for i in range(700)]
    single = reference.compile_suite(case.suite.SerializeToString()).grade(traces[5])
    assert outcomes[5].result.SerializeToString() == single


async def test_mixed_single_and_chunk_messages_keep_order_across_suite_switches(
    server: Harness, valid_cases: list[Case], reference: _core.Grader
) -> None:
    case_a, case_b = valid_cases[0], valid_cases[7]
    id_b = (await server.stub.RegisterSuite(g.RegisterSuiteRequest(suite=case_b.suite))).suite_id
    suite_a, suite_b = case_a.suite.SerializeToString(), case_b.suite.SerializeToString()
    traces = _traces(case_a, 40)
    plan: list[tuple[str, list[bytes], bytes, bytes]] = [  # kind, traces, suite_ref, suite
        ("single", traces[0:1], inline(case_a), suite_a),
        ("chunk", traces[1:11], b"", suite_a),
        ("single", traces[11:12], b"", suite_a),
        ("chunk", traces[12:20], by_id(id_b), suite_b),  # switch suites with a chunk
        ("single", traces[20:21], b"", suite_b),  # a single message keeps the new suite
        ("chunk", traces[21:30], b"", suite_b),
        ("single", traces[30:31], inline(case_a), suite_a),  # and back, with a single message
        ("chunk", traces[31:40], b"", suite_a),
    ]
    messages = [
        chunk_message(ts, ref) if kind == "chunk" else single_message(ts[0], ref)
        for kind, ts, ref, _ in plan
    ]
    answers = [bytes(a) async for a in server.raw_stream()(_messages(messages))]
    assert len(answers) == len(plan)
    for (kind, ts, _, suite), answer in zip(plan, answers, strict=True):
        response = g.StreamGradeTracesResponse.FromString(answer)
        if kind == "chunk":
            assert answer == library_chunk(reference, suite, ts)
            assert not response.HasField("outcome")
        else:
            assert len(response.outcomes) == 0
            expected = reference.compile_suite(suite).grade(ts[0])
            assert response.outcome.result.SerializeToString() == expected
    ids = []
    for answer in answers:
        response = g.StreamGradeTracesResponse.FromString(answer)
        outcomes = response.outcomes if len(response.outcomes) else [response.outcome]
        ids += [o.result.trace_id for o in outcomes]
    assert ids == [f"t{i}" for i in range(40)]


async def test_a_bad_trace_in_a_chunk_is_an_item_error_only_for_it(
    make_server: ServerFactory, valid_cases: list[Case]
) -> None:
    server = await make_server(max_calls_per_trace=5)
    limited = _core.Grader(_core.Limits(max_calls_per_trace=5))
    case = valid_cases[0]
    traces = _traces(case, 20)
    too_many = trace_pb2.Trace(id="too-many", calls=[trace_pb2.ToolCall(name="x")] * 6)
    # Item 3: not UTF-8 (only the core can tell); item 4: over the calls limit; item 5: not
    # even a protobuf message.
    traces[3:3] = [bad_utf8_trace("bad"), too_many.SerializeToString(), b"\xff\xff\xff"]
    messages = [chunk_message(traces, inline(case)), chunk_message(traces[:2])]
    answers = [bytes(a) async for a in server.raw_stream()(_messages(messages))]
    assert answers[0] == library_chunk(limited, case.suite.SerializeToString(), traces)
    outcomes = g.StreamGradeTracesResponse.FromString(answers[0]).outcomes
    assert len(outcomes) == 23
    kinds = [o.WhichOneof("outcome") for o in outcomes]
    assert [i for i, k in enumerate(kinds) if k == "error"] == [3, 4, 5]
    assert outcomes[3].error.reason_code == "INVALID_TRACE"
    assert outcomes[3].error.trace_id == "bad"
    assert outcomes[4].error.reason_code == "TOO_MANY_CALLS"
    assert outcomes[4].error.field.startswith("traces[4]")
    assert outcomes[5].error.reason_code == "INVALID_TRACE"
    assert outcomes[6].result.trace_id == "t3"
    # The stream goes on after the bad items.
    assert len(g.StreamGradeTracesResponse.FromString(answers[1]).outcomes) == 2


async def test_chunk_over_the_limit_ends_the_stream_naming_the_field(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    server = await make_server(max_batch_items=50)
    case = valid_cases[0]
    traces = _traces(case, 51)
    messages = [chunk_message(traces[:50], inline(case)), chunk_message(traces)]
    answers: list[bytes] = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for answer in server.raw_stream()(_messages(messages)):
            answers.append(bytes(answer))
    # The message within the limit was answered first; then the stream ended.
    assert answers == [library_chunk(reference, case.suite.SerializeToString(), traces[:50])]
    code, info = status_of(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.reason == "TOO_MANY_TRACES"
    assert info.metadata["field"] == "traces"
    assert "51 traces" in (err.value.details() or "")
    assert "max_batch_items" in (err.value.details() or "")


async def test_trace_and_traces_in_one_message_is_invalid_argument(
    server: Harness, valid_cases: list[Case]
) -> None:
    case = valid_cases[0]
    traces = _traces(case, 3)
    both = single_message(traces[0]) + chunk_message(traces[1:], inline(case))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        _ = [a async for a in server.raw_stream()(_messages([both]))]
    code, info = status_of(err.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert info.reason == "INVALID_REQUEST"
    assert info.metadata["field"] == "traces"


async def test_empty_chunk_is_the_single_trace_form(
    server: Harness, valid_cases: list[Case], reference: _core.Grader
) -> None:
    """proto3 cannot tell an empty `traces` from an absent one: such a message is answered as a
    single-trace message whose trace is absent (an empty Trace), exactly as before chunks."""
    case = valid_cases[0]
    empty_chunk = g.StreamGradeTracesRequest(suite=case.suite, traces=[]).SerializeToString()
    (answer,) = [bytes(a) async for a in server.raw_stream()(_messages([empty_chunk]))]
    response = g.StreamGradeTracesResponse.FromString(answer)
    assert len(response.outcomes) == 0
    expected = reference.compile_suite(case.suite.SerializeToString()).grade(b"")
    assert response.outcome.result.SerializeToString() == expected


async def test_generated_stubs_send_and_read_chunks(
    server: Harness, valid_cases: list[Case], reference: _core.Grader
) -> None:
    case = valid_cases[2]
    requests = [
        g.StreamGradeTracesRequest(suite=case.suite, traces=[case.trace] * 3),
        g.StreamGradeTracesRequest(trace=case.trace),
    ]
    responses = [r async for r in server.stub.StreamGradeTraces(iter(requests))]
    expected = reference.compile_suite(case.suite.SerializeToString()).grade(
        case.trace.SerializeToString()
    )
    assert [o.result.SerializeToString() for o in responses[0].outcomes] == [expected] * 3
    assert responses[1].outcome.result.SerializeToString() == expected


class _CountingGrader(GatedGrader):
    """GatedGrader that also records each core call as it starts (before the gate)."""

    def __init__(self, inner: _core.Grader) -> None:
        super().__init__(inner)
        self.started: list[int] = []

    def _wait(self, size: int) -> None:
        self.started.append(size)
        super()._wait(size)


async def test_next_chunk_is_read_while_one_grades_and_read_ahead_is_bounded(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    gated = _CountingGrader(_core.Grader())
    server = await make_server(grader=gated, executor_threads=2, stream_window=10)
    case = valid_cases[0]
    traces = _traces(case, 40)
    chunks = [traces[i : i + 10] for i in range(0, 40, 10)]
    gated.gate.clear()
    messages = [chunk_message(c, inline(case) if k == 0 else b"") for k, c in enumerate(chunks)]
    answers = asyncio.ensure_future(_collect(server.raw_stream()(_messages(messages))))
    assert await asyncio.to_thread(gated.entered.wait, 60)  # the grading thread is held
    await asyncio.sleep(0.3)
    # Chunk 1 is in the core and chunk 2 was read and handed to the core meanwhile (the
    # pipeline); chunks 3 and 4 stay unread: 20 traces in flight is over the window of 10.
    assert gated.started == [10, 10]
    assert server.server.batcher.depth == 0
    gated.gate.set()
    got = await answers
    suite = case.suite.SerializeToString()
    assert got == [library_chunk(reference, suite, c) for c in chunks]
    assert gated.started == [10, 10, 10, 10]


async def _collect(call: grpc.aio.StreamStreamCall) -> list[bytes]:
    return [bytes(a) async for a in call]


async def test_deadline_passed_while_a_chunk_waits_ends_the_stream(
    make_server: ServerFactory, valid_cases: list[Case]
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated, executor_threads=1)
    case = valid_cases[0]
    gated.gate.clear()
    blocker = asyncio.create_task(
        server.grade(g.GradeTraceRequest(trace=case.trace, suite=case.suite))
    )
    assert await asyncio.to_thread(gated.entered.wait, 60)  # the grading thread is held
    message = chunk_message(_traces(case, 5), inline(case))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        _ = [a async for a in server.raw_stream()(_messages([message]), timeout=0.3)]
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    gated.gate.set()
    await blocker
    await asyncio.sleep(0.05)
    assert gated.batches == [1]  # the chunk was dropped before grading, never half-answered


async def test_drain_finishes_the_chunk_in_flight_then_refuses_the_next(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    gated = GatedGrader(_core.Grader())
    server = await make_server(grader=gated, executor_threads=1)
    case = valid_cases[0]
    traces = _traces(case, 30)
    feed: asyncio.Queue[bytes | None] = asyncio.Queue()
    feed.put_nowait(chunk_message(traces[:20], inline(case)))

    async def messages() -> AsyncIterator[bytes]:
        while (m := await feed.get()) is not None:
            yield m

    gated.gate.clear()
    answers: list[bytes] = []

    async def read() -> None:
        async for answer in server.raw_stream()(messages()):
            answers.append(bytes(answer))

    reading = asyncio.create_task(read())
    assert await asyncio.to_thread(gated.entered.wait, 60)  # the grading thread is held
    drain = asyncio.create_task(server.server.shutdown(grace=10))
    await asyncio.sleep(0.1)
    feed.put_nowait(chunk_message(traces[20:]))  # arrives while draining: refused
    await asyncio.sleep(0.1)
    gated.gate.set()
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await reading
    code, info = status_of(err.value)
    assert (code, info.reason) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")
    # The chunk accepted before the drain was graded and answered in full.
    assert answers == [library_chunk(reference, case.suite.SerializeToString(), traces[:20])]
    assert await drain is True


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 2_100_000])
def test_split_fields_reads_every_length_and_keeps_other_fields(size: int) -> None:
    """The inline fast path (one-byte tag, one- or two-byte length) agrees with the general
    reader at every varint boundary, and fields it does not want are skipped whatever their
    wire type (a varint, a fixed64, a long tag)."""
    trace = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    other = b"\x28\x96\x01" + b"\x31" + b"\x00" * 8 + b"\xfa\x3f\x01z"  # 5: varint, 6: i64, 1023
    message = length_delimited(4, trace) + other + length_delimited(4, b"") + by_id("s1-x")
    traces, found = wire.split_fields(message, 4, (1, 2, 3))
    assert traces == [trace, b""]
    start, value_start, end = found[3]
    assert message[start:end] == by_id("s1-x")
    assert message[value_start:end] == b"s1-x"
    assert 1 not in found and 2 not in found


@pytest.mark.parametrize(
    "message",
    [
        length_delimited(4, b"abc")[:-1],  # truncated value
        b"\x22",  # a tag without a length
        b"\x22\xff\xff",  # a length whose varint never ends
        b"\x20\x01",  # traces (4) as a varint
        b"\x00\x01",  # field number 0
    ],
)
def test_split_fields_rejects_broken_framing(message: bytes) -> None:
    with pytest.raises(InvalidRequestError):
        wire.split_fields(message, 4, (1, 2, 3))


async def test_broken_chunk_framing_ends_the_stream_as_invalid_argument(
    server: Harness, valid_cases: list[Case]
) -> None:
    message = inline(valid_cases[0]) + length_delimited(4, b"abc")[:-1]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        _ = [a async for a in server.raw_stream()(_messages([message]))]
    code, info = status_of(err.value)
    assert (code, info.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_REQUEST")
