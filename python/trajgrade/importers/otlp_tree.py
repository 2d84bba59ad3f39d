"""The span tree of one OTLP trace group: parents, and the agent path each span runs under."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# A span's key: (trace id, span id). Span ids are unique per trace, not across traces.
SpanKey = tuple[str, str]


class TreeSpan(Protocol):
    """What the tree reads of a span."""

    trace_id: str
    span_id: str
    parent: str
    name: str
    attrs: dict[str, Any]


def agent_name(span: TreeSpan) -> str | None:
    """The agent a span invokes, or None when it is not an agent span.

    GenAI: `gen_ai.operation.name = invoke_agent` (or a span named `invoke_agent <name>`, as
    agents traced by hand name them), the name from `gen_ai.agent.name`, else the span name.
    OpenInference: `openinference.span.kind = AGENT`, the name from `agent.name`, else the
    span name.
    """
    attrs = span.attrs
    if attrs.get("gen_ai.operation.name") == "invoke_agent" or span.name.startswith(
        "invoke_agent "
    ):
        name = attrs.get("gen_ai.agent.name")
        if not isinstance(name, str) or not name:
            name = span.name.removeprefix("invoke_agent").strip()
        return name
    if attrs.get("openinference.span.kind") == "AGENT":
        name = attrs.get("agent.name")
        return name if isinstance(name, str) and name else span.name
    return None


@dataclass(frozen=True, eq=False)
class _Agent:
    """One agent in a chain of agent spans; chains share their outer part (memory stays linear
    in the span count however deep the tree)."""

    name: str
    outer: _Agent | None


class SpanTree:
    """Parent links and agent paths of the spans of one group.

    A parent id that names no span of the group (a remote parent, or a span not exported) ends
    the walk up, as does a cycle (crafted input): every walk is bounded by the span count.
    """

    def __init__(self, spans: Sequence[TreeSpan]) -> None:
        self._by_key: dict[SpanKey, TreeSpan] = {(s.trace_id, s.span_id): s for s in spans}
        # The innermost agent each span runs under (None: no agent span above it).
        self._agents: dict[SpanKey, _Agent | None] = {}
        self._paths: dict[int, str] = {}
        for span in spans:
            self._agent_of(span)

    def parent(self, key: SpanKey) -> SpanKey | None:
        """The key of the span's parent, when that span is in the group."""
        span = self._by_key.get(key)
        if span is None or not span.parent:
            return None
        parent = (span.trace_id, span.parent)
        return parent if parent in self._by_key else None

    def ancestors(self, key: SpanKey) -> Iterator[SpanKey]:
        """The span's ancestors in the group, nearest first (a cycle stops the walk)."""
        seen = {key}
        current = self.parent(key)
        while current is not None and current not in seen:
            yield current
            seen.add(current)
            current = self.parent(current)

    def agent(self, key: SpanKey) -> str:
        """The agent path of the calls under the span: `""` for the root agent.

        The outermost agent span is the root agent (SPEC §10: `""`); each agent span below it
        adds its name, so a call of the `billing` agent invoked by `triage` (itself invoked by
        the root) is under `triage/billing`. Two nested spans of one agent name (a framework
        that writes both an invocation and a run span) count once.
        """
        innermost = self._agents.get(key)
        if innermost is None:
            return ""
        path = self._paths.get(id(innermost))
        if path is None:
            names = []
            node: _Agent | None = innermost
            while node is not None:
                names.append(node.name)
                node = node.outer
            path = "/".join(reversed(names[:-1]))
            self._paths[id(innermost)] = path
        return path

    def _agent_of(self, span: TreeSpan) -> _Agent | None:
        pending: list[TreeSpan] = []
        seen: set[SpanKey] = set()
        current: TreeSpan | None = span
        while current is not None:
            at = (current.trace_id, current.span_id)
            if at in self._agents or at in seen:
                break
            seen.add(at)
            pending.append(current)
            parent = self.parent(at)
            current = self._by_key[parent] if parent is not None else None
        agent: _Agent | None = None
        if current is not None:
            agent = self._agents.get((current.trace_id, current.span_id))
        for item in reversed(pending):
            name = agent_name(item)
            if name is not None and (agent is None or agent.name != name):
                agent = _Agent(name, agent)
            self._agents[(item.trace_id, item.span_id)] = agent
        return agent
