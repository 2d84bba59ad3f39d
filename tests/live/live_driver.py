"""An instrumented agent loop whose spans go to a live `trajgrade serve` through the real OTLP
exporter, and, span for span, to an OTLP JSON file (what `trajgrade regrade` reads later).

Run in a fresh interpreter (the instrumentor patches `openai` globally):

    python live_driver.py PROTOCOL ENDPOINT BASE_URL TRACES_OUT RUNS [SERVICE]

PROTOCOL is grpc, http, or none (the file only: spans for tests that send them by hand).
The agent is the importer tests' (tests/importers/agent_loop.py, as otel_driver.py's `genai`
mode): opentelemetry-instrumentation-openai-v2 on the latest GenAI conventions with content on
spans, execute_tool spans from opentelemetry-util-genai, against the fake model server. Each
run is one trace under an `invoke_agent weather_agent` root span.
"""

# ruff: noqa: PLC0415, E402

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PROTOCOL, ENDPOINT, BASE_URL, TRACES_OUT, RUNS = sys.argv[1:6]
SERVICE = sys.argv[6] if len(sys.argv) > 6 else "weather-agent"
os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "importers"))

import agent_loop as agent
from openai import OpenAI
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.util.genai.handler import TelemetryHandler


def exporter() -> object:
    """The real OTLP exporter, configured as an application would (endpoint, headers)."""
    if PROTOCOL == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=ENDPOINT, insecure=True)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter(endpoint=ENDPOINT)


def main() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    # The file gets every span as it ends; the OTLP exporter gets them in batches (several
    # requests per run), in the same order.
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(TRACES_OUT)))
    if PROTOCOL != "none":
        provider.add_span_processor(
            BatchSpanProcessor(exporter(), max_export_batch_size=3, schedule_delay_millis=50)
        )
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("trajgrade.live-test")
    handler = TelemetryHandler(tracer_provider=provider)

    def call_tool(name: str, arguments: str, call_id: str) -> str:
        with handler.tool(name) as invocation:
            invocation.tool_call_id = call_id
            invocation.tool_type = "function"
            invocation.attributes["gen_ai.tool.call.arguments"] = arguments
            result = agent.IMPLS[name](**json.loads(arguments))
            invocation.attributes["gen_ai.tool.call.result"] = result
            return result

    client = OpenAI(base_url=BASE_URL, api_key="test-key", max_retries=0)
    for _ in range(int(RUNS)):
        with tracer.start_as_current_span(
            "invoke_agent weather_agent",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "weather_agent",
            },
        ):
            agent.run_agent(client, call_tool)
    provider.shutdown()  # flushes the batch exporter


if __name__ == "__main__":
    main()
