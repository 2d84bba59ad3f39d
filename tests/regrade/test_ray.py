"""The Ray engine (local Ray, 2 CPUs) writes exactly the local engine's results."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
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


@pytest.mark.usefixtures("local_ray")
def test_ray_bad_lines_and_the_trace_dataset_api(workload: dict[str, Path], tmp_path: Path) -> None:
    """A bad line is that row's error in place (its field names the file: Ray's read_text has
    no line numbers); read_traces + grade_dataset give the same rows as the block path."""
    local = tmp_path / "local.jsonl"
    regrade([str(workload["jsonl"])], workload["suite"], str(local), chunk_size=64)
    payload = suite_bytes(workload["suite"])
    from_ray = tmp_path / "ray.jsonl"
    summary = ray_engine.regrade([str(workload["jsonl"])], payload, str(from_ray), batch_size=50)
    assert summary.traces == 601 and summary.errors == 1
    ray_rows, local_rows = list(read_rows(str(from_ray))), list(read_rows(str(local)))
    assert len(ray_rows) == len(local_rows) == 601
    for got, want in zip(ray_rows, local_rows, strict=True):
        if want["error"] is not None:
            assert want["error"]["field"] == "traces.jsonl:line 102"
            assert got["error"]["field"] == "traces.jsonl"
            got["error"]["field"] = want["error"]["field"]
        assert got == want
    dataset = ray_engine.grade_dataset(
        ray_engine.read_traces([str(workload["clean"])]), payload, batch_size=100
    )
    rows = [row for batch in ray_engine._batches(dataset) for row in batch.to_pylist()]
    clean = tmp_path / "clean.jsonl"
    regrade([str(workload["clean"])], workload["suite"], str(clean))
    assert rows == list(read_rows(str(clean)))


@pytest.mark.usefixtures("local_ray")
def test_ray_directory_output(workload: dict[str, Path], tmp_path: Path) -> None:
    """An `out` without a suffix is a directory of Parquet files from Ray's parallel writer:
    the same rows (in some order) and the same summary as the local engine."""
    local = tmp_path / "local.jsonl"
    expected = regrade([str(workload["jsonl"])], workload["suite"], str(local))
    payload = suite_bytes(workload["suite"])
    summary = ray_engine.regrade([str(workload["jsonl"])], payload, str(tmp_path / "dir"))
    rows = pq.read_table(tmp_path / "dir").to_pylist()
    assert "jsonl" not in rows[0]
    key = lambda row: row["trace_id"]  # noqa: E731
    local_rows = list(read_rows(str(local)))
    for row in local_rows:
        if row["error"] is not None:
            row["error"]["field"] = "traces.jsonl"  # Ray names the file only
    assert sorted(rows, key=key) == sorted(local_rows, key=key)
    assert summary.traces == expected.traces and summary.passed == expected.passed
    assert summary.to_json()["assertions"] == expected.to_json()["assertions"]
