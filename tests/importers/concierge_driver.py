"""Drive a two-turn concierge agent with a sub-agent and an MCP tool, and export OTLP JSON.

    python concierge_driver.py BASE_URL TRACES_OUT MCP_TRACES_OUT

Real instrumentation throughout: opentelemetry-instrumentation-openai-v2 on the latest GenAI
conventions with content on spans (`gen_ai.input.messages`, `gen_ai.output.messages`,
`gen_ai.usage.*`), execute_tool spans from opentelemetry-util-genai's TelemetryHandler, and the
MCP Python SDK's own spans on both sides of a stdio MCP server (tests/importers/
mcp_weather_server.py, which exports to MCP_TRACES_OUT).

The agent, `concierge`, is invoked once per user turn (an `invoke_agent` span per turn, each the
root of its own trace, all with one `gen_ai.conversation.id`, as agent frameworks trace
sessions). Turn 1 asks for the weather (a tool of the MCP server) and the time (a local tool
that fails). Turn 2 asks for a booking, which the concierge delegates to the `booking` sub-agent
through an agent tool (`booking_agent`); the sub-agent calls `book_table`.
"""

# Imports sit inside functions on purpose: the environment must be set first.
# ruff: noqa: PLC0415

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

BASE_URL, TRACES_OUT, MCP_TRACES_OUT = sys.argv[1], sys.argv[2], sys.argv[3]
CONVERSATION_ID = "conv-concierge-1"

os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"

import fake_openai  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from opentelemetry import trace  # noqa: E402
from opentelemetry.exporter.otlp.json.file import FileSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402


def _tools(*names: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name} tool",
                "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
            },
        }
        for name in names
    ]


CallTool = Callable[[str, str, str], Awaitable[str]]


async def run_agent(
    name: str, client: AsyncOpenAI, messages: list[Any], tools: list[Any], call_tool: CallTool
) -> str:
    """One invocation of agent `name` on `messages` (the conversation so far, extended)."""
    tracer = trace.get_tracer("trajgrade.concierge")
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.conversation.id": CONVERSATION_ID,
    }
    with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attributes):
        for _ in range(5):
            response = await client.chat.completions.create(
                model=fake_openai.CONCIERGE_MODEL, messages=messages, tools=tools
            )
            message = response.choices[0].message
            if not message.tool_calls:
                messages.append({"role": "assistant", "content": message.content})
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for tool_call in message.tool_calls:
                fn = tool_call.function  # type: ignore[union-attr]
                try:
                    content = await call_tool(fn.name, fn.arguments, tool_call.id)
                except RuntimeError as exc:
                    content = f"Error: {exc}"
                messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": content})
    raise RuntimeError(f"{name} never answered")


async def main() -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.util.genai.handler import TelemetryHandler

    provider = TracerProvider(resource=Resource.create({"service.name": "trajgrade-concierge"}))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(TRACES_OUT)))
    # Global, so the MCP SDK's own tracer ("mcp-python-sdk") exports here too.
    trace.set_tracer_provider(provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    handler = TelemetryHandler(tracer_provider=provider)
    client = AsyncOpenAI(base_url=BASE_URL, api_key="test-key", max_retries=0)
    server = StdioServerParameters(
        command=sys.executable,
        args=[os.path.join(os.path.dirname(__file__), "mcp_weather_server.py"), MCP_TRACES_OUT],
    )
    mcp_clients: list[Client] = []

    async def mcp_call(name: str, arguments: str) -> str:
        if not mcp_clients:
            # Connected on first use, as agent toolsets do: inside the turn's trace.
            mcp_clients.append(await Client(server).__aenter__())
        result = await mcp_clients[0].call_tool(name, json.loads(arguments))
        return "".join(getattr(block, "text", "") for block in result.content)

    async def book_table(name: str, arguments: str, call_id: str) -> str:
        with handler.tool(name) as invocation:
            invocation.tool_call_id = call_id
            invocation.attributes["gen_ai.tool.call.arguments"] = arguments
            result = json.dumps({"table": 12, **json.loads(arguments)})
            invocation.attributes["gen_ai.tool.call.result"] = result
            return result

    async def concierge_tool(name: str, arguments: str, call_id: str) -> str:
        with handler.tool(name) as invocation:
            invocation.tool_call_id = call_id
            invocation.tool_type = "function"
            invocation.attributes["gen_ai.tool.call.arguments"] = arguments
            if name == "get_weather":
                result = await mcp_call(name, arguments)
            elif name == "booking_agent":
                # An agent used as a tool: the sub-agent runs with its own conversation.
                task = json.loads(arguments)["request"]
                messages = [
                    {"role": "system", "content": "You book tables."},
                    {"role": "user", "content": task},
                ]
                result = await run_agent(
                    "booking", client, messages, _tools("book_table"), book_table
                )
            else:
                raise RuntimeError("clock unavailable")
            invocation.attributes["gen_ai.tool.call.result"] = result
            return result

    conversation: list[Any] = [{"role": "system", "content": "You are a concierge."}]
    tools = _tools("get_weather", "get_time", "booking_agent")
    try:
        for user_message in fake_openai.USER_TURNS:
            conversation.append({"role": "user", "content": user_message})
            await run_agent("concierge", client, conversation, tools, concierge_tool)
    finally:
        if mcp_clients:
            await mcp_clients[0].__aexit__(None, None, None)
        provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
