"""Helpers for the cross-language client tests: toolchains, subprocesses, a real server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc
from trajgrade.v1 import grader_service_pb2, result_pb2

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "clients"
PROTO = REPO / "proto"
VECTORS = Path(__file__).with_name("vectors.json")
# Tools installed with `go install` (protoc plugins, grpcurl, kubeconform); ignored by git.
TOOLS_BIN = CLIENTS / ".tools" / "bin"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

_missing: list[str] = []


def trajgrade_bin() -> Path:
    """The `trajgrade` console script of the interpreter running the tests."""
    return Path(sys.executable).with_name("trajgrade")


def require(tool: str, why: str) -> str:
    """The path of `tool`; a missing tool fails under CI=true and skips loudly elsewhere."""
    path = shutil.which(tool)
    if path is not None:
        return path
    message = f"MISSING TOOLCHAIN: `{tool}` is not on PATH, so {why} did not run"
    if IN_CI:
        pytest.fail(message + " (CI=true: nothing may skip)")
    _missing.append(message)
    pytest.skip(message)


def missing_toolchains() -> list[str]:
    """The skip messages so far (printed again in the terminal summary)."""
    return sorted(set(_missing))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(
    cmd: list[str],
    *,
    cwd: Path,
    timeout: float,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> str:
    """Run a build or client command; on failure show its output in the assertion."""
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        input=input,
        stdin=None if input is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} (in {cwd}) exited {proc.returncode}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


def wait_serving(target: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Poll grpc.health.v1 until the server says SERVING (or fail with its log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"trajgrade serve exited early with {proc.returncode}")
        with grpc.insecure_channel(target) as channel:
            try:
                response = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=1.0
                )
                if response.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
        time.sleep(0.1)
    raise AssertionError(f"trajgrade serve at {target} not SERVING after {timeout}s")


@dataclass(frozen=True)
class Server:
    """A running `trajgrade serve` subprocess, on loopback TCP and on a unix socket."""

    address: str
    unix_address: str
    log: Path


def start_server(
    listen: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    flags = [arg for address in listen for arg in ("--listen", address)]
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(trajgrade_bin()), "serve", *flags],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )


def stop_server(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


@dataclass(frozen=True)
class Expected:
    """What the library grades in-process for the test vector."""

    suite_id: str
    outcomes: list[result_pb2.TraceOutcome]
    # One ImportSuiteResponse per request of the vector's `imports`.
    imports: list[grader_service_pb2.ImportSuiteResponse]


def as_dict(message: Any) -> dict[str, Any]:
    """A readable, comparable form for assertion diffs."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


# --- Building and running the clients -------------------------------------------------------

BUILD_TIMEOUT_S = 840.0


def _newer_than(target: Path, *sources: Path) -> bool:
    """True when `target` exists and no file under `sources` changed after it."""
    if not target.exists():
        return False
    built = target.stat().st_mtime
    for source in sources:
        files = source.rglob("*") if source.is_dir() else [source]
        if any(f.is_file() and f.stat().st_mtime > built for f in files):
            return False
    return True


@dataclass(frozen=True)
class ClientSpec:
    """How to build and run one client."""

    name: str
    tools: tuple[str, ...]
    build: Callable[[], list[list[str]]]
    command: list[str]
    env: dict[str, str]

    @property
    def cwd(self) -> Path:
        return CLIENTS / self.name


def _node_build() -> list[list[str]]:
    # npm ci wipes node_modules; skip it while the installed tree matches the lockfile.
    node = CLIENTS / "node"
    if _newer_than(node / "node_modules" / ".package-lock.json", node / "package-lock.json"):
        return []
    return [["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]]


def _java_build() -> list[list[str]]:
    java = CLIENTS / "java"
    jar = java / "target" / "trajgrade-client-0.1.0-all.jar"
    if _newer_than(jar, java / "pom.xml", java / "src", PROTO):
        return []
    return [["mvn", "-q", "-B", "package"]]


CLIENT_SPECS = {
    "go": ClientSpec(
        name="go",
        tools=("go",),
        # go build fetches the modules in go.sum and caches compiled packages itself.
        build=lambda: [
            ["go", "build", "-o", "bin/trajgrade-conformance", "./cmd/trajgrade-conformance"]
        ],
        command=[str(CLIENTS / "go" / "bin" / "trajgrade-conformance")],
        env={"GOFLAGS": "-mod=readonly"},
    ),
    "node": ClientSpec(
        name="node",
        tools=("node", "npm"),
        build=_node_build,
        command=["node", str(CLIENTS / "node" / "bin" / "conformance.js")],
        env={},
    ),
    "java": ClientSpec(
        name="java",
        tools=("java", "mvn"),
        build=_java_build,
        command=["java", "-jar", str(CLIENTS / "java/target/trajgrade-client-0.1.0-all.jar")],
        env={},
    ),
    "rust": ClientSpec(
        name="rust",
        tools=("cargo",),
        # cargo rebuilds only what changed; the dev profile compiles far faster than release.
        build=lambda: [["cargo", "build", "--bin", "trajgrade-conformance"]],
        command=[str(CLIENTS / "rust" / "target" / "debug" / "trajgrade-conformance")],
        env={"CARGO_TARGET_DIR": str(CLIENTS / "rust" / "target"), "CARGO_TERM_COLOR": "never"},
    ),
}


def build(spec: ClientSpec) -> None:
    env = {**os.environ, **spec.env}
    for cmd in spec.build():
        run(cmd, cwd=spec.cwd, timeout=BUILD_TIMEOUT_S, env=env)


def parse_output(stdout: str) -> list[dict[str, Any]]:
    # Split on "\n" only: str.splitlines would also split on U+2028 inside JSON strings.
    return [json.loads(line) for line in stdout.split("\n") if line.strip()]
