"""What the live receiver holds of each span until its run completes: the ids and start that
assembly reads, the attributes routing and grouping read, and the protobuf bytes the core maps
(rust/core/src/otlp/). Nothing else of a span is decoded in Python."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

from trajgrade.importers import otlp

# A span's key: (trace id, span id). Span ids are unique per trace, not across traces.
SpanKey = tuple[str, str]

# OTLP span flags: the parent's remote bit is known, and set (the span is this process's part
# of a trace that started elsewhere: its local root).
_HAS_IS_REMOTE = 0x100
_IS_REMOTE = 0x200


@dataclass(slots=True)  # one per span received: no per-instance dict
class LiveSpan:
    trace_id: str
    span_id: str
    parent: str  # "" for a root
    start: int  # start time, unix ns
    # The values of `keys` among the span's attributes and its resource's (a resource's dict
    # is shared by the spans of one export that carry it).
    attrs: dict[str, Any]
    resource: dict[str, Any]
    # The span's and its resource's protobuf bytes: what the core's mapping reads.
    raw: bytes
    resource_raw: bytes
    # The attribute keys `attrs` and `resource` were read for: routes reloaded with new keys
    # read them again from the bytes (with_keys).
    keys: frozenset[str]
    order: int = 0  # arrival order, set by assembly
    # What assembly reads of the span as it arrives: its encoded size, whether it carries the
    # end-of-run marker, and its OTLP flags (the parent's remote bit).
    size: int = 0
    ends_run: bool = False
    flags: int = 0

    @property
    def key(self) -> SpanKey:
        return (self.trace_id, self.span_id)

    @property
    def is_root(self) -> bool:
        """No parent, or a remote parent (a run inside a request from another service)."""
        remote = self.flags & (_HAS_IS_REMOTE | _IS_REMOTE) == _HAS_IS_REMOTE | _IS_REMOTE
        return self.parent == "" or remote


def picked(attributes: Any, keys: frozenset[str] | list[str]) -> dict[str, Any]:
    """The values of `keys` among OTLP attributes, converted as the importer converts them."""
    values = otlp.attributes(attributes)
    return {key: values[key] for key in keys if key in values}


def with_keys(spans: list[LiveSpan], keys: frozenset[str]) -> None:
    """Make every span's attributes hold `keys`: the spans taken in before a routes reload
    that added keys are read again from their bytes (rare: only runs open across the
    reload). A resource shared by several spans is read once."""
    resources: dict[int, dict[str, Any]] = {}
    for span in spans:
        if keys <= span.keys:
            continue
        wanted = keys | span.keys
        span.attrs = picked(OtlpSpan.FromString(span.raw).attributes, wanted)
        resource = resources.get(id(span.resource))
        if resource is None:
            resource = picked(Resource.FromString(span.resource_raw).attributes, wanted)
            resources[id(span.resource)] = resource
        span.resource = resource
        span.keys = wanted
