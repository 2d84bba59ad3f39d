"""ImportSuite: a suite file's text in any format → the native Suite, registered.

Kept apart from the grading handlers: it is the one RPC that parses user text in Python. The
text is bounded by `max_suite_bytes` before it is parsed; parsing and conversion run on the
control executor (never on the event loop, never on a grading thread); the converter reads no
files and refuses YAML aliases (see trajgrade.suites.import_text).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from trajgrade import _core
from trajgrade.server.status import invalid_request
from trajgrade.suites import import_text
from trajgrade.v1 import grader_service_pb2


class ImportSuiteHandler:
    """The ImportSuite behaviour: bytes in, ImportSuiteResponse bytes out."""

    def __init__(self, grader: Any, control: concurrent.futures.Executor) -> None:
        self._grader = grader
        self._control = control
        # The grader's own limit; a wrapper without `limits` (test doubles) gets the default.
        limits = getattr(grader, "limits", None) or _core.Limits()
        self._max_bytes: int = limits.max_suite_bytes

    async def __call__(self, request: bytes, context: Any) -> bytes:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._control, self._import, request)

    def _import(self, request: bytes) -> bytes:
        message = grader_service_pb2.ImportSuiteRequest.FromString(request)
        size = len(message.text.encode("utf-8"))
        if size > self._max_bytes:
            raise invalid_request(
                f"the suite text is {size} bytes; at most {self._max_bytes} (max_suite_bytes)",
                field="text",
            )
        if not message.text.strip():
            raise invalid_request("text is required (the suite file's content)", field="text")
        suite, found = import_text(
            message.text,
            format=message.format or "auto",
            allow_unsupported=message.skip_unsupported,
            name=message.name,
        )
        suite_id = self._grader.register_suite(suite.SerializeToString(deterministic=True))
        return grader_service_pb2.ImportSuiteResponse(
            suite=suite, suite_id=suite_id, unsupported=found.skipped, format=found.format
        ).SerializeToString()
