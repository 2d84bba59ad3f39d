"""The Ray engine (local Ray, 2 CPUs) writes exactly the local engine's results."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from trajgrade.regrade import read_rows, regrade, suite_bytes

ray = pytest.importorskip("ray")
# Ray warns about its own deprecated settings while it starts; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

from trajgrade.regrade import ray as ray_engine  # noqa: E402  (after the importorskip)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.usefixtures("local_ray")
def test_ray_equals_local(workload: dict[str, Path], tmp_path: Path) -> None:
    local = tmp_path / "local.jsonl"
    regrade([str(workload["clean"])], workload["suite"], str(local), chunk_size=128)
    payload = suite_bytes(workload["suite"])

    from_jsonl = tmp_path / "ray.jsonl"
    summary = ray_engine.regrade([str(workload["clean"])], payload, str(from_jsonl), batch_size=128)
    assert summary.traces == 600
    assert from_jsonl.read_bytes() == local.read_bytes()

    from_parquet = tmp_path / "ray.parquet"
    ray_engine.regrade([str(workload["parquet"])], payload, str(from_parquet), batch_size=100)
    assert list(read_rows(str(from_parquet))) == list(read_rows(str(local)))
