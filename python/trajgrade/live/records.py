"""What the live receiver holds of each span until its run completes: the ids and start that
assembly reads, the attributes routing and grouping read, and the protobuf bytes the core maps
(rust/core/src/otlp/). Nothing else of a span is decoded in Python: the core makes the
`LiveSpan`s of an export (`_core.otlp_spans`, rust/py/src/live_span.rs)."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

from trajgrade._core import LiveSpan
from trajgrade.importers import otlp

__all__ = ["LiveSpan", "SpanKey", "SpanRow", "picked", "with_keys"]

# A span's key: (trace id, span id). Span ids are unique per trace, not across traces.
SpanKey = tuple[str, str]
# A row of a request's spans, the spans of one trace in a row (`spans[first:end]`): (trace id,
# first, end, encoded size, one ends the run, one is a root, their keys, the first non-empty
# string service.name of their resources or "").
SpanRow = tuple[str, int, int, int, bool, bool, set[SpanKey], str]


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
