"""The live-grading deployment examples, checked without a cluster or a Collector binary:
deploy/k8s/live-agent-pod.yaml (kubeconform runs over it with the other manifests in
tests/test_sidecar.py) and deploy/otel-collector/fanout.yaml (parsed, pipeline wiring)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from trajgrade import _core
from trajgrade.live.routes import load_routes
from trajgrade.server.settings import Settings

REPO = Path(__file__).resolve().parents[1]
POD = REPO / "deploy" / "k8s" / "live-agent-pod.yaml"
COLLECTOR = REPO / "deploy" / "otel-collector" / "fanout.yaml"


def docs() -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in yaml.safe_load_all(POD.read_text(encoding="utf-8")) if d}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: str(item["value"]) for item in container.get("env", [])}


@pytest.fixture(scope="module")
def pod() -> dict[str, Any]:
    spec: dict[str, Any] = docs()["Deployment"]["spec"]["template"]["spec"]
    return spec


def sidecar(pod: dict[str, Any]) -> dict[str, Any]:
    (found,) = [c for c in pod["initContainers"] if c["name"] == "trajgrade"]
    return found


def test_sidecar_env_is_a_valid_live_configuration(pod: dict[str, Any]) -> None:
    """The sidecar's TRAJGRADE_* variables load as the server would load them."""
    settings = Settings.from_sources(environ=env_of(sidecar(pod)), overrides={})
    assert settings.live_enabled
    assert settings.otlp_grpc == "127.0.0.1:4317"
    assert settings.routes == "/etc/trajgrade/routes.yaml"
    assert settings.workers == 1


def test_agent_exports_to_the_sidecar_on_loopback(pod: dict[str, Any]) -> None:
    receiver = env_of(sidecar(pod))["TRAJGRADE_OTLP_GRPC"]
    (agent,) = pod["containers"]
    env = env_of(agent)
    endpoint = urlsplit(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    assert f"{endpoint.hostname}:{endpoint.port}" == receiver
    assert endpoint.hostname == "127.0.0.1", "OTLP stays inside the pod"
    # A native sidecar: up before the agent, stopped after it.
    assert sidecar(pod)["restartPolicy"] == "Always"


def test_routes_configmap_is_mounted_and_loads(pod: dict[str, Any], tmp_path: Path) -> None:
    """The ConfigMap's files, written out as the kubelet mounts them, load with the server's
    own routes loader (every suite file compiled)."""
    configmap = docs()["ConfigMap"]
    volume = next(v for v in pod["volumes"] if "configMap" in v)
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    mount = next(m for m in sidecar(pod)["volumeMounts"] if m["name"] == volume["name"])
    routes_path = Path(env_of(sidecar(pod))["TRAJGRADE_ROUTES"])
    assert routes_path.parent == Path(mount["mountPath"])
    for name, text in configmap["data"].items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    routes = load_routes(tmp_path / routes_path.name, _core.Grader())
    assert routes.routes


def test_probes_and_drain_fit_the_grace_period(pod: dict[str, Any]) -> None:
    container = sidecar(pod)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["exec"]["command"][:2] == ["trajgrade", "health"], probe
    settings = Settings.from_sources(environ=env_of(container), overrides={})
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pause + settings.grace_period_s
    results = Path(settings.results_jsonl or "")
    assert any(Path(m["mountPath"]) == results.parent for m in container["volumeMounts"])


def test_collector_fans_spans_out_to_the_sidecar_and_the_backend() -> None:
    config = yaml.safe_load(COLLECTOR.read_text(encoding="utf-8"))
    pipelines = config["service"]["pipelines"]
    for pipeline in pipelines.values():
        for kind in ("receivers", "processors", "exporters"):
            for name in pipeline.get(kind, []):
                assert name in config[kind], f"{name} used but not defined under {kind}"
    traces = pipelines["traces"]
    exporters = {name: config["exporters"][name] for name in traces["exporters"]}
    assert set(exporters) == {"otlp/trajgrade", "otlp/backend"}
    assert all(name.split("/")[0] == "otlp" for name in exporters)
    assert exporters["otlp/trajgrade"]["endpoint"].startswith("127.0.0.1:")
    # memory_limiter first, as the Collector recommends.
    assert traces["processors"][0] == "memory_limiter"
    # trajgrade's own results never loop back into it.
    assert "otlp/trajgrade" not in pipelines["logs"]["exporters"]
