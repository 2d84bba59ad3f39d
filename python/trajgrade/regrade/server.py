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


class ServerError(Exception):
    """The server refused the suite or ended the stream with a status."""


def _outcome(response: bytes) -> bytes:
    """TraceOutcome bytes inside a StreamGradeTracesResponse (field 1), without a parse."""
    if not response:
        return b""  # an empty TraceOutcome
    if response[0] != 0x0A:
        raise ServerError("unexpected StreamGradeTracesResponse encoding")
    length, shift, pos = 0, 0, 1
    while True:
        byte = response[pos]
        length |= (byte & 0x7F) << shift
        pos += 1
        if byte < 0x80:
            break
        shift += 7
    return response[pos : pos + length]


class ServerBackend:
    """Registers the suite once, then streams every trace and reads outcomes in request order."""

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
        """Each chunk with its outcomes filled in, as the stream returns them."""
        pending: collections.deque[tuple[Chunk, int]] = collections.deque()
        suite_ref = _field(3, self.suite_id.encode())

        def requests() -> Iterator[bytes]:
            first = True
            for chunk in chunks:
                traces = [item for item in chunk.items if isinstance(item, bytes)]
                # Queued before its traces go out, so it is there when their outcomes come back.
                pending.append((chunk, len(traces)))
                for trace in traces:
                    yield _field(1, trace) + suite_ref if first else _field(1, trace)
                    first = False

        def ready() -> Iterator[Chunk]:
            while pending and len(pending[0][0].outcomes) == pending[0][1]:
                yield pending.popleft()[0]

        try:
            for response in self._stream(requests()):
                yield from ready()
                if not pending:
                    raise ServerError("the server sent more outcomes than traces")
                pending[0][0].outcomes.append(_outcome(response))
                yield from ready()
        except grpc.RpcError as exc:
            raise ServerError(f"StreamGradeTraces: {exc.code().name}: {exc.details()}") from None
        yield from ready()
        if pending:
            raise ServerError("the stream ended before every trace had its outcome")

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()
