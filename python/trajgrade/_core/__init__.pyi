"""Stub of `trajgrade._core`, the PyO3 binding of the Rust core (bytes in, bytes out).

Every long call releases the GIL and grades on the grader's own thread pool. Inputs and
outputs are serialized `trajgrade.v1` protobuf messages; see docs/internals/core-api.md. These
are the production entry points; `trajgrade._core.bench` holds those only benchmarks and tests
call.
"""

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeAlias, final

from trajgrade._core import bench as bench
from trajgrade.v1.result_pb2 import GradeResult
from typing_extensions import Buffer

__all__ = [
    "ArrowBatch",
    "BlockMark",
    "CancelToken",
    "CancelledError",
    "CompiledSuite",
    "DeadlineTimer",
    "Grader",
    "GraderFront",
    "InternalError",
    "InvalidRequestError",
    "InvalidSuiteError",
    "JsonlBlock",
    "LazyGradeResult",
    "LimitExceededError",
    "Limits",
    "LiveSpan",
    "OtlpExport",
    "OtlpGrpcTransport",
    "ParquetBatches",
    "ParquetTraces",
    "SuiteNotFoundError",
    "TrajgradeError",
    "WatchHub",
    "__version__",
    "arrow_traces",
    "bench",
    "build_profile",
    "encode_trace_dict",
    "jsonl_traces",
    "map_otlp",
    "map_otlp_runs",
    "otlp_spans",
    "outcome_block",
    "outcome_tally",
    "split_jsonl",
]

__version__: str
build_profile: str
"""`"release"` or `"debug"`: how the extension was built (benchmarks print it)."""

class TrajgradeError(Exception):
    """Base of every trajgrade error."""

    reason_code: str
    """Stable UPPER_SNAKE code (`INVALID_SUITE`, `INVALID_TRACE`, `TRACE_TOO_LARGE`, ...)."""
    field: str
    """Field path the error is about (`assertions[2].tool_call_args.match.pattern`)."""
    message: str
    """Human message."""

class InvalidSuiteError(TrajgradeError):
    """The suite is invalid; `field` is the first problem's path."""

    problems: list[tuple[str, str]]
    """Every problem as (field, message), in suite order."""

class InvalidRequestError(TrajgradeError):
    """Malformed bytes or an invalid trace or request."""

class LimitExceededError(TrajgradeError):
    """A configured limit was exceeded; `reason_code` names it."""

class SuiteNotFoundError(TrajgradeError):
    """No compiled suite has this id."""

class CancelledError(TrajgradeError):
    """The grading was cancelled (its `CancelToken` was cancelled); `reason_code` CANCELLED."""

class InternalError(TrajgradeError):
    """A bug in trajgrade (a panic in the core); the message is generic."""

@final
class CancelToken:
    """A request's cancellation: once `cancel()` is called, every grading given this token
    stops at its next unit of work (its traces end as `CANCELLED`). Thread-safe."""

    def __new__(cls) -> CancelToken: ...
    def cancel(self) -> None:
        """Cancel for good (idempotent)."""
    @property
    def cancelled(self) -> bool:
        """Whether `cancel()` was called."""

@final
class Limits:
    """Every SPEC §7 limit; keyword construction, defaults as documented in the core."""

    def __new__(
        cls,
        *,
        max_trace_bytes: int | None = None,
        max_calls_per_trace: int | None = None,
        max_argument_bytes: int | None = None,
        max_json_depth: int | None = None,
        max_regex_bytes: int | None = None,
        max_assertions_per_suite: int | None = None,
        max_suite_bytes: int | None = None,
        suite_cache_size: int | None = None,
        max_batch_items: int | None = None,
        max_work_units: int | None = None,
        expression_cost_limit: int | None = None,
    ) -> Limits: ...
    @property
    def max_trace_bytes(self) -> int:
        """Largest encoded Trace in bytes (default 4 MiB)."""
    @property
    def max_calls_per_trace(self) -> int:
        """Most calls in one trace (default 10 000)."""
    @property
    def max_argument_bytes(self) -> int:
        """Largest single arguments_json / args_json text in bytes (default 1 MiB)."""
    @property
    def max_json_depth(self) -> int:
        """Deepest JSON nesting accepted (default 128)."""
    @property
    def max_regex_bytes(self) -> int:
        """Largest compiled regex program in bytes (default 1 MiB)."""
    @property
    def max_assertions_per_suite(self) -> int:
        """Most assertions in one suite (default 1 000)."""
    @property
    def max_suite_bytes(self) -> int:
        """Largest encoded Suite in bytes (default 4 MiB)."""
    @property
    def suite_cache_size(self) -> int:
        """Compiled suites kept in memory, LRU (default 1 024)."""
    @property
    def max_batch_items(self) -> int:
        """Most traces in one batch request (default 10 000)."""
    @property
    def max_work_units(self) -> int:
        """Work units grading one trace may spend (default 50 000 000); more is that trace's
        `WORK_LIMIT_EXCEEDED` error."""
    @property
    def expression_cost_limit(self) -> int:
        """Cost units one CEL evaluation may spend (default 1 000 000); more is
        `EXPRESSION_ERROR` "cost limit of N exceeded"."""

@final
class LazyGradeResult:
    """A `GradeResult` decoded on first use (an attribute, a method, `==`, `str`).

    It answers `isinstance(x, result_pb2.GradeResult)` with True (its `__class__` is
    `GradeResult`; `type(x)` is `LazyGradeResult`) and has every field and method of the
    message; setting a field changes the decoded message. Until it is decoded,
    `SerializeToString()` returns the core's bytes as they are (they equal the deterministic
    encoding). Protobuf calls that need the concrete class as an argument (`CopyFrom(x)`,
    `GradeTraceResponse(result=x)`) take `x.message`, the decoded `GradeResult`.
    """

    def __new__(cls, raw: bytes) -> LazyGradeResult:
        """From a serialized `GradeResult` (as pickling stores it)."""
    @property
    def message(self) -> GradeResult:
        """The decoded `GradeResult` (decoded once, then kept)."""
    def __getattr__(self, name: str, /) -> Any:
        """A field or method of the decoded message."""
    def __setattr__(self, name: str, value: Any, /) -> None: ...
    def __delattr__(self, name: str, /) -> None: ...
    def __dir__(self) -> list[str]: ...
    def SerializeToString(self, **kwargs: Any) -> bytes:  # noqa: N802 - the protobuf name
        """The message's bytes; the core's own bytes while nothing decoded them."""
    def __eq__(self, value: object, /) -> bool: ...
    def __ne__(self, value: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment] # mutable, like every protobuf message
    def __reduce_ex__(self, protocol: object) -> tuple[type[LazyGradeResult], tuple[bytes]]:
        """Pickles as itself (copyreg's default would use the spoofed `__class__`)."""

@final
class CompiledSuite:
    """A validated, compiled suite bound to the grader that compiled it (immutable)."""

    @property
    def suite_id(self) -> str:
        """Content hash of the canonical suite: `s1-` + 32 hex digits."""
    def suite_bytes(self) -> bytes:
        """The suite as serialized `Suite` bytes."""
    def grade(self, trace: bytes) -> bytes:
        """Serialized `Trace` → serialized `GradeResult`; a bad trace raises."""
    def grade_batch(self, traces: list[bytes]) -> list[bytes]:
        """Serialized `Trace`s → one serialized `TraceOutcome` each (GIL released, parallel)."""
    def grade_here(self, traces: list[bytes], max_work_units: int) -> list[bytes | None]:
        """As grade_batch, graded on the calling thread, not the pool (a few traces), each
        within `max_work_units`; a trace that needs more is None (grade it again with
        grade_batch, which has the full limit)."""
    def grade_inputs(
        self, items: list[Any], prepare: Callable[[int, Any], object]
    ) -> tuple[list[Any], list[int]]:
        """The public batch path: bytes items graded as they are, plain trace dicts encoded
        here, any other item replaced by prepare(i, item) (bytes to grade, or anything else
        as its outcome) → (outcomes, errors): outcomes[i] is item i's LazyGradeResult; for i
        in errors, the core's serialized ItemError (field numbered within its chunk) or what
        prepare returned."""

@final
class Grader:
    """Limits, a dedicated thread pool and the compiled-suite cache; share one per process."""

    def __new__(
        cls, limits: Limits | None = None, threads: int = 0, max_registered_suites: int = 10000
    ) -> Grader:
        """`threads` 0 means one per core; registered suites are kept apart from inline ones."""
    @property
    def limits(self) -> Limits:
        """The limits this grader applies."""
    def compile_suite(self, suite: bytes) -> CompiledSuite:
        """Serialized `Suite` → compiled suite (cached by content); raises InvalidSuiteError."""
    def register_suite(self, suite: bytes) -> str:
        """Compiles and keeps a serialized `Suite`; returns its id."""
    def get_suite(self, suite_id: str) -> CompiledSuite | None:
        """A compiled suite by id, if it is still cached."""
    def grade_requests(
        self, requests: list[bytes], cancels: list[CancelToken | None] | None = None
    ) -> list[bytes | TrajgradeError]:
        """Serialized `GradeTraceRequest`s → serialized `GradeTraceResponse` or the item's error;
        item i stops once `cancels[i]` is cancelled (`CancelledError`)."""
    def grade_requests_here(
        self,
        requests: list[bytes],
        cancels: list[CancelToken | None] | None = None,
        max_work_units: int = ...,
    ) -> list[bytes | TrajgradeError | None]:
        """As grade_requests, graded on the calling thread, not the pool (small batches), each
        item within `max_work_units`; an item that needs more is None (grade it again with
        grade_requests, which has the full limit)."""
    def grade_batch_request(self, request: bytes, cancel: CancelToken | None = None) -> bytes:
        """Serialized `BatchGradeTracesRequest` → serialized `BatchGradeTracesResponse`; once
        `cancel` is cancelled, traces not yet graded are `CANCELLED` item errors."""
    def grade_stream_chunk(
        self, suite: CompiledSuite, message: bytes, cancel: CancelToken | None = None
    ) -> bytes:
        """A serialized StreamGradeTracesRequest chunk (traces) against suite → serialized
        StreamGradeTracesResponse, one outcomes entry per trace (split and framed in the core);
        once `cancel` is cancelled, traces not yet graded are `CANCELLED` item errors."""
    def grade_jsonl_block(
        self,
        suite: CompiledSuite,
        data: Buffer,
        start: int,
        end: int,
        max_failing: int,
        source: str,
        first: int = 1,
        unit: str = "line",
        arrow: bool = False,
    ) -> JsonlBlock:
        """data[start:end], whole native JSONL lines → their regrade rows in one buffer plus
        summary counts (and with arrow, the rows' Arrow buffers); error rows name
        `source:unit N` (line: first + the line's index, blank lines counted; row, trace:
        first + the item's index) and the core's message."""
    def grade_arrow_block(
        self,
        suite: CompiledSuite,
        rows: int,
        columns: _ArrowColumns,
        max_failing: int,
        source: str,
        first: int = 1,
        arrow: bool = False,
    ) -> JsonlBlock:
        """Arrow buffers of native trace rows → their regrade rows in one JsonlBlock, as
        grade_jsonl_block gives them for the same traces (error rows name `source:row N`);
        bad buffers: ValueError."""

@final
class BlockMark:
    """A row of a graded block to look at: an error row, or one of the first failing rows."""

    @property
    def item(self) -> int: ...
    @property
    def row_start(self) -> int: ...
    @property
    def row_end(self) -> int: ...
    @property
    def error(self) -> bool: ...

@final
class JsonlBlock:
    """Grader.grade_jsonl_block's result: rows, counts of graded and error rows, marked rows."""

    @property
    def rows(self) -> bytes:
        """Every row; with arrow=True only the marked rows (the columns hold them all)."""
    @property
    def items(self) -> int: ...
    @property
    def passed(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def soft_failures(self) -> int: ...
    @property
    def mean_score_units(self) -> int: ...
    @property
    def assertions(self) -> list[tuple[str, str, int, int, int]]: ...
    @property
    def errors(self) -> int: ...
    @property
    def error_codes(self) -> list[tuple[str, int]]: ...
    @property
    def marks(self) -> list[BlockMark]: ...
    @property
    def longest_row(self) -> int: ...
    @property
    def columns(self) -> dict[str, bytes | None] | None:
        """The rows' Arrow buffers by name (arrow=True), for output.arrow_table_from_columns."""

def outcome_block(
    suite_id: str,
    items: list[bytes | tuple[str, str, str]],
    max_failing: int,
    arrow: bool = False,
) -> JsonlBlock:
    """TraceOutcome bytes (graded elsewhere) and unreadable records `(trace_id, field,
    message)`, in input order → their regrade rows, counts and marks, as a block entry point
    gives them."""

def outcome_tally(
    outcomes: list[bytes],
) -> tuple[list[int], list[float], list[tuple[str, int, int]]]:
    """(verdicts, scores, assertions) of TraceOutcome bytes: per outcome its Verdict number (0:
    an error) and score, and per assertion name in order of first appearance (name, passed,
    failed). The live receiver's metrics count these."""

def split_jsonl(data: Buffer, start: int, max_items: int, at_eof: bool) -> tuple[int, int, int]:
    """(consumed, items, lines): data[start:]'s first whole lines, at most max_items traces
    (data: bytes or a C-contiguous buffer of unsigned bytes, e.g. a read-only mmap; no copy)."""

# Arrow columns of native trace rows: pyarrow's buffers by column name (`arrowcols.columns`),
# or a batch read by ParquetTraces (a stub-only name).
_ArrowColumns: TypeAlias = (
    Mapping[str, tuple[int, int, Buffer | None, Buffer | None, Buffer | None, bool]] | ArrowBatch
)

@final
class ParquetTraces:
    """A native-schema Parquet trace file read by the core (each batch decoded with the GIL
    released). ValueError, with the reason, for a file it does not read exactly as pyarrow
    does (another schema or type, an unbuilt codec): read that file with pyarrow."""

    def __new__(cls, path: str | os.PathLike[str]) -> ParquetTraces: ...
    @property
    def row_groups(self) -> list[int]:
        """Rows of each row group, in file order."""
    def batches(self, group: int, skip: int = 0, batch_size: int = 2048) -> ParquetBatches:
        """Row group `group`'s rows from `skip` on, in batches of up to batch_size rows."""

@final
class ParquetBatches:
    """One row group's batches; a page the reader cannot decode raises ValueError (and ends
    them), a second thread reading them meanwhile RuntimeError."""

    def __iter__(self) -> ParquetBatches: ...
    def __next__(self) -> ArrowBatch: ...

@final
class ArrowBatch:
    """A record batch read by ParquetTraces, for grade_arrow_block and arrow_traces."""

    @property
    def num_rows(self) -> int: ...
    @property
    def unsupported(self) -> str | None:
        """Why the core's Arrow path does not take this batch (a null struct in a list, a null
        map entry): read its rows with pyarrow then; None when it does."""

def jsonl_traces(
    data: Buffer, start: int, end: int, source: str, first: int, unit: str
) -> list[bytes | tuple[str, str, str]]:
    """The whole native JSONL lines data[start:end] as `Trace` bytes for a server, in line order
    (blank lines skipped); a line that is not a trace as `(trace_id, field, message)`, worded
    as the local engine's error row (`source:line N`; the core decoder's message)."""

def arrow_traces(
    rows: int,
    columns: _ArrowColumns,
) -> list[bytes]:
    """Every row of a record batch in the native Parquet schema (`arrowcols.columns`'
    buffers, as `Grader.grade_arrow_block` takes them) as `Trace` bytes for a server: the
    traces grade_arrow_block grades. Buffers that do not fit their lengths raise ValueError."""

def encode_trace_dict(trace: object) -> bytes | None:
    """A plain trace dict (protobuf-JSON names) → `Trace` bytes equal to the deterministic
    serialization; None for any other shape (the Python path decides)."""

def map_otlp(
    traces: Sequence[bytes],
    logs: Sequence[bytes],
    group_by: str | None = None,
    dedupe_window_s: float = 300.0,
) -> tuple[list[bytes], tuple[int, int, int, int, int, list[tuple[str, int, list[str]]]]]:
    """OTLP `ExportTraceServiceRequest`/`ExportLogsServiceRequest` bytes (arrival order) →
    (`Trace` bytes per trace id or `group_by` value, report: traces, calls, model calls, merged
    duplicates, id collisions, [(reason, count, first examples)]). A malformed request raises
    ValueError naming it."""

def map_otlp_runs(
    runs: Sequence[tuple[Sequence[bytes], Sequence[bytes], Sequence[bytes]]],
    group_by: str | None = None,
    dedupe_window_s: float = 300.0,
) -> list[bytes | str | None]:
    """Live runs, each (its spans' resources' bytes, its spans' bytes, parallel, and its log
    events' bytes, arrival order), mapped in one call → per run its first `Trace`'s bytes
    (as `map_otlp` of one request of its spans and one of its events), None when nothing maps,
    or the mapping's error message (that run only)."""

# A row of spans of one trace in an export: (trace id, first, end, encoded size, one ends the
# run, one is a root, their keys, the first non-empty string service.name of their resources
# or "").
_SpanRow: TypeAlias = tuple[str, int, int, int, bool, bool, set[tuple[str, str]], str]

def otlp_spans(
    request: bytes,
    keys: Sequence[str],
    taken: frozenset[str],
    convert: Callable[[bytes, bool], dict[str, Any]],
) -> tuple[list[LiveSpan], list[_SpanRow]]:
    """One OTLP `ExportTraceServiceRequest` as the live receiver's assembly holds it: its
    spans (request order) and their rows, one per run of consecutive spans of one trace
    (`spans[first:end]`). Each span holds the values of `keys` among its attributes and its
    resource's (the string values read by the core; when a key holds another type,
    `convert(raw, is_resource)` reads them: the importer's conversion), `taken` as its keys,
    one dict per resource shared by its spans, one empty dict shared by the spans holding
    none. A malformed request raises ValueError, before any span is made."""

@final
class LiveSpan:
    """What the live receiver holds of one span until its run completes (live/records.py):
    made by `otlp_spans`, or by hand (tests). Not tracked by the cyclic GC."""

    def __new__(
        cls,
        trace_id: str,
        span_id: str,
        parent: str,
        start: int,
        attrs: dict[str, Any],
        resource: dict[str, Any],
        raw: bytes,
        resource_raw: bytes,
        keys: frozenset[str],
        order: int = 0,
        size: int = 0,
        ends_run: bool = False,
        flags: int = 0,
    ) -> LiveSpan: ...
    @property
    def trace_id(self) -> str: ...
    @property
    def span_id(self) -> str: ...
    @property
    def parent(self) -> str:
        """The parent span id (hex), "" for a root."""
    @property
    def start(self) -> int:
        """Start time, unix ns."""
    attrs: dict[str, Any]
    """The values of `keys` among the span's attributes."""
    resource: dict[str, Any]
    """The values of `keys` among its resource's attributes (shared by its spans)."""
    @property
    def raw(self) -> bytes:
        """The span's protobuf bytes (what the mapping reads)."""
    @property
    def resource_raw(self) -> bytes:
        """Its resource's protobuf bytes."""
    keys: frozenset[str]
    """The attribute keys `attrs` and `resource` were read for."""
    order: int
    """Arrival order, set by assembly."""
    @property
    def size(self) -> int:
        """The encoded size (the bytes cap counts it)."""
    @property
    def ends_run(self) -> bool:
        """It carries the end-of-run marker."""
    @property
    def flags(self) -> int:
        """Its OTLP flags."""
    @property
    def key(self) -> tuple[str, str]:
        """(trace id, span id)."""
    @property
    def is_root(self) -> bool:
        """No parent, or a remote parent (a run inside a request from another service)."""

@final
class OtlpExport:
    """An OTLP/gRPC export taken by the event loop (OtlpGrpcTransport.take): answered once."""

    @property
    def logs(self) -> bool:
        """A LogsService export (else TraceService)."""
    def body(self) -> bytes:
        """The request's protobuf bytes (taken once)."""
    def spans(
        self,
        keys: Sequence[str],
        taken: frozenset[str],
        convert: Callable[[bytes, bool], dict[str, Any]],
    ) -> tuple[list[LiveSpan], list[_SpanRow]]:
        """A traces export's spans and rows, as `otlp_spans(body, keys, taken, convert)` makes
        them: from the heads the transport decoded as the export arrived when they were read
        for these keys (`OtlpGrpcTransport.set_keys`), else decoded now. A malformed request
        raises ValueError."""
    def reply(self, response: bytes) -> None:
        """Answer with an encoded Export*ServiceResponse."""
    def fail(self, code: int, message: str) -> None:
        """Answer with a gRPC status code number and message."""

@final
class DeadlineTimer:
    """A monotonic-clock timerfd the event loop watches (`loop.add_reader`), armed for an
    absolute `time.monotonic()` deadline to the microsecond (Linux)."""

    def __init__(self) -> None: ...
    def fileno(self) -> int:
        """The descriptor: readable once the deadline has passed, until `clear`."""
    def arm(self, deadline: float) -> None:
        """Fire at `deadline` (a past one at once); replaces the deadline armed before."""
    def disarm(self) -> None:
        """Not fire until armed again."""
    def clear(self) -> bool:
        """Take the firing: True if the deadline had passed, False if it had not fired."""

@final
class OtlpGrpcTransport:
    """The live OTLP/gRPC receiver's transport (tonic, threads of its own): serving from
    construction until stop()."""

    def __new__(
        cls,
        address: str,
        max_message_bytes: int,
        token: str | None = None,
        tls: tuple[bytes, bytes, bytes | None] | None = None,
    ) -> OtlpGrpcTransport: ...
    @property
    def port(self) -> int:
        """The bound TCP port."""
    def fileno(self) -> int:
        """Readable when exports wait (loop.add_reader)."""
    def take(self) -> list[OtlpExport]:
        """Every export waiting, in arrival order."""
    def set_keys(self, keys: Sequence[str]) -> None:
        """The attribute keys the loop's intake reads: traces exports are decoded with them
        as they arrive, on the transport's thread."""
    def set_draining(self) -> None:
        """Answer new exports UNAVAILABLE without handing them over."""
    def take_too_large(self) -> tuple[int, int]:
        """The exports refused as over the size limit since the last call (RESOURCE_EXHAUSTED,
        never handed over): (traces, logs)."""
    def stop(self, grace_s: float) -> None:
        """Stop listening; calls in flight get grace_s to finish (blocks: off the loop)."""

@final
class WatchHub:
    """The core's WatchResults streams (rust/py/src/watch_hub.rs), served by GraderFront:
    each watcher a bounded queue that publishing never waits on."""

    def __new__(
        cls,
        queue_size: int,
        too_slow: tuple[int, str, bytes],
        closed: tuple[int, str, bytes],
        invalid: tuple[int, str, bytes],
        unauthenticated: tuple[int, str, bytes],
    ) -> WatchHub: ...
    def publish(
        self,
        suite_id: str,
        verdict: int,
        service: str,
        payload: bytes,
        run_key: str | None = None,
    ) -> None:
        """One encoded WatchResultsResponse to every watcher whose filter takes it; a full
        queue cuts its watcher (WATCHER_TOO_SLOW). With run_key, each stream stamps when it
        takes it (take_dequeued)."""
    def take_dequeued(self) -> list[tuple[str, int]]:
        """The debug timing's stamps since the last call: (run key, wall clock ns)."""
    def close(self) -> None:
        """Drain: every stream ends after what it was sent; new callers are refused."""
    def watchers(self) -> int:
        """The watchers following now."""
    @property
    def dropped(self) -> int:
        """Watchers cut as too slow so far."""
    def take_ended(self) -> list[tuple[int, float]]:
        """The calls ended since the last call: (status code, seconds) each."""

@final
class GraderFront:
    """The server's TCP address on the core's transport (rust/py/src/grader_front.rs):
    WatchResults from the hub, every other call passed to grpc.aio on a unix socket."""

    def __new__(
        cls,
        address: str,
        upstream: str,
        hub: WatchHub,
        max_message_bytes: int,
        token: str | None = None,
        tls: tuple[bytes, bytes, bytes | None] | None = None,
    ) -> GraderFront: ...
    @property
    def port(self) -> int:
        """The bound TCP port."""
    def stop(self, grace_s: float) -> None:
        """Stop listening; calls in flight get grace_s to finish (blocks: off the loop)."""
