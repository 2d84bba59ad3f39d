"""The Ray engine (local Ray, 2 CPUs) writes exactly the local engine's results."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from trajgrade.regrade import read_rows, regrade, suite_bytes

ray = pytest.importorskip("ray")
# Ray warns about its own deprecated settings while it starts; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*")

from trajgrade.regrade import ray as ray_engine  # noqa: E402  (after the importorskip)

STARTUP_ATTEMPTS = 3


def _clean_up_failed_start() -> None:
    """Kill what a timed-out start left running and collect its Popen objects here, where their
    ResourceWarnings are expected, instead of in a later test (warnings are errors)."""
    import psutil  # a Ray dependency  # noqa: PLC0415

    ray.shutdown()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            command = " ".join(child.cmdline())
            # Only Ray's own processes (its binaries and workers live in the ray package).
            if "/ray/" in command or command.startswith("ray::"):
                child.kill()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    # Ray waits a fixed 30 s for its raylet to register; on a loaded 2-core CI machine a start
    # can miss that, so a timed-out start is cleaned up and tried again.
    for attempt in range(1, STARTUP_ATTEMPTS + 1):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception as exc:  # Ray raises a bare Exception on its startup timeout
            if "timed out during startup" not in str(exc) or attempt == STARTUP_ATTEMPTS:
                raise
            _clean_up_failed_start()
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
