"""CompiledSuite.grade_batch: LazyGradeResult behaves as a GradeResult, dicts encoded by the
binding equal the deterministic serialization, and every input form keeps its position."""

from __future__ import annotations

import copy
import gc
import json
import pickle
from typing import Any

import pytest
import trajgrade
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from trajgrade import _core
from trajgrade.results import LazyGradeResult
from trajgrade.v1 import result_pb2, trace_pb2

SUITE = {
    "name": "s",
    "assertions": [
        {"tool_called": {"tool": "lookup"}},
        {"tool_call_args": {"tool": "lookup", "match": {"args_json": '{"q": 1}'}}},
    ],
}
TRACE = {"id": "t-1", "calls": [{"name": "lookup", "arguments_json": '{"q": 1}'}]}
FAILING = {"id": "t-2", "calls": [{"name": "lookup", "arguments_json": '{"q": 2}'}]}


def slow_bytes(trace: dict[str, Any]) -> bytes:
    message = json_format.ParseDict(trace, trace_pb2.Trace())
    return message.SerializeToString(deterministic=True)


@pytest.fixture(scope="module")
def compiled() -> trajgrade.CompiledSuite:
    return trajgrade.compile_suite(SUITE)


def test_lazy_result_is_a_grade_result(compiled: trajgrade.CompiledSuite) -> None:
    lazy, failing = compiled.grade_batch([TRACE, FAILING])
    eager = compiled.grade(TRACE)
    assert type(lazy) is LazyGradeResult
    assert isinstance(lazy, result_pb2.GradeResult)
    # Undecoded, the core's bytes are the deterministic encoding of the message.
    assert lazy.SerializeToString() == eager.SerializeToString(deterministic=True)
    assert lazy == eager
    assert eager == lazy
    assert lazy != failing
    assert failing == compiled.grade(FAILING)
    assert result_pb2.Verdict.Name(failing.verdict) == "VERDICT_FAIL"
    assert [r.name for r in failing.results] == [r.name for r in eager.results]
    assert failing.results[1].reason_code == compiled.grade(FAILING).results[1].reason_code
    assert list(failing.results[1].positions) == list(compiled.grade(FAILING).results[1].positions)
    assert str(lazy) == str(eager)
    assert repr(lazy) == repr(eager)
    assert json_format.MessageToDict(lazy) == json_format.MessageToDict(eager)
    assert lazy.ListFields() == eager.ListFields()
    with pytest.raises(TypeError, match="unhashable"):
        hash(lazy)


def test_lazy_result_is_made_by_the_binding(compiled: trajgrade.CompiledSuite) -> None:
    """The binding builds it around the core's buffer: untracked by the cyclic GC (it can hold
    nothing that refers back to it), constructible from bytes, and compared like a message."""
    lazy, failing = compiled.grade_batch([TRACE, FAILING])
    assert trajgrade.LazyGradeResult is _core.LazyGradeResult is LazyGradeResult
    assert not gc.is_tracked(lazy)
    rebuilt = LazyGradeResult(lazy.SerializeToString())
    assert rebuilt == lazy
    assert (rebuilt != lazy) is False
    assert rebuilt != failing
    assert lazy != 1 and not lazy == "x"  # noqa: SIM201 - __eq__ with a non-message
    assert "message" in dir(lazy) and "verdict" in dir(lazy)
    with pytest.raises(AttributeError):
        lazy.no_such_field  # noqa: B018
    del failing.results[:]
    assert failing.results == [] and failing.SerializeToString() != rebuilt.SerializeToString()


def test_lazy_result_mutates_and_copies(compiled: trajgrade.CompiledSuite) -> None:
    (lazy,) = compiled.grade_batch([TRACE])
    copied = copy.deepcopy(lazy)
    pickled = pickle.loads(pickle.dumps(lazy))
    lazy.score = 0.25
    assert lazy.score == 0.25
    assert result_pb2.GradeResult.FromString(lazy.SerializeToString()).score == 0.25
    assert copied.score == pickled.score == compiled.grade(TRACE).score
    target = result_pb2.GradeResult()
    target.CopyFrom(lazy.message)  # the concrete message, for protobuf calls that need one
    assert target == lazy


def test_every_input_form_keeps_its_position(compiled: trajgrade.CompiledSuite) -> None:
    message = json_format.ParseDict(TRACE, trace_pb2.Trace())
    inputs: list[Any] = [
        TRACE,
        b"\xff",  # bytes the core cannot decode: the core's ItemError
        {"id": "bad", "bogus": 1},  # the Python path's ItemError
        message,
        bytearray(message.SerializeToString()),
        '{"id": "t-3"}',
        {"id": "n", "calls": [{"name": "lookup", "start_time_unix_nano": "12"}]},  # declined
        FAILING,
    ]
    outcomes = compiled.grade_batch(iter(inputs))
    assert len(outcomes) == len(inputs)
    errors = [(i, o) for i, o in enumerate(outcomes) if isinstance(o, result_pb2.ItemError)]
    assert [(i, e.reason_code, e.field, e.trace_id) for i, e in errors] == [
        (1, "INVALID_TRACE", "traces[1]", ""),
        (2, "INVALID_TRACE", "traces[2].bogus", "bad"),
    ]
    graded = [o for o in outcomes if isinstance(o, result_pb2.GradeResult)]
    assert graded[0] == graded[1] == graded[2] == compiled.grade(TRACE)
    assert graded[-1] == compiled.grade(FAILING)
    assert graded[4].verdict == compiled.grade(inputs[6]).verdict


def test_errors_across_chunks_name_the_callers_index(compiled: trajgrade.CompiledSuite) -> None:
    """Batches over one core chunk (512 items) are graded chunk by chunk: indexes stay global."""
    n = 1300
    bad = {5, 511, 512, 1024, 1299}
    inputs: list[Any] = [b"\xff" if i in bad else TRACE for i in range(n)]
    inputs[700] = {"bogus": 1}
    outcomes = compiled.grade_batch(inputs)
    errors = {i: o.field for i, o in enumerate(outcomes) if isinstance(o, result_pb2.ItemError)}
    assert errors == {**{i: f"traces[{i}]" for i in bad}, 700: "traces[700].bogus"}
    assert all(o == compiled.grade(TRACE) for i, o in enumerate(outcomes) if i not in errors)


def test_bytes_between_dicts_keep_their_index(compiled: trajgrade.CompiledSuite) -> None:
    """`bytes` do not count toward a chunk's 512 encoded items: chunks of mixed input vary in
    length, and every index stays the caller's."""
    good = trace_pb2.Trace()
    json_format.ParseDict(TRACE, good)
    inputs: list[Any] = [TRACE if i % 3 else good.SerializeToString() for i in range(2000)]
    bad = {0, 511, 767, 768, 1535, 1999}
    for i in bad:
        inputs[i] = b"\xff" if i % 2 else {"bogus": i}
    outcomes = compiled.grade_batch(inputs)
    errors = {i: o.field for i, o in enumerate(outcomes) if isinstance(o, result_pb2.ItemError)}
    assert errors == {i: f"traces[{i}]" + ("" if i % 2 else ".bogus") for i in bad}
    expected = compiled.grade(TRACE)
    assert all(o == expected for i, o in enumerate(outcomes) if i not in bad)


def test_a_bug_in_an_input_is_raised(compiled: trajgrade.CompiledSuite) -> None:
    class Broken(dict[str, Any]):  # a Mapping the Python path reads and fails on
        def items(self) -> Any:
            raise RuntimeError("broken mapping")

    with pytest.raises(RuntimeError, match="broken mapping"):
        compiled.grade_batch([TRACE] * 600 + [Broken(id="x")])


TEXT = st.text(max_size=8)
CALL = st.fixed_dictionaries(
    {},
    optional={
        "name": TEXT,
        "arguments_json": TEXT,
        "argumentsJson": TEXT,
        "result": TEXT,
        "error": st.booleans(),
        "id": TEXT,
        "start_time_unix_nano": st.integers(0, 2**64 - 1),
        "endTimeUnixNano": st.integers(0, 2**64 - 1),
        "turn": st.integers(0, 2**32 - 1),
        "agent": TEXT,
        "server": TEXT,
    },
).filter(lambda c: not {"arguments_json", "argumentsJson"} <= c.keys())
MODEL_CALL = st.fixed_dictionaries(
    {},
    optional={
        "model": TEXT,
        "input_tokens": st.integers(0, 2**64 - 1),
        "outputTokens": st.integers(0, 2**64 - 1),
        "cost": st.floats(allow_nan=False, allow_infinity=False),
        "turn": st.integers(0, 2**32 - 1),
        "agent": TEXT,
        "startTimeUnixNano": st.integers(0, 2**64 - 1),
        "end_time_unix_nano": st.integers(0, 2**64 - 1),
    },
)
TURN = st.fixed_dictionaries({}, optional={"user_input": TEXT, "finalAnswer": TEXT})
TRACES = st.fixed_dictionaries(
    {},
    optional={
        "id": TEXT,
        "calls": st.lists(CALL, max_size=3),
        "final_answer": TEXT,
        "metadata": st.dictionaries(TEXT, TEXT, max_size=4),
        "model_calls": st.lists(MODEL_CALL, max_size=3),
        "turns": st.lists(TURN, max_size=2),
    },
)


@settings(max_examples=300, deadline=None)
@given(TRACES)
def test_dict_encoding_equals_the_deterministic_serialization(trace: dict[str, Any]) -> None:
    assert _core.encode_trace_dict(trace) == slow_bytes(trace)
    assert trajgrade.trace_bytes(trace) == slow_bytes(trace)


@pytest.mark.parametrize(
    "trace",
    [
        {"id": None},
        {"id": "x", "extra": 1},
        {"final_answer": "a", "finalAnswer": "b"},
        {"calls": ({"name": "a"},)},
        {"calls": [{"name": "a", "error": 1}]},
        {"calls": [{"name": "a", "start_time_unix_nano": -1}]},
        {"calls": [{"name": "a", "start_time_unix_nano": 2**64}]},
        {"calls": [{"name": "a", "start_time_unix_nano": True}]},
        {"calls": [{"name": "a", "end_time_unix_nano": "5"}]},
        {"calls": [{"name": "\ud800"}]},
        {"metadata": {"k": 1}},
        {"metadata": {1: "v"}},
        {"calls": [{"name": "a", "turn": 2**32}]},
        {"calls": [{"name": "a", "agent": None}]},
        {"model_calls": [{"cost": 1}]},
        {"model_calls": [{"cost": None}]},
        {"model_calls": [{"cost": float("nan")}]},
        {"model_calls": [{"input_tokens": 2**64}]},
        {"modelCalls": [{"turn": -1}]},
        {"model_calls": [], "modelCalls": []},
        {"turns": [{"user_input": "a", "userInput": "b"}]},
        {"turns": [{"answer": "a"}]},
    ],
)
def test_unusual_dicts_are_left_to_the_python_path(trace: dict[str, Any]) -> None:
    assert _core.encode_trace_dict(trace) is None
    try:
        expected: bytes | str = slow_bytes(trace)
    except (json_format.ParseError, ValueError, UnicodeError):
        expected = "error"
    try:
        got: bytes | str = trajgrade.trace_bytes(trace)
    except trajgrade.InvalidRequestError:
        got = "error"
    assert got == expected


@pytest.mark.parametrize("size", [0, 90, 127, 128, 200, 16_000, 16_384, 3_000_000])
def test_calls_of_every_length_prefix_size_encode_exactly(size: int) -> None:
    """The binding writes a call in place behind a 2-byte length and fixes the prefix up: calls
    shorter than 128 bytes or of 16 KiB and more need another size."""
    call = {"name": "t", "arguments_json": "x" * size, "result": "r"}
    trace = {"id": "t", "calls": [call, {"name": "u"}], "metadata": {"k" * size: "v"}}
    assert _core.encode_trace_dict(trace) == slow_bytes(trace)


def test_keys_not_interned_encode_as_literal_ones() -> None:
    """Keys are matched by pointer against interned names first, by text otherwise."""
    built = {"".join(["na", "me"]): "lookup", "".join(["argumentsJ", "son"]): "{}"}
    loaded = json.loads('{"id": "j", "finalAnswer": "a", "calls": [{"name": "lookup", "id": "c"}]}')
    for trace in ({"calls": [built]}, loaded):
        assert _core.encode_trace_dict(trace) == slow_bytes(trace)


def test_batches_after_batches_reuse_no_stale_bytes(compiled: trajgrade.CompiledSuite) -> None:
    """Chunk buffers are kept between calls: a later batch of other dicts grades as its own."""
    first = [TRACE] * 1100
    second = [dict(FAILING, id=f"f-{i}") for i in range(1100)]
    assert all(o == compiled.grade(TRACE) for o in compiled.grade_batch(first))
    outcomes = compiled.grade_batch(second)
    assert [o.trace_id for o in outcomes] == [t["id"] for t in second]
    assert all(o.verdict == compiled.grade(FAILING).verdict for o in outcomes)
