"""Bulk regrading: trace files → one result row per trace, locally, on a server or on Ray."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from trajgrade.regrade.local import LocalBackend
from trajgrade.regrade.output import output_format, read_rows
from trajgrade.regrade.pipeline import Backend, run_pipeline
from trajgrade.regrade.resume import ResumeError, RunState
from trajgrade.regrade.source import SourceError, resolve_inputs
from trajgrade.regrade.suite import SuiteFileError, load_suite
from trajgrade.regrade.summary import Summary
from trajgrade.v1 import suite_pb2

if TYPE_CHECKING:
    from trajgrade.client import Client

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "ResumeError",
    "SourceError",
    "SuiteFileError",
    "Summary",
    "read_rows",
    "regrade",
    "suite_bytes",
]

# Traces per core batch and per committed chunk: big enough to amortise the GIL round trip and
# the fsyncs, small enough that a few chunks in flight stay a few megabytes.
DEFAULT_CHUNK_SIZE = 2048


def suite_bytes(suite: str | Path | suite_pb2.Suite | bytes) -> bytes:
    """A suite given as a file path, a Suite message or serialized bytes → serialized bytes."""
    if isinstance(suite, bytes):
        return suite
    if isinstance(suite, suite_pb2.Suite):
        return suite.SerializeToString(deterministic=True)
    return load_suite(str(suite)).SerializeToString(deterministic=True)


def regrade(
    inputs: Sequence[str],
    suite: str | Path | suite_pb2.Suite | bytes,
    out: str,
    *,
    format: str = "auto",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    resume: bool = False,
    server: str | Client | None = None,
    threads: int = 0,
    engine: str = "local",
    console: Console | None = None,
    show_progress: bool = False,
    on_commit: Callable[[int], None] | None = None,
) -> Summary:
    """Grade every trace in `inputs` against `suite` into `out` (.jsonl or .parquet).

    Memory is bounded by a few chunks whatever the input size. Chunks are committed as they
    finish, so an interrupted run continues with resume=True without regrading or duplicating
    a trace; `out` appears atomically once every trace is graded. `server` grades on a
    running server: an address, or a trajgrade.client.Client for TLS, a token or other
    options (the caller closes it). engine="ray" grades on Ray
    (trajgrade.regrade.ray: RAY_ADDRESS or a local Ray; `threads` per worker, 0 = 1) with
    the same rows, commits and resume positions; it reads native JSONL and Parquet only.
    """
    if chunk_size < 1:
        raise ValueError("chunk_size must be at least 1")
    fmt = output_format(out)
    files = resolve_inputs(inputs, format)
    payload = suite_bytes(suite)
    if engine not in ("local", "ray"):
        raise ValueError(f"unknown engine {engine!r}; expected local or ray")
    if engine == "ray" and server is not None:
        raise ValueError("the Ray engine grades in its workers; it takes no server")
    backend: Backend
    if server is not None:
        from trajgrade.regrade.server import ServerBackend  # noqa: PLC0415

        backend = ServerBackend(server, payload)
    else:
        backend = LocalBackend(payload, threads=threads)
    backend.arrow = fmt == "parquet"
    identity = {
        "suite_id": backend.suite_id,
        "inputs": [f.identity() for f in files],
        "output_format": fmt,
    }
    try:
        state = RunState.open(Path(out).absolute(), fmt, identity, resume=resume)
    except BaseException:
        backend.close()
        raise
    if state.finished:  # an earlier run completed the output; open() put it in place
        backend.close()
        assert state.summary is not None
        return state.summary
    try:
        if engine == "ray":
            from trajgrade.regrade import ray as ray_engine  # noqa: PLC0415  (optional dependency)

            backend.close()
            ray_engine.init()
            summary = ray_engine.run(
                files,
                payload,
                state,
                chunk_size=chunk_size,
                threads=threads or 1,
                console=console or Console(stderr=True),
                show_progress=show_progress,
                on_commit=on_commit,
            )
        else:
            summary = run_pipeline(
                files,
                backend,
                state,
                chunk_size=chunk_size,
                console=console or Console(stderr=True),
                show_progress=show_progress,
                on_commit=on_commit,
            )
    except BaseException:
        state.close()  # the run stops here: its files are released, not left to the GC
        raise
    state.summary = summary
    state.finish()
    return summary
