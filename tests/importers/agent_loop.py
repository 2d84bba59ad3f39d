"""The tiny tool-using agent loop the OTLP tests drive (otel_driver.py, tests/live): two tools,
one that answers and one that fails, against the fake model server (fake_openai.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} tool",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
        },
    }
    for name in ("get_weather", "get_time")
]


def get_weather(**kwargs: Any) -> str:
    return json.dumps({"temp_c": 21.5, "city": kwargs.get("city")})


def get_time(**kwargs: Any) -> str:
    raise RuntimeError("clock unavailable")


IMPLS: dict[str, Callable[..., str]] = {"get_weather": get_weather, "get_time": get_time}


def run_agent(client: OpenAI, call_tool: Callable[[str, str, str], str]) -> str:
    messages: list[Any] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Weather and time in Paris?"},
    ]
    model = os.environ.get("TRAJGRADE_FAKE_MODEL", "gpt-4o-mini")
    for _ in range(5):
        response = client.chat.completions.create(
            model=model,
            messages=messages,
            tools=TOOLS,  # type: ignore[arg-type]
        )
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for tool_call in message.tool_calls:
            fn = tool_call.function  # type: ignore[union-attr]
            try:
                content = call_tool(fn.name, fn.arguments, tool_call.id)
            except RuntimeError as exc:
                content = f"Error: {exc}"
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": content})
    raise RuntimeError("the fake model never answered")
