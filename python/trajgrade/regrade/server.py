"""The server engine: grade chunks through StreamGradeTraces on a running trajgrade server, with
the project's client (trajgrade.client: TLS, bearer token, retries, deadlines)."""

from __future__ import annotations

import collections
from collections.abc import Iterator

from trajgrade.client import Client, Outcome
from trajgrade.errors import InternalError, ServiceError, TrajgradeError, with_details
from trajgrade.regrade.source import Chunk, ItemsChunk
from trajgrade.regrade.summary import DEFAULT_FAILURE_SAMPLE
from trajgrade.v1 import result_pb2


def _outcome_bytes(outcome: Outcome) -> bytes:
    """The client's outcome as the TraceOutcome bytes the core's row writer reads
    (_core.outcome_block)."""
    if isinstance(outcome, result_pb2.GradeResult):
        return result_pb2.TraceOutcome(result=outcome).SerializeToString()
    return result_pb2.TraceOutcome(error=outcome).SerializeToString()


def _protocol_error(what: str) -> InternalError:
    return with_details(InternalError(what), reason_code="PROTOCOL_ERROR")


def _why(error: TrajgradeError) -> str:
    """The client's error as `REASON: message` (the reason or status code, e.g.
    UNAUTHENTICATED, and the server's text)."""
    return f"{getattr(error, 'reason_code', '') or type(error).__name__}: {error}"


class ServerBackend:
    """Registers the suite once, then streams the traces (retried and reopened by the client
    as it does for any stream) and hands the outcomes back chunk by chunk, in order.

    `server` is an address (a plaintext client with the client's defaults) or a Client
    configured by the caller (TLS, token, timeouts, retry policy), which stays the caller's
    to close.
    """

    def __init__(self, server: str | Client, suite_bytes: bytes) -> None:
        # As LocalBackend.max_failing: failing rows marked for the summary's sample.
        self.max_failing = DEFAULT_FAILURE_SAMPLE
        self.arrow = False
        self._owned = isinstance(server, str)
        self._client = Client(server) if isinstance(server, str) else server
        try:
            self.suite_id: str = self._client.register_suite(suite_bytes)
        except TrajgradeError as exc:
            self.close()
            raise ServiceError(f"RegisterSuite on {self._client.target}: {_why(exc)}") from None

    def grade(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """Each chunk with its outcomes and the core's block of them filled in, as the stream
        returns them."""
        pending: collections.deque[tuple[ItemsChunk, int]] = collections.deque()

        def traces() -> Iterator[bytes]:
            for chunk in chunks:
                if not isinstance(chunk, ItemsChunk):
                    raise TypeError("the server engine grades serialized traces (raw_input off)")
                payloads = [item for item in chunk.items if isinstance(item, bytes)]
                # Queued before its traces go out, so it is there when their outcomes come back.
                pending.append((chunk, len(payloads)))
                yield from payloads

        def ready() -> Iterator[ItemsChunk]:
            while pending and len(pending[0][0].outcomes) == pending[0][1]:
                chunk = pending.popleft()[0]
                chunk.graded = chunk.block(self.suite_id, self.max_failing, self.arrow)
                yield chunk

        # The client sends its stream_chunk traces (256 by default) per message, each graded by
        # the server as one batch.
        stream = self._client.grade_stream(traces(), self.suite_id)
        try:
            for outcome in stream:
                yield from ready()
                if not pending:
                    raise _protocol_error("the server sent more outcomes than traces")
                pending[0][0].outcomes.append(_outcome_bytes(outcome))
                yield from ready()
        except TrajgradeError as exc:
            raise ServiceError(f"StreamGradeTraces on {self._client.target}: {_why(exc)}") from None
        yield from ready()
        if pending:
            raise _protocol_error("the stream ended before every trace had its outcome")

    def close(self) -> None:
        """Close the client, if this backend made it."""
        if self._owned:
            self._client.close()
