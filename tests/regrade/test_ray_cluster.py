"""`trajgrade regrade --engine ray` on an existing cluster (RAY_ADDRESS): a head and a worker
node started with `ray start`, 1 CPU each, as docs/regrade.md describes; the same bytes as the
local engine, bad lines included."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from trajgrade.regrade import regrade

pytest.importorskip("ray")

from ray_cluster import alive_nodes, local_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    """A head node and a worker node (1 CPU each) on this machine; the driver's environment
    for them (RAY_ADDRESS and the cluster's token)."""
    with local_cluster(workers=1, cpus=1) as env:
        assert alive_nodes(env) == 2
        yield env


@pytest.mark.timeout(900)  # the cluster's start is part of it: slow on a loaded machine
def test_regrade_on_a_two_node_cluster(
    cluster: dict[str, str], workload: dict[str, Path], tmp_path: Path
) -> None:
    inputs = [str(workload["jsonl"]), str(workload["parquet"])]
    local = tmp_path / "local.jsonl"
    expected = regrade(inputs, workload["suite"], str(local), chunk_size=64)
    out = tmp_path / "ray.jsonl"
    command = [sys.executable, "-m", "trajgrade", "regrade", *inputs, "--suite"]
    command += [str(workload["suite"]), "--out", str(out), "--engine", "ray"]
    command += ["--chunk-size", "64", "--no-progress"]
    done = subprocess.run(
        command,
        env={**os.environ, **cluster},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == local.read_bytes()
    assert f"{expected.passed}/{expected.traces} traces pass" in done.stdout
    # Quiet by default: none of Ray's INFO lines, progress bars or notices about them.
    for noise in ("INFO", "Running", "Progress"):
        assert noise not in done.stderr, done.stderr
