"""Bad input on every RPC over a real channel: a specific INVALID_ARGUMENT, never INTERNAL.

Malformed request bytes, string fields that are not UTF-8, inline suites over max_suite_bytes
wherever a suite arrives, a bad suite inside a single-trace stream, and empty auth tokens.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import grpc
import pytest
from trajgrade import _core
from trajgrade.server.settings import Settings, SettingsError
from trajgrade.v1 import grader_service_pb2 as g
from trajgrade.wire import length_delimited

from .server_harness import Case, Harness, ServerFactory, bad_utf8_trace, status_of

UNARY = ("GradeTrace", "BatchGradeTraces", "RegisterSuite", "GetSuite")
MALFORMED = {
    "bad-varint": b"\xff\xff\xff",
    "truncated": b"\x0a\x05ab",  # field 1, 5 bytes announced, 2 present
    "wire-type-7": b"\x0f",
    "field-0": b"\x02\x00",
}
NOT_UTF8 = b"s1-\xff\xfe"


async def _messages(messages: Sequence[bytes]) -> AsyncIterator[bytes]:
    for message in messages:
        yield message


async def _stream(server: Harness, messages: Sequence[bytes]) -> tuple[list[bytes], BaseException]:
    """The answers of a stream that must end with an error, and that error.

    The message that ends the stream must be the last one: a grpc.aio client that writes
    after the server ended the call sees INTERNAL instead of the server's status (grpc/grpc
    issue 36066, a client-side bug)."""
    answers: list[bytes] = []
    with pytest.raises(grpc.aio.AioRpcError) as err:
        async for answer in server.raw_stream()(_messages(messages)):
            answers.append(bytes(answer))
    return answers, err.value


def _invalid(error: BaseException, reason: str | None = None, field: str | None = None) -> None:
    assert isinstance(error, grpc.aio.AioRpcError)
    code, info = status_of(error)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, error.details())
    if reason is not None:
        assert info.reason == reason, (info.reason, error.details())
    if field is not None:
        assert info.metadata["field"] == field, (info.metadata["field"], error.details())


# --- malformed bytes and non-UTF-8 strings --------------------------------------------------


@pytest.mark.parametrize("rpc", UNARY)
@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
async def test_malformed_request_bytes_are_invalid_argument_on_every_rpc(
    server: Harness, rpc: str, payload: bytes
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.raw_unary(rpc)(payload)
    _invalid(err.value)


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
async def test_malformed_stream_message_ends_the_stream_invalid_argument(
    server: Harness, valid_cases: list[Case], payload: bytes
) -> None:
    case = valid_cases[0]
    first = length_delimited(1, case.trace.SerializeToString()) + length_delimited(
        2, case.suite.SerializeToString()
    )
    answers, error = await _stream(server, [first, payload])
    assert len(answers) == 1  # the answer already due, then the status
    _invalid(error)


@pytest.mark.parametrize("rpc", ["GetSuite", "RegisterSuite"])
async def test_field_with_the_wrong_wire_type_names_the_field(server: Harness, rpc: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.raw_unary(rpc)(b"\x08\x01")  # field 1 as a varint
    _invalid(err.value, "INVALID_REQUEST", "suite_id" if rpc == "GetSuite" else "suite")


async def test_get_suite_with_a_non_utf8_id_is_invalid_argument(server: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.raw_unary("GetSuite")(length_delimited(1, NOT_UTF8))
    _invalid(err.value, "INVALID_REQUEST", "suite_id")
    assert "UTF-8" in err.value.details()


async def test_non_utf8_suite_id_is_invalid_argument_on_grading_rpcs(
    server: Harness, valid_cases: list[Case]
) -> None:
    trace = valid_cases[0].trace.SerializeToString()
    grade = length_delimited(1, trace) + length_delimited(3, NOT_UTF8)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.raw_unary("GradeTrace")(grade)
    _invalid(err.value, "INVALID_REQUEST")
    # A batch, with or without a bad trace: the same answer (the core reads the envelope).
    for traces in ([trace], [trace, bad_utf8_trace()]):
        batch = length_delimited(2, NOT_UTF8) + b"".join(length_delimited(3, t) for t in traces)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.raw_unary("BatchGradeTraces")(batch)
        _invalid(err.value, "INVALID_REQUEST")


async def test_a_malformed_batch_envelope_fails_the_call_as_grade_trace_does(
    server: Harness, valid_cases: list[Case]
) -> None:
    """A field of the wrong wire type, or an inline suite that does not decode, is the whole
    call's INVALID_REQUEST in BatchGradeTraces as in GradeTrace (never graded item by item)."""
    case = valid_cases[0]
    trace = case.trace.SerializeToString()
    suite = case.suite.SerializeToString()
    batches = [
        length_delimited(1, suite) + length_delimited(3, trace) + b"\x18\x01",  # traces varint
        length_delimited(1, b"\xff\xff\xff") + length_delimited(3, trace),  # suite undecodable
    ]
    for batch in batches:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.raw_unary("BatchGradeTraces")(batch)
        _invalid(err.value, "INVALID_REQUEST", "")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.raw_unary("GradeTrace")(
            length_delimited(1, trace) + length_delimited(2, b"\xff\xff\xff")
        )
    _invalid(err.value, "INVALID_REQUEST", "")


@pytest.mark.parametrize("form", ["trace", "traces"])
async def test_non_utf8_suite_id_ends_a_stream(
    server: Harness, valid_cases: list[Case], form: str
) -> None:
    trace = valid_cases[0].trace.SerializeToString()
    body = length_delimited(1 if form == "trace" else 4, trace)
    answers, error = await _stream(server, [body + length_delimited(3, NOT_UTF8)])
    assert answers == []  # not an ItemError for the trace: the suite reference is bad
    _invalid(error, "INVALID_REQUEST", "suite_id")


# --- max_suite_bytes wherever a suite arrives -----------------------------------------------


def _padded_suite(case: Case, size: int) -> bytes:
    """A suite's bytes grown to `size` with an unknown field (the size check comes first)."""
    suite = case.suite.SerializeToString()
    pad = size - len(suite) - 6
    return suite + length_delimited(15, b"x" * pad)


async def test_inline_suite_over_the_default_limit_is_refused_everywhere(
    server: Harness, valid_cases: list[Case]
) -> None:
    """The reported case: a 5.2 MB inline suite against the default 4 MiB max_suite_bytes."""
    case = valid_cases[0]
    suite = _padded_suite(case, 5_200_000)
    trace = case.trace.SerializeToString()
    calls = {
        "GradeTrace": length_delimited(1, trace) + length_delimited(2, suite),
        "BatchGradeTraces": length_delimited(1, suite) + length_delimited(3, trace),
        "RegisterSuite": length_delimited(1, suite),
    }
    for rpc, request in calls.items():
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await server.raw_unary(rpc)(request)
        _invalid(err.value, "SUITE_TOO_LARGE", "suite")
        assert "max_suite_bytes" in err.value.details() and "4194304" in err.value.details()
    for number in (1, 4):  # a single-trace message, a chunk
        answers, error = await _stream(
            server, [length_delimited(number, trace) + length_delimited(2, suite)]
        )
        assert answers == []
        _invalid(error, "SUITE_TOO_LARGE", "suite")


async def test_max_suite_bytes_is_the_configured_value(
    make_server: ServerFactory, valid_cases: list[Case], reference: _core.Grader
) -> None:
    case = valid_cases[0]
    size = len(case.suite.SerializeToString())
    server = await make_server(max_suite_bytes=size)
    request = g.GradeTraceRequest(trace=case.trace, suite=case.suite)
    (expected,) = reference.grade_requests([request.SerializeToString()])
    assert await server.grade(request) == expected  # at the limit: graded
    bigger = length_delimited(1, case.trace.SerializeToString()) + length_delimited(
        2, _padded_suite(case, size + 100)
    )
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await server.raw_unary("GradeTrace")(bigger)
    _invalid(err.value, "SUITE_TOO_LARGE", "suite")
    assert f"the limit is {size}" in err.value.details()


# --- a bad suite ends a single-trace stream ---------------------------------------------------


@pytest.mark.parametrize(
    "bad_suite",
    [b"\xff\xff\xff", b"\x0a\x05ab"],
    ids=["bad-varint", "truncated"],
)
async def test_undecodable_inline_suite_ends_a_single_trace_stream(
    server: Harness, valid_cases: list[Case], reference: _core.Grader, bad_suite: bytes
) -> None:
    case = valid_cases[0]
    trace = length_delimited(1, case.trace.SerializeToString())
    good = trace + length_delimited(2, case.suite.SerializeToString())
    request = g.GradeTraceRequest(trace=case.trace, suite=case.suite).SerializeToString()
    (expected,) = reference.grade_requests([request])
    answers, error = await _stream(server, [good, trace + length_delimited(2, bad_suite)])
    # The answer due, then the status (before the fix: an ItemError, and the stream went on).
    assert answers == [length_delimited(1, expected)]
    _invalid(error, "INVALID_SUITE", "suite")


async def test_invalid_suite_set_mid_stream_ends_it(
    server: Harness, valid_cases: list[Case], invalid_cases: list[Case]
) -> None:
    case = valid_cases[0]
    trace = length_delimited(1, case.trace.SerializeToString())
    good = trace + length_delimited(2, case.suite.SerializeToString())
    bad = trace + length_delimited(2, invalid_cases[0].suite.SerializeToString())
    answers, error = await _stream(server, [good, good, bad])
    assert len(answers) == 2
    _invalid(error, "INVALID_SUITE", invalid_cases[0].expect["field"])


async def test_bad_trace_in_a_single_trace_stream_is_still_an_item_error(
    server: Harness, valid_cases: list[Case]
) -> None:
    """The suite check does not turn trace problems into stream-ending ones."""
    case = valid_cases[0]
    suite = length_delimited(2, case.suite.SerializeToString())
    good = length_delimited(1, case.trace.SerializeToString())
    messages = [good + suite, length_delimited(1, bad_utf8_trace()), good]
    answers = [
        g.StreamGradeTracesResponse.FromString(bytes(a))
        async for a in server.raw_stream()(_messages(messages))
    ]
    kinds = [a.outcome.WhichOneof("outcome") for a in answers]
    assert kinds == ["result", "error", "result"]


# --- empty auth tokens ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "overrides", "message"),
    [
        ({"TRAJGRADE_AUTH_TOKEN": ""}, {}, "auth_token .* empty"),
        ({"TRAJGRADE_AUTH_TOKEN": "   "}, {}, "auth_token .* empty"),
        ({}, {"auth_token": ""}, "auth_token .* empty"),
        ({"TRAJGRADE_AUTH_TOKEN_FILE": ""}, {}, "auth_token_file .* empty"),
    ],
)
def test_explicitly_empty_token_is_a_settings_error(
    environ: dict[str, str], overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_sources(environ=environ, overrides=overrides)


def test_empty_token_file_is_a_settings_error(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("\n")
    settings = Settings.from_sources(environ={}, overrides={"auth_token_file": str(token)})
    with pytest.raises(SettingsError, match="empty"):
        settings.bearer_token()


def _serve(tmp_path: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TRAJGRADE_")}
    command = [sys.executable, "-m", "trajgrade", "serve", "--listen", "127.0.0.1:0", *flags]
    return subprocess.run(
        command, env={**clean, **env}, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("how", ["env", "flag", "file"])
def test_serve_refuses_to_start_with_an_empty_token(tmp_path: Path, how: str) -> None:
    token = tmp_path / "token"
    token.write_text("")
    env, flags = {}, ()
    if how == "env":
        env = {"TRAJGRADE_AUTH_TOKEN": ""}
    elif how == "flag":
        flags = ("--auth-token", "")
    else:
        flags = ("--auth-token-file", str(token))
    done = _serve(tmp_path, env, *flags)
    assert done.returncode == 2, done.stderr
    assert "empty" in done.stderr and "authentication" in done.stderr
    assert "serving" not in done.stderr
