"""The Ray engine (local Ray, 2 CPUs) writes exactly the local engine's results, as it goes."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from trajgrade.regrade import pipeline, read_rows, regrade, suite_bytes

ray = pytest.importorskip("ray")

from ray_cluster import kill_ray_children  # noqa: E402  (bench/; after the importorskip)
from trajgrade.regrade import ray as ray_engine  # noqa: E402
from trajgrade.regrade.output import arrow_table_from_jsonl  # noqa: E402
from trajgrade.regrade.raysource import record_table  # noqa: E402
from trajgrade.regrade.source import resolve_inputs  # noqa: E402

STARTUP_ATTEMPTS = 3
GCS_PORT_WAIT_S = "120"

# Ray drops the Popen objects of processes it still runs (and stops at shutdown) when a start
# waits out its node-info deadline and goes on; collected whenever the garbage collector gets
# to them, their "still running" ResourceWarnings would fail whichever test is running then
# (CI saw it at the first test's setup, after _start_ray's own collection). Only that warning
# is ignored: the engine itself starts no subprocess.
pytestmark = [
    # Ray warns about its own deprecated settings while it starts; not ours to fix.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
    pytest.mark.filterwarnings(r"ignore:subprocess \d+ is still running:ResourceWarning"),
]


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def _timed_out(exc: Exception) -> bool:
    """Ray's start-up time-outs: "... timed out during startup" (raylet registration) and
    "Timed out waiting for file .../gcs_server_port_..." (the GCS port file)."""
    return "timed out" in str(exc).lower()


def _clean_up_failed_start() -> None:
    """Kill what a timed-out start left running and collect its Popen objects here, where their
    ResourceWarnings are expected, instead of in a later test (warnings are errors)."""
    ray.shutdown()
    kill_ray_children()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _start_ray() -> None:
    """ray.init, with the Popen objects Ray drops while it starts collected here. A start that
    waited out a node-info deadline and went on (seen in CI: "Failed to get node info ...
    Deadline Exceeded", then "Started a local Ray instance") leaves Popen objects of processes
    it still runs; collected later, in some other test, their ResourceWarnings are errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        gc.collect()


@pytest.fixture(scope="module")
def local_ray(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[None]:
    # Ray waits a fixed 30 s for its GCS to write its port file and for its raylet to register;
    # on a loaded 2-core machine a start can miss either (CI saw both). The GCS wait is raised to
    # Ray's own figure for slow stores, and a timed-out start is cleaned up and tried again.
    monkeypatch_module.setenv("RAY_gcs_server_port_wait_time_s", GCS_PORT_WAIT_S)
    for attempt in range(1, STARTUP_ATTEMPTS + 1):
        try:
            _start_ray()
            break
        except Exception as exc:  # Ray raises bare Exception / RuntimeError on its time-outs
            error, retry = f"{type(exc).__name__}: {exc}", _timed_out(exc)
        # Out of the except block the exception's frames are gone, so what the failed start
        # left (Popen objects among it) is collected by the clean-up, not in a later test.
        _clean_up_failed_start()
        if not retry or attempt == STARTUP_ATTEMPTS:
            pytest.fail(f"Ray did not start (attempt {attempt} of {STARTUP_ATTEMPTS}): {error}")
    # The engine's settings (quiet logs, Ray Data's order kept) whatever test runs first.
    ray_engine.init()
    yield
    ray.shutdown()


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize(
    ("source", "out"),
    [("jsonl", "jsonl"), ("jsonl", "parquet"), ("parquet", "jsonl"), ("parquet", "parquet")],
)
def test_ray_equals_local(workload: dict[str, Path], tmp_path: Path, source: str, out: str) -> None:
    """Same bytes (JSONL) or rows (Parquet) and the same summary, bad and blank lines included:
    an undecodable line's error names its file and line, as the local engine's does."""
    local = tmp_path / f"local.{out}"
    expected = regrade([str(workload[source])], workload["suite"], str(local), chunk_size=64)
    on_ray = tmp_path / f"ray.{out}"
    summary = regrade(
        [str(workload[source])], workload["suite"], str(on_ray), chunk_size=64, engine="ray"
    )
    assert summary.to_json() == expected.to_json()
    if out == "jsonl":
        assert on_ray.read_bytes() == local.read_bytes()
    else:
        assert pq.read_table(on_ray).equals(pq.read_table(local))
    if source == "jsonl":
        errors = [row["error"] for row in read_rows(str(on_ray)) if row["error"] is not None]
        assert [error["field"] for error in errors] == ["traces.jsonl:line 102"]


@pytest.mark.usefixtures("local_ray")
def test_ray_rows_reach_the_disk_as_they_are_graded(
    workload: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks are committed as their workers finish (grouped at most COMMIT_SECONDS apart;
    with 0, each at once): the first rows are on disk (in the run's state, resumable) long
    before the run ends, and the output appears only at the end."""
    monkeypatch.setattr(pipeline, "COMMIT_SECONDS", 0.0)
    out = tmp_path / "ray.jsonl"
    rows = out.with_name(out.name + ".parts") / "rows.jsonl"
    seen: list[tuple[int, int, bool]] = []

    def look(traces: int) -> None:
        seen.append((traces, rows.stat().st_size, out.exists()))

    inputs = [str(workload["jsonl"]), str(workload["parquet"])]
    summary = regrade(
        inputs, workload["suite"], str(out), chunk_size=50, engine="ray", on_commit=look
    )
    assert summary.traces == 1201
    assert len(seen) >= 24  # 13 + 12 chunks of at most 50 traces (the row groups cut some)
    assert seen[0][0] == 50 and seen[0][1] > 0 and not seen[0][2]
    assert [traces for traces, _, _ in seen] == sorted({traces for traces, _, _ in seen})
    assert all(not exists for _, _, exists in seen)
    local = tmp_path / "local.jsonl"
    regrade(inputs, workload["suite"], str(local), chunk_size=50)
    assert out.read_bytes() == local.read_bytes()


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize("first", ["local", "ray"])
def test_ray_resumes_a_run(
    workload: dict[str, Path], tmp_path: Path, first: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run interrupted after some commits (by either engine) is continued by the Ray engine
    from the same position: no row twice, none missing, the same bytes and summary."""
    monkeypatch.setattr(pipeline, "COMMIT_SECONDS", 0.0)  # the local engine: a commit a chunk
    inputs = [str(workload["jsonl"]), str(workload["parquet"])]
    out = tmp_path / "results.jsonl"
    commits: list[int] = []

    def crash(traces: int) -> None:
        commits.append(traces)
        if len(commits) == 17:  # past the first file's 13 chunks, into the Parquet file
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        regrade(inputs, workload["suite"], str(out), chunk_size=50, engine=first, on_commit=crash)
    assert not out.exists()
    summary = regrade(inputs, workload["suite"], str(out), chunk_size=50, engine="ray", resume=True)
    local = tmp_path / "local.jsonl"
    expected = regrade(inputs, workload["suite"], str(local), chunk_size=50)
    assert out.read_bytes() == local.read_bytes()
    assert summary.to_json() == expected.to_json()


@pytest.mark.usefixtures("local_ray")
def test_ray_refuses_importer_formats(workload: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="convert 'otlp' input with the local engine"):
        regrade(
            [str(workload["clean"])], workload["suite"], str(tmp_path / "out.jsonl"),
            format="otlp", engine="ray",
        )  # fmt: skip


@pytest.mark.usefixtures("local_ray")
@pytest.mark.parametrize("source", ["clean", "parquet", "jsonl"])
def test_ray_trace_dataset_api(workload: dict[str, Path], tmp_path: Path, source: str) -> None:
    """read_traces + grade_dataset (the composable form) give the local engine's rows, the
    records decoded by the core as there: a bad line's error row has the local message, its
    field the file's name (a line's number is not known to a Ray Data batch)."""
    payload = suite_bytes(workload["suite"])
    dataset = ray_engine.grade_dataset(
        ray_engine.read_traces([str(workload[source])]), payload, batch_size=100
    )
    rows = [row for batch in ray_engine._batches(dataset) for row in batch.to_pylist()]
    local = tmp_path / "local.jsonl"
    regrade([str(workload[source])], workload["suite"], str(local))
    expected = list(read_rows(str(local)))
    if source == "jsonl":
        (bad,) = [i for i, row in enumerate(expected) if row["error"] is not None]
        assert expected[bad]["error"]["field"] == "traces.jsonl:line 102"
        assert rows[bad]["error"]["field"] == "traces.jsonl"
        rows[bad]["error"]["field"] = expected[bad]["error"]["field"]
    assert rows == expected


@pytest.mark.usefixtures("local_ray")
def test_ray_directory_output(workload: dict[str, Path], tmp_path: Path) -> None:
    """An `out` without a suffix is a directory of Parquet files from Ray's parallel writer:
    the local engine's rows (in some order) and summary counts."""
    local = tmp_path / "local.jsonl"
    expected = regrade([str(workload["jsonl"])], workload["suite"], str(local))
    payload = suite_bytes(workload["suite"])
    summary = ray_engine.regrade([str(workload["jsonl"])], payload, str(tmp_path / "dir"))
    rows = pq.read_table(tmp_path / "dir").to_pylist()
    assert "jsonl" not in rows[0]
    key = lambda row: row["trace_id"]  # noqa: E731
    assert sorted(rows, key=key) == sorted(read_rows(str(local)), key=key)
    assert summary.traces == expected.traces and summary.passed == expected.passed
    assert summary.to_json()["assertions"] == expected.to_json()["assertions"]


@pytest.mark.usefixtures("local_ray")
def test_ray_chunks_carry_the_core_arrow_table(workload: dict[str, Path]) -> None:
    """For Parquet output each graded chunk carries its rows' Arrow table, built in the worker
    from the core's columns: the table Arrow's JSON reader makes of the chunk's rows (as JSONL
    output has them; with the table, the JSONL rows are only those the summary samples)."""
    files = resolve_inputs([str(workload["jsonl"])], "auto")
    payload = suite_bytes(workload["suite"])
    dataset = ray_engine.read_results(files, payload, chunk_size=64, arrow=True)
    records = [record for batch in ray_engine._batches(dataset) for record in batch.to_pylist()]
    assert records[-1]["traces"] == 601  # the run's traces after the last chunk
    plain = ray_engine.read_results(files, payload, chunk_size=64)
    jsonl = [record for batch in ray_engine._batches(plain) for record in batch.to_pylist()]
    assert all(record_table(r) is None for r in jsonl)
    assert len(records) == len(jsonl)
    for record, rows in zip(records, jsonl, strict=True):
        table = record_table(record)
        assert table is not None
        assert table.equals(arrow_table_from_jsonl(rows["rows"], rows["longest_row"]))
        assert len(record["rows"]) < len(rows["rows"])
