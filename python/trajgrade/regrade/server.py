"""The server engine: grade chunks through StreamGradeTraces on a running trajgrade server."""

from __future__ import annotations

import collections
from collections.abc import Iterator

import grpc

from trajgrade.regrade.source import Chunk
from trajgrade.v1 import grader_service_pb2, grader_service_pb2_grpc, suite_pb2
from trajgrade.wire import length_delimited as _field

STREAM_METHOD = "/trajgrade.v1.GraderService/StreamGradeTraces"
_MAX_MESSAGE = 64 * 1024 * 1024
# Stream chunks: each message carries up to this many traces (`traces`, field 4), graded by the
# server as one batch; its answer lists their `outcomes` (field 2).
_MESSAGE_TRACES = 1024
_MESSAGE_BYTES = 16 * 1024 * 1024
_OUTCOME_TAG, _OUTCOMES_TAG = 0x0A, 0x12


class ServerError(Exception):
    """The server refused the suite or ended the stream with a status."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise ServerError("truncated StreamGradeTracesResponse")
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            return value, pos
        shift += 7


def _outcomes(response: bytes) -> list[bytes]:
    """The TraceOutcome bytes inside a StreamGradeTracesResponse, without a parse: a chunk's
    `outcomes` (field 2), or a single trace's `outcome` (field 1)."""
    if not response:
        return [b""]  # a single empty TraceOutcome
    found: list[bytes] = []
    pos = 0
    while pos < len(response):
        tag = response[pos]
        if tag not in (_OUTCOME_TAG, _OUTCOMES_TAG):
            raise ServerError("unexpected StreamGradeTracesResponse encoding")
        length, pos = _varint(response, pos + 1)
        found.append(response[pos : pos + length])
        pos += length
    return found


def _messages(traces: list[bytes]) -> Iterator[list[bytes]]:
    """Traces grouped into stream messages of at most _MESSAGE_TRACES traces and, past one
    trace, _MESSAGE_BYTES bytes (well under the server's max_message_bytes)."""
    group: list[bytes] = []
    size = 0
    for trace in traces:
        if group and (len(group) == _MESSAGE_TRACES or size + len(trace) > _MESSAGE_BYTES):
            yield group
            group, size = [], 0
        group.append(trace)
        size += len(trace) + 8
    if group:
        yield group


class ServerBackend:
    """Registers the suite once, then streams the traces in chunks and reads outcomes in order."""

    def __init__(self, address: str, suite_bytes: bytes, *, timeout: float | None = None) -> None:
        options = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_send_message_length", _MAX_MESSAGE),
        ]
        self._channel = grpc.insecure_channel(address, options=options)
        stub = grader_service_pb2_grpc.GraderServiceStub(self._channel)
        try:
            response = stub.RegisterSuite(
                grader_service_pb2.RegisterSuiteRequest(
                    suite=suite_pb2.Suite.FromString(suite_bytes)
                ),
                timeout=30 if timeout is None else timeout,
                wait_for_ready=True,
            )
        except grpc.RpcError as exc:
            self._channel.close()
            raise ServerError(
                f"RegisterSuite on {address}: {exc.code().name}: {exc.details()}"
            ) from None
        self.suite_id: str = response.suite_id
        self._stream = self._channel.stream_stream(STREAM_METHOD)  # raw bytes both ways

    def grade(self, chunks: Iterator[Chunk]) -> Iterator[Chunk]:
        """Each chunk with its outcomes filled in, as the stream returns them.

        A chunk's traces go out as one stream message (several past _MESSAGE_TRACES or
        _MESSAGE_BYTES); each answer holds the outcomes of one message, in order.
        """
        pending: collections.deque[tuple[Chunk, int]] = collections.deque()
        suite_ref = _field(3, self.suite_id.encode())

        def requests() -> Iterator[bytes]:
            first = True
            for chunk in chunks:
                traces = [item for item in chunk.items if isinstance(item, bytes)]
                # Queued before its traces go out, so it is there when their outcomes come back.
                pending.append((chunk, len(traces)))
                for group in _messages(traces):
                    message = b"".join([_field(4, trace) for trace in group])
                    yield message + suite_ref if first else message
                    first = False

        def ready() -> Iterator[Chunk]:
            while pending and len(pending[0][0].outcomes) == pending[0][1]:
                yield pending.popleft()[0]

        try:
            for response in self._stream(requests()):
                yield from ready()
                if not pending:
                    raise ServerError("the server sent more outcomes than traces")
                outcomes = pending[0][0].outcomes
                outcomes.extend(_outcomes(response))
                if len(outcomes) > pending[0][1]:
                    raise ServerError("the server sent more outcomes than a chunk has traces")
                yield from ready()
        except grpc.RpcError as exc:
            raise ServerError(f"StreamGradeTraces: {exc.code().name}: {exc.details()}") from None
        yield from ready()
        if pending:
            raise ServerError("the stream ended before every trace had its outcome")

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()
