"""A stdio MCP server with one tool, traced by the MCP SDK's own OpenTelemetry spans.

    python mcp_weather_server.py TRACES_OUT

Its process has its own resource (`service.name = weather-mcp`) and exports its spans to its
own file, as a real MCP server does; the SDK parents them under the client's span through the
request's `_meta`, so they join the agent's trace.
"""

# Imports sit inside main on purpose: the tracer provider must be set before the SDK starts.
# ruff: noqa: PLC0415

from __future__ import annotations

import json
import sys

SERVICE_NAME = "weather-mcp"


def main() -> None:
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE_NAME}))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(sys.argv[1])))
    trace.set_tracer_provider(provider)

    from mcp.server.mcpserver import MCPServer

    server = MCPServer(SERVICE_NAME)

    @server.tool()
    def get_weather(city: str, unit: str, station: int, note: str) -> str:
        """Current weather of a city."""
        return json.dumps({"temp_c": 21.5, "city": city})

    try:
        server.run("stdio")
    finally:
        provider.shutdown()


if __name__ == "__main__":
    main()
