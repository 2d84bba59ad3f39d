"""The bounded regrade pipeline: reader thread → grading thread → commit loop, with progress."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from trajgrade.regrade.output import arrow_table_from_columns
from trajgrade.regrade.resume import RunState
from trajgrade.regrade.source import Chunk, InputFile, Position, read_chunks
from trajgrade.regrade.summary import Summary

# Chunks waiting between stages. With the stage that holds one, memory is about
# (2 * QUEUE_DEPTH + 3) chunks whatever the input size.
QUEUE_DEPTH = 2
# Graded chunks are committed (fsynced) when no other is waiting, else at least this often:
# while commits are the slow stage their fsyncs are paid per group, not per chunk, and a crash
# loses at most this much grading.
COMMIT_SECONDS = 1.0
T = TypeVar("T")


class Backend(Protocol):
    """Something that grades chunks in order (the in-process core or a server stream), each
    leaving with `graded` set: the core's rows and counts."""

    suite_id: str
    # Failing rows the core marks per chunk for the summary's sample (0 once it is full).
    max_failing: int
    # The core writes the rows' Arrow columns too (Parquet output).
    arrow: bool

    def grade(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]: ...

    def close(self) -> None: ...


@dataclass
class _Failed:
    error: BaseException


class _Done:
    pass


_DONE = _Done()


def _pump(
    source: Iterator[T], out: queue.Queue[T | _Failed | _Done], stop: threading.Event
) -> None:
    """Move items from source into the bounded queue until done, failed or stopped."""
    try:
        for item in source:
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
        item_or_end: T | _Failed | _Done = _DONE
    except BaseException as exc:  # handed to the consumer, which re-raises it
        item_or_end = _Failed(exc)
    while not stop.is_set():
        try:
            out.put(item_or_end, timeout=0.1)
            return
        except queue.Full:
            continue


def _drain(source: queue.Queue[T | _Failed | _Done], stop: threading.Event) -> Iterator[T]:
    while True:
        try:
            item = source.get(timeout=0.1)
        except queue.Empty:
            if stop.is_set():
                return
            continue
        if isinstance(item, _Done):
            return
        if isinstance(item, _Failed):
            raise item.error
        yield item


class _TracesPerSecond(ProgressColumn):
    def render(self, task: Task) -> Text:
        traces = task.fields.get("traces", 0)
        elapsed = task.elapsed or 0.0
        rate = (traces - task.fields.get("start_traces", 0)) / elapsed if elapsed else 0.0
        return Text(f"{traces:,} traces  {rate:,.0f}/s", style="cyan")


def _progress_bar(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]regrade"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        _TracesPerSecond(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
        transient=False,
    )


def _done_bytes(files: Sequence[InputFile], position: Position) -> int:
    done = sum(f.size for f in files[: position.file])
    if position.file < len(files) and files[position.file].format == "jsonl":
        done += position.offset
    return done


class RunProgress:
    """A run's progress bar (off unless enabled): input bytes done of all (when every input's
    size says how far it is), traces, traces/s, ETA; the summary gives the traces."""

    def __init__(
        self,
        console: Console,
        enabled: bool,
        files: Sequence[InputFile],
        position: Position,
        summary: Summary,
    ) -> None:
        self._summary = summary
        self._total = sum(f.size for f in files) if all(f.format != "auto" for f in files) else None
        self._bar = _progress_bar(console, enabled)
        self._task = self._bar.add_task(
            "regrade",
            total=self._total,
            completed=_done_bytes(files, position),
            traces=summary.traces,
            start_traces=summary.traces,
        )

    def __enter__(self) -> RunProgress:
        self._bar.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._bar.stop()

    def advance(self, bytes_read: int) -> None:
        """One more chunk committed, `bytes_read` of the input."""
        self._bar.update(self._task, advance=bytes_read, traces=self._summary.traces)

    def done(self) -> None:
        """Every input read."""
        if self._total is not None:
            self._bar.update(self._task, completed=self._total)


def commit(
    state: RunState, end: Position, summary: Summary, on_commit: Callable[[int], None] | None
) -> None:
    state.commit(end, summary)
    if on_commit is not None:
        on_commit(summary.traces)


def run_pipeline(
    files: Sequence[InputFile],
    backend: Backend,
    state: RunState,
    *,
    chunk_size: int,
    console: Console,
    show_progress: bool,
    on_commit: Callable[[int], None] | None = None,
) -> Summary:
    """Read, grade and commit every chunk after the state's position; returns the summary."""
    summary = state.summary or Summary(suite_id=backend.suite_id)
    stop = threading.Event()
    read_q: queue.Queue[Chunk | _Failed | _Done] = queue.Queue(QUEUE_DEPTH)
    graded_q: queue.Queue[Chunk | _Failed | _Done] = queue.Queue(QUEUE_DEPTH)
    reader = threading.Thread(
        target=_pump,
        args=(
            read_chunks(
                files,
                chunk_size,
                state.position,
                raw_input=getattr(backend, "raw_input", False),
            ),
            read_q,
            stop,
        ),
        name="trajgrade-regrade-reader",
        daemon=True,
    )
    grader = threading.Thread(
        target=_pump,
        args=(backend.grade(_drain(read_q, stop)), graded_q, stop),
        name="trajgrade-regrade-grader",
        daemon=True,
    )
    with RunProgress(console, show_progress, files, state.position, summary) as progress:
        reader.start()
        grader.start()
        try:
            graded_chunks: Iterator[Chunk] = _drain(graded_q, stop)
            end: Position | None = None  # the last chunk appended but not committed
            committed_at = time.monotonic()
            for chunk in graded_chunks:
                graded = chunk.graded
                assert graded is not None
                summary.add_block(graded)
                table = None
                if graded.columns is not None:
                    table = arrow_table_from_columns(graded.items, graded.columns)
                state.append(graded.rows, longest_row=graded.longest_row, table=table)
                end = chunk.end
                if summary.sample_full:
                    backend.max_failing = 0
                progress.advance(chunk.bytes_read)
                if graded_q.empty() or time.monotonic() - committed_at >= COMMIT_SECONDS:
                    commit(state, end, summary, on_commit)
                    end, committed_at = None, time.monotonic()
            if end is not None:
                commit(state, end, summary, on_commit)
            progress.done()
        finally:
            stop.set()
            reader.join(timeout=5)
            grader.join(timeout=5)
            backend.close()
    return summary
