"""What the client sends and how it reads the answers (sans-IO): suites by id or inline, the
suite cache, a batch's encoding and its outcomes in the caller's order."""

from __future__ import annotations

import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from trajgrade.client.status import protocol_error
from trajgrade.errors import TrajgradeError
from trajgrade.suites import SuiteInput, load_suite
from trajgrade.traces import TraceInput, trace_bytes
from trajgrade.v1 import grader_service_pb2, result_pb2
from trajgrade.wire import length_delimited as _field

Outcome: TypeAlias = "result_pb2.GradeResult | result_pb2.ItemError"
"""What one trace of a batch or stream yields: its result, or why it was not graded."""

_SUITE_ID = re.compile(r"^s1-[0-9a-f]{32}$")
TRACES_INDEX: Final = re.compile(r"^traces\[(\d+)\]")
_SUITE_CACHE_SIZE: Final = 1024

# The unary methods and how their answers decode.
METHODS: Final[dict[str, Callable[[bytes], Any]]] = {
    "GradeTrace": grader_service_pb2.GradeTraceResponse.FromString,
    "BatchGradeTraces": grader_service_pb2.BatchGradeTracesResponse.FromString,
    "RegisterSuite": grader_service_pb2.RegisterSuiteResponse.FromString,
    "GetSuite": grader_service_pb2.GetSuiteResponse.FromString,
    "ImportSuite": grader_service_pb2.ImportSuiteResponse.FromString,
}


@dataclass
class SuiteRef:
    """A suite as the client sends it: by id, or inline when a replica does not know the id."""

    suite_id: str | None
    encoded: bytes | None  # serialized Suite (deterministic), None when only the id is known

    def fields(self, inline_number: int, id_number: int, *, inline: bool) -> bytes:
        if inline or self.suite_id is None:
            assert self.encoded is not None
            return _field(inline_number, self.encoded)
        return _field(id_number, self.suite_id.encode("utf-8"))


class SuiteCache:
    """Suite content → id (and back), bounded; shared by every thread of one client."""

    def __init__(self, size: int = _SUITE_CACHE_SIZE) -> None:
        self._size = size
        self._ids: OrderedDict[bytes, str] = OrderedDict()
        self._suites: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def ref(self, suite: SuiteInput) -> SuiteRef:
        if isinstance(suite, str) and _SUITE_ID.match(suite):
            with self._lock:
                return SuiteRef(suite, self._suites.get(suite))
        encoded = load_suite(suite).SerializeToString(deterministic=True)
        key = hashlib.sha256(encoded).digest()
        with self._lock:
            suite_id = self._ids.get(key)
            if suite_id is not None:
                self._ids.move_to_end(key)
        return SuiteRef(suite_id, encoded)

    def remember(self, ref: SuiteRef, suite_id: str) -> None:
        ref.suite_id = suite_id
        if ref.encoded is None:
            return
        with self._lock:
            self._ids[hashlib.sha256(ref.encoded).digest()] = suite_id
            self._suites[suite_id] = ref.encoded
            for cache in (self._ids, self._suites):
                while len(cache) > self._size:
                    cache.popitem(last=False)

    def encoded(self, suite_id: str) -> bytes | None:
        with self._lock:
            return self._suites.get(suite_id)


def item_error(exc: TrajgradeError, trace: object, field_path: str) -> result_pb2.ItemError:
    trace_id = trace.get("id") if isinstance(trace, Mapping) else getattr(trace, "id", "")
    return result_pb2.ItemError(
        trace_id=trace_id if isinstance(trace_id, str) else "",
        reason_code=exc.reason_code or "INVALID_TRACE",
        field=exc.field or field_path,
        message=exc.message or str(exc),
    )


@dataclass
class Batch:
    """A batch split into traces to send and traces that failed to encode here."""

    slots: list[Outcome | None]
    payloads: list[bytes]
    origin: list[int]

    @classmethod
    def of(cls, traces: Iterable[TraceInput]) -> Batch:
        batch = cls([], [], [])
        for i, trace in enumerate(traces):
            try:
                batch.payloads.append(trace_bytes(trace, f"traces[{i}]"))
            except TrajgradeError as exc:
                batch.slots.append(item_error(exc, trace, f"traces[{i}]"))
                continue
            batch.origin.append(i)
            batch.slots.append(None)
        return batch

    def request(self, ref: SuiteRef, *, inline: bool) -> bytes:
        head = ref.fields(1, 2, inline=inline)
        return head + b"".join(_field(3, p) for p in self.payloads)

    def outcomes(self, response: grader_service_pb2.BatchGradeTracesResponse) -> list[Outcome]:
        if len(response.outcomes) != len(self.origin):
            raise protocol_error(f"{len(response.outcomes)} outcomes for {len(self.origin)}")
        for i, outcome in zip(self.origin, response.outcomes, strict=True):
            if outcome.WhichOneof("outcome") == "error":
                # The server numbers items within the request; report the caller's index.
                outcome.error.field = TRACES_INDEX.sub(f"traces[{i}]", outcome.error.field)
                self.slots[i] = outcome.error
            else:
                self.slots[i] = outcome.result
        return [s for s in self.slots if s is not None]


def import_request(text: str, format: str, skip_unsupported: bool, name: str) -> bytes:
    """A serialized ImportSuiteRequest."""
    return grader_service_pb2.ImportSuiteRequest(
        format=format, text=text, skip_unsupported=skip_unsupported, name=name
    ).SerializeToString()
