"""Drive a tiny tool-using agent through real OpenAI instrumentation and export OTLP JSON.

Run as a script in a fresh interpreter (instrumentors patch the `openai` module globally and
read their settings from the environment when they start):

    python otel_driver.py MODE BASE_URL TRACES_OUT [LOGS_OUT]

With TRAJGRADE_FAKE_MODEL set, the agent asks for that model (the fake server's
``fake-reuses-ids`` answers one tool call per turn, all with the same id).

MODE is one of
- ``openinference``: openinference-instrumentation-openai for the LLM spans, OpenInference
  TOOL spans from its tracer's ``@tool`` decorator;
- ``genai``: opentelemetry-instrumentation-openai-v2 on the latest GenAI conventions with
  content on spans (``gen_ai.output.messages``), execute_tool spans from
  opentelemetry-util-genai's TelemetryHandler;
- ``genai-events``: opentelemetry-instrumentation-openai-v2 on its default (v1.30) conventions
  with content capture, which reports tool calls as ``gen_ai.choice`` log events; the tools run
  without spans;
- ``plain``: opentelemetry-instrumentation-openai-v2 on its default conventions without content
  (the LLM spans carry token usage only), and the promptfoo article's ``tracedTool`` wrapper
  written with the SDK: one ``execute_tool <name>`` span per call with ``tool.name``,
  ``tool.arguments`` (compact JSON, as ``JSON.stringify``) and ``tool.output`` (at most 2,000
  characters); a tool that throws records the exception and ends its span with status ERROR.
"""

# Imports sit inside functions on purpose: each mode must set its environment first.
# ruff: noqa: PLC0415

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

MODE, BASE_URL, TRACES_OUT = sys.argv[1], sys.argv[2], sys.argv[3]
LOGS_OUT = sys.argv[4] if len(sys.argv) > 4 else None

if MODE == "genai":
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
elif MODE == "genai-events":
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"

from agent_loop import IMPLS, get_time, get_weather, run_agent  # noqa: E402
from openai import OpenAI  # noqa: E402
from opentelemetry.exporter.otlp.json.file import FileSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402


def traced_tool(tracer: Any) -> Callable[[str, str, str], str]:
    """The promptfoo article's `tracedTool` (NestJS) written with the Python SDK."""
    from opentelemetry.trace import Status, StatusCode

    def call_tool(name: str, arguments: str, call_id: str) -> str:
        args = json.loads(arguments)
        with tracer.start_as_current_span(
            f"execute_tool {name}", record_exception=False, set_status_on_exception=False
        ) as span:
            span.set_attribute("tool.name", name)
            span.set_attribute(
                "tool.arguments", json.dumps(args, separators=(",", ":"), ensure_ascii=False)
            )
            try:
                result = IMPLS[name](**args)
            except RuntimeError as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR))
                raise
            # The tools return JSON text already: the article's JSON.stringify(result).
            span.set_attribute("tool.output", result[:2000])
            return result

    return call_tool


def main() -> None:
    resource = Resource.create({"service.name": f"trajgrade-golden-{MODE}"})
    span_exporter = FileSpanExporter(TRACES_OUT)
    client = OpenAI(base_url=BASE_URL, api_key="test-key", max_retries=0)

    if MODE == "openinference":
        from openinference.instrumentation import TracerProvider as OITracerProvider
        from openinference.instrumentation.openai import OpenAIInstrumentor

        oi_provider = OITracerProvider(resource=resource)
        oi_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        OpenAIInstrumentor().instrument(tracer_provider=oi_provider)
        tracer = oi_provider.get_tracer("trajgrade.golden")

        # Explicit parameters, as a real tool has: OpenInference records the bound arguments
        # as the TOOL span's `input.value`.
        @tracer.tool(name="get_weather")  # type: ignore[misc]
        def weather_tool(city: str, unit: str, station: int, note: str) -> str:
            return get_weather(city=city, unit=unit, station=station, note=note)

        @tracer.tool(name="get_time")  # type: ignore[misc]
        def time_tool(tz: str) -> str:
            return get_time(tz=tz)

        tools: dict[str, Callable[..., str]] = {"get_weather": weather_tool, "get_time": time_tool}

        def call_tool(name: str, arguments: str, call_id: str) -> str:
            return str(tools[name](**json.loads(arguments)))

        with tracer.start_as_current_span("agent", openinference_span_kind="agent"):
            run_agent(client, call_tool)
        oi_provider.shutdown()
        return

    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OtelOpenAI

    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))

    logger_provider = None
    if LOGS_OUT is not None:
        from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

        logger_provider = LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(
            SimpleLogRecordProcessor(FileLogExporter(LOGS_OUT))
        )
    OtelOpenAI().instrument(tracer_provider=provider, logger_provider=logger_provider)
    tracer = provider.get_tracer("trajgrade.golden")

    if MODE == "genai":
        from opentelemetry.util.genai.handler import TelemetryHandler

        handler = TelemetryHandler(tracer_provider=provider)

        def call_tool(name: str, arguments: str, call_id: str) -> str:
            with handler.tool(name) as invocation:
                invocation.tool_call_id = call_id
                invocation.tool_type = "function"
                # This util-genai release does not record tool content itself; its
                # `attributes` dict is the supported way to add the opt-in attributes.
                invocation.attributes["gen_ai.tool.call.arguments"] = arguments
                result = IMPLS[name](**json.loads(arguments))
                invocation.attributes["gen_ai.tool.call.result"] = result
                return result

    elif MODE == "plain":
        call_tool = traced_tool(tracer)
    else:

        def call_tool(name: str, arguments: str, call_id: str) -> str:
            return IMPLS[name](**json.loads(arguments))

    with tracer.start_as_current_span("invoke_agent weather_agent"):
        run_agent(client, call_tool)
    provider.shutdown()
    if logger_provider is not None:
        logger_provider.shutdown()


if __name__ == "__main__":
    main()
