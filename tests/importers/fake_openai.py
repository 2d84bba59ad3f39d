"""A fake OpenAI-compatible HTTP server on 127.0.0.1 for driving real instrumentation."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The arguments the fake model "chooses". They are JSON text with spacing, a number beyond
# float64's exact range and non-ASCII, so the tests can check they arrive verbatim.
WEATHER_ARGS = '{"city": "Paris", "unit": "celsius", "station": 9007199254740993, "note": "été"}'
TIME_ARGS = '{"tz":"Europe/Paris"}'
FINAL_ANSWER = "It is 21.5 °C in Paris and the local time is 14:05."
CALLS = (
    ("call_weather_1", "get_weather", WEATHER_ARGS),
    ("call_time_2", "get_time", TIME_ARGS),
)


# Model name that makes the fake reuse one tool-call id across turns, as gpt-4o does in real
# tau-bench runs (tests/data/tau_bench): one call per turn, every one with the id `call_0`.
REUSE_IDS_MODEL = "fake-reuses-ids"
REUSED_ID = "call_0"


# The multi-turn concierge (tests/importers/concierge_driver.py): what the model does after the
# last user message, by that message. With no tool result since it, it asks for the calls; with
# one, it answers. The booking sub-agent's task arrives as its own user message.
CONCIERGE_MODEL = "fake-concierge"
USER_TURNS = ("Weather and time in Paris?", "Book a table for two at 8pm.")
BOOKING_TASK = "table for two at 20:00"
BOOKING_ARGS = '{"party": 2, "time": "20:00"}'
BOOKED = "Booked table 12."
SECOND_ANSWER = "Your table for two is booked for 20:00."
CONCIERGE_SCRIPT: dict[str, tuple[tuple[tuple[str, str, str], ...], str]] = {
    USER_TURNS[0]: (CALLS, FINAL_ANSWER),
    USER_TURNS[1]: (
        (("call_booking_3", "booking_agent", json.dumps({"request": BOOKING_TASK})),),
        SECOND_ANSWER,
    ),
    BOOKING_TASK: ((("call_book_4", "book_table", BOOKING_ARGS),), BOOKED),
}


def concierge_usage(messages: int) -> dict[str, int]:
    """Tokens the concierge model reports: the prompt grows with the conversation."""
    prompt = 100 * messages
    return {"prompt_tokens": prompt, "completion_tokens": 20, "total_tokens": prompt + 20}


def _usage() -> dict[str, int]:
    return {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


def _concierge(messages: list[dict[str, Any]]) -> tuple[tuple[tuple[str, str, str], ...], str]:
    last_user = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    calls, answer = CONCIERGE_SCRIPT[messages[last_user]["content"]]
    answered = any(m.get("role") == "tool" for m in messages[last_user:])
    return ((), answer) if answered else (calls, answer)


def _chat_response(messages: list[dict[str, Any]], model: str) -> dict[str, Any]:
    done = sum(m.get("role") == "tool" for m in messages)
    answer = FINAL_ANSWER
    usage = _usage()
    if model == REUSE_IDS_MODEL:
        calls = CALLS[done : done + 1]
        calls = tuple((REUSED_ID, name, args) for _, name, args in calls)
    elif model == CONCIERGE_MODEL:
        calls, answer = _concierge(messages)
        usage = concierge_usage(len(messages))
    else:
        calls = () if done else CALLS
    if not calls:
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        finish = "stop"
    else:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in calls
            ],
        }
        finish = "tool_calls"
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": usage,
    }


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path.rstrip("/").endswith("/chat/completions"):
            payload = _chat_response(body.get("messages", []), body.get("model", "fake"))
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        # Keep pytest output clean; requests are visible in the exported spans anyway.
        return


@contextmanager
def serve() -> Iterator[str]:
    """Run the fake server on an ephemeral loopback port; yield its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
