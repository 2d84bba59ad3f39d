"""ImportSuite against a live server: a suite file's text in any format → the registered Suite."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest
import seeds
from client.conftest import ThreadedServer, free_port
from trajgrade import InvalidRequestError, InvalidSuiteError, compile_suite, load_suite
from trajgrade.client import Client, error_from_rpc
from trajgrade.importers import exact_json
from trajgrade.v1 import grader_service_pb2, grader_service_pb2_grpc

ORBIT_DOC = seeds.json_blocks("orbit-trajectory-grading.md")
TESTS = seeds.between(
    "promptfoo-trajectory-article.md",
    "# evals/helpdesk/credit-note-ambiguous-customer.yaml",
    "Instrument a NestJS agent",
)


@pytest.fixture(scope="module")
def live() -> Iterator[ThreadedServer]:
    server = ThreadedServer(f"127.0.0.1:{free_port()}").start()
    yield server
    server.stop()


def test_import_suite_converts_registers_and_grades(live: ThreadedServer) -> None:
    with Client(live.target) as client:
        imported = client.import_suite(ORBIT_DOC[1])
        assert imported.format == "orbit"
        assert imported.suite == load_suite(exact_json.loads(ORBIT_DOC[1]))
        assert imported.suite_id == compile_suite(imported.suite).suite_id
        assert list(imported.unsupported) == []
        # Registered: usable by id, on this server, by any client.
        assert client.get_suite(imported.suite_id) == imported.suite
        calls = [("kb_query", {"q": "x"}), ("kb_query", {"q": "Refund Policy"})]
        result = client.grade(seeds.trace(calls), imported.suite_id)
        assert [(r.name, r.status) for r in result.results] == [("tool_call_args:kb_query#2", 1)]
        # The article's promptfoo test-case file (YAML text) reads as promptfoo.
        promptfoo = client.import_suite(TESTS)
        assert promptfoo.format == "promptfoo"
        assert promptfoo.suite.name == "Credit note, ambiguous customer name, partial damage"


def test_import_suite_lists_or_refuses_what_it_cannot_convert(live: ThreadedServer) -> None:
    text = json.dumps(
        {
            "description": "t",
            "assert": [
                {"type": "javascript", "value": "true"},
                {"type": "trajectory:tool-used", "value": "f"},
            ],
        }
    )
    with Client(live.target) as client:
        with pytest.raises(InvalidSuiteError) as raised:
            client.import_suite(text)
        assert raised.value.field == "assert[0]"
        assert "javascript" in str(raised.value)
        imported = client.import_suite(text, skip_unsupported=True)
        assert [a.WhichOneof("kind") for a in imported.suite.assertions] == ["tool_count"]
        assert len(imported.unsupported) == 1
        assert imported.unsupported[0].startswith("assert[0]: type 'javascript'")
        # Several tests: `name` picks one; without it the error names them.
        used = json.loads(text)["assert"][1]
        several = json.dumps([{"description": n, "assert": [used]} for n in ("a", "b")])
        with pytest.raises(InvalidSuiteError, match=r"holds 2 suites \('a', 'b'\)"):
            client.import_suite(several)
        assert client.import_suite(several, name="b").suite.name == "b"


@pytest.mark.parametrize(
    ("request_fields", "field", "words"),
    [
        ({"text": '{"tests": ["file://../../etc/*.yaml"]}'}, "tests[0]", "refers to files"),
        ({"text": "a: &x [1]\nb: *x\n"}, "text", "aliases"),
        ({"text": "[" * 100_000 + "]" * 100_000}, "text", "nested too deeply"),
        ({"text": ""}, "text", "text is required"),
        ({"text": "{}", "format": "orbits"}, "format", "unknown suite format"),
        (
            {"text": json.dumps({"tool_call_args": [{"tool": "f", "match": {"mode": "subst"}}]})},
            "tool_call_args[0].match.mode",
            "unknown mode 'subst'",
        ),
    ],
)
def test_bad_imports_are_invalid_argument_naming_the_field(
    live: ThreadedServer, request_fields: dict[str, str], field: str, words: str
) -> None:
    with grpc.insecure_channel(live.target) as channel:
        stub = grader_service_pb2_grpc.GraderServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.ImportSuite(grader_service_pb2.ImportSuiteRequest(**request_fields), timeout=30)
    error = raised.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert words in error.details()
    # The field travels in the google.rpc.Status details, as for every other RPC.
    assert error_from_rpc(error).field == field


def test_oversized_text_is_refused_before_parsing() -> None:
    server = ThreadedServer(f"127.0.0.1:{free_port()}", max_suite_bytes=1024).start()
    try:
        with Client(server.target) as client, pytest.raises(InvalidRequestError) as raised:
            client.import_suite(json.dumps({"allowed_tools": ["x" * 2000]}))
        assert "max_suite_bytes" in str(raised.value)
        assert raised.value.field == "text"
    finally:
        server.stop()
