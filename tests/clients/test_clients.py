"""The Go, Node, Java and Rust clients under clients/ grade exactly what the library grades.

Each client is built from a clean checkout (its toolchain fetches its own dependencies), run
against a real `trajgrade serve` on loopback with tests/clients/vectors.json, and its output
(RegisterSuite, then every trace through GradeTrace, BatchGradeTraces and StreamGradeTraces)
must equal `trajgrade.compile_suite(suite).grade(trace)` field by field and byte for byte; the
vector's ImportSuite requests (Orbit and promptfoo text) must give the suite, id, format and
left-out parts the library gives for the same text.

The four builds start together on first use and run in the background, so the slow ones (Maven,
cargo) overlap with the others. A missing toolchain skips its client loudly on a laptop and
fails under CI=true.
"""

from __future__ import annotations

import os
from collections import defaultdict
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
import trajgrade
from google.protobuf import json_format
from trajgrade.v1 import grader_service_pb2, result_pb2

from .clients_support import (
    BUILD_TIMEOUT_S,
    CLIENT_SPECS,
    VECTORS,
    Expected,
    Server,
    as_dict,
    parse_output,
    require,
    run,
)

pytestmark = pytest.mark.timeout(900)

# StreamGradeTraces sends chunks (several messages, the last partial); the other name, one
# trace per message.
GRADING_RPCS = (
    "GradeTrace",
    "BatchGradeTraces",
    "StreamGradeTraces",
    "StreamGradeTracesOnePerMessage",
)


@pytest.mark.parametrize("transport", ["tcp", "unix"])
@pytest.mark.parametrize("client", sorted(CLIENT_SPECS))
def test_client_matches_library(
    client: str,
    transport: str,
    builds: dict[str, Future[None]],
    server: Server,
    expected: Expected,
) -> None:
    spec = CLIENT_SPECS[client]
    for tool in spec.tools:
        require(tool, f"the {client} client test")
    builds[client].result(timeout=BUILD_TIMEOUT_S)  # re-raises the build's failure
    env = {**os.environ, **spec.env}
    address = server.address if transport == "tcp" else server.unix_address
    stdout = run([*spec.command, address, str(VECTORS)], cwd=spec.cwd, timeout=120, env=env)

    lines = parse_output(stdout)
    assert lines, f"{client}: no output"
    assert lines[0] == {"rpc": "RegisterSuite", "suite_id": expected.suite_id}
    by_rpc: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines[1:]:
        by_rpc[line["rpc"]].append(line)
    assert sorted(by_rpc) == sorted([*GRADING_RPCS, "ImportSuite"]), f"{client}: RPCs"

    imports = by_rpc.pop("ImportSuite")
    assert [line["index"] for line in imports] == list(range(len(expected.imports))), client
    for line in imports:
        response = json_format.ParseDict(line["response"], grader_service_pb2.ImportSuiteResponse())
        assert response == expected.imports[line["index"]], f"{client} imports[{line['index']}]"

    count = len(expected.outcomes)
    for rpc in GRADING_RPCS:
        assert [line["index"] for line in by_rpc[rpc]] == list(range(count)), f"{client} {rpc}"
        for line in by_rpc[rpc]:
            want = expected.outcomes[line["index"]]
            got = json_format.ParseDict(line["outcome"], result_pb2.TraceOutcome())
            where = f"{client} {rpc} traces[{line['index']}]"
            assert as_dict(got) == as_dict(want), where
            assert got.SerializeToString(deterministic=True) == want.SerializeToString(
                deterministic=True
            ), where


def test_vectors_exercise_the_wire_details(vectors: dict[str, Any]) -> None:
    """Guard the vector itself: it must keep the cases that break naive clients."""
    calls = [call for trace in vectors["traces"] for call in trace.get("calls", [])]
    assert any("arguments_json" not in call for call in calls), "an unrecorded-arguments call"
    assert any(call.get("arguments_json") == "" for call in calls), "an empty-arguments call"
    assert any(int(call.get("start_time_unix_nano", 0)) > 2**53 for call in calls), "a uint64"
    assert any(not trace.get("calls") for trace in vectors["traces"]), "a trace without calls"
    counts = [a["tool_count"] for a in vectors["suite"]["assertions"] if "tool_count" in a]
    assert any(c.get("min") == 0 for c in counts), "an optional field set to its zero value"
    imports = [trajgrade.load_suites(i["text"], allow_unsupported=True) for i in vectors["imports"]]
    assert [i.format for i in imports] == ["orbit", "promptfoo"], "texts in other formats"
    assert [len(i.skipped) for i in imports] == [0, 1], "a part left out and listed"
    assert len(imports[1].suites) == 2, "a file of several tests, one picked by name"


def test_subprocess_helper_reports_output(tmp_path: Path) -> None:
    """A failing build shows its output, so a CI log says why."""
    with pytest.raises(pytest.fail.Exception, match="boom"):
        run(["sh", "-c", "echo boom >&2; exit 3"], cwd=tmp_path, timeout=10)
