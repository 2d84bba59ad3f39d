"""grpcurl, with no proto files at all, finds the API by reflection and grades a trace.

grpcurl is installed with `go install ...@v1.9.4` (the Makefile's GRPCURL_VERSION, by `make
deps-test`, or here when run alone) into clients/.tools/bin (ignored by git) the first time;
later runs reuse it. The server is the real `trajgrade serve` on loopback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from trajgrade.v1 import grader_service_pb2

from .clients_support import TOOLS_BIN, Expected, Server, as_dict, require, run

pytestmark = pytest.mark.timeout(600)

GRPCURL_PACKAGE = "github.com/fullstorydev/grpcurl/cmd/grpcurl"
GRPCURL_VERSION = os.environ.get("GRPCURL_VERSION", "v1.9.4")  # the Makefile's


@pytest.fixture(scope="module")
def grpcurl() -> Path:
    binary = TOOLS_BIN / "grpcurl"
    if not binary.exists():
        go = require("go", "the grpcurl test (grpcurl is installed with go install)")
        TOOLS_BIN.mkdir(parents=True, exist_ok=True)
        run(
            [go, "install", f"{GRPCURL_PACKAGE}@{GRPCURL_VERSION}"],
            cwd=TOOLS_BIN,
            timeout=540,
            env={**os.environ, "GOBIN": str(TOOLS_BIN), "GOFLAGS": ""},
        )
    return binary


def test_reflection_lists_the_services(grpcurl: Path, server: Server, tmp_path: Path) -> None:
    # Run from an empty directory: nothing but reflection can describe the API.
    services = run([str(grpcurl), "-plaintext", server.address, "list"], cwd=tmp_path, timeout=30)
    assert {"trajgrade.v1.GraderService", "grpc.health.v1.Health"} <= set(services.split())

    methods = run(
        [str(grpcurl), "-plaintext", server.address, "list", "trajgrade.v1.GraderService"],
        cwd=tmp_path,
        timeout=30,
    )
    assert set(methods.split()) == {
        f"trajgrade.v1.GraderService.{name}"
        for name in (
            "GradeTrace",
            "BatchGradeTraces",
            "StreamGradeTraces",
            "RegisterSuite",
            "GetSuite",
            "ImportSuite",
            "WatchResults",
        )
    }


def test_grade_trace_without_proto_files(
    grpcurl: Path,
    server: Server,
    tmp_path: Path,
    vectors: dict[str, Any],
    expected: Expected,
) -> None:
    request = {"trace": vectors["traces"][0], "suite": vectors["suite"]}
    out = run(
        [
            str(grpcurl),
            "-plaintext",
            "-d",
            "@",
            server.address,
            "trajgrade.v1.GraderService/GradeTrace",
        ],
        cwd=tmp_path,
        timeout=30,
        input=json.dumps(request),
    )
    response = json_format.Parse(out, grader_service_pb2.GradeTraceResponse())
    assert as_dict(response.result) == as_dict(expected.outcomes[0].result)
    assert response.result == expected.outcomes[0].result


def test_health_check_by_reflection(grpcurl: Path, server: Server, tmp_path: Path) -> None:
    out = run(
        [str(grpcurl), "-plaintext", server.address, "grpc.health.v1.Health/Check"],
        cwd=tmp_path,
        timeout=30,
    )
    assert json.loads(out) == {"status": "SERVING"}
