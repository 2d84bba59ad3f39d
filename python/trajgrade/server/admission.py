"""Admission: the GraderService calls in flight, counted and capped by the server itself.

grpc.aio's own ``maximum_concurrent_rpcs`` does not refuse a call: it stops accepting, so
calls pile up in gRPC's pending-request backlog, where they are CANCELLED before any handler
runs once the backlog overflows or on shutdown. Here every call is accepted at once and, over
``max_concurrent_rpcs``, answered RESOURCE_EXHAUSTED (reason TOO_MANY_RPCS, with retry-after)
by us. The same count tells the drain when the last accepted call has been answered.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from trajgrade.errors import ServiceError, ShuttingDownError, TooManyRpcsError
from trajgrade.server.metrics import ServerMetrics
from trajgrade.server.status import to_status


class Admission(grpc.GenericRpcHandler):  # type: ignore[misc]
    """Wraps the GraderService handlers: counts calls in flight, refuses those over the cap
    and, once draining, those that arrive (UNAVAILABLE / SHUTTING_DOWN, never CANCELLED)."""

    def __init__(
        self,
        inner: grpc.GenericRpcHandler,
        metrics: ServerMetrics,
        *,
        max_concurrent_rpcs: int | None,
        retry_after_ms: int,
    ) -> None:
        self._inner = inner
        self._metrics = metrics
        self._cap = max_concurrent_rpcs
        self._retry_after_ms = retry_after_ms
        self._active = 0
        self.refusing = 0  # refusals still sending their status
        self._idle = asyncio.Event()
        self._idle.set()
        self.draining = False
        self.last_arrival = time.monotonic()

    @property
    def active(self) -> int:
        """GraderService calls accepted and not yet answered."""
        return self._active

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no accepted call is in flight; False if `timeout` ran out first."""
        try:
            await asyncio.wait_for(self._idle.wait(), max(timeout, 0.0))
        except TimeoutError:
            return self._active == 0
        return True

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        rpc = str(handler_call_details.method).rsplit("/", 1)[-1]
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(self._stream(rpc, handler.stream_stream))
        return grpc.unary_unary_rpc_method_handler(self._unary(rpc, handler.unary_unary))

    def _refusal(self) -> ServiceError | None:
        """Why a call arriving now is refused, or None to run it."""
        self.last_arrival = time.monotonic()
        if self.draining:
            self._metrics.rejected.labels("shutting_down").inc()
            return ShuttingDownError("the server is shutting down; retry on another replica")
        if self._cap is not None and self._active >= self._cap:
            self._metrics.rejected.labels("too_many_rpcs").inc()
            return TooManyRpcsError(
                f"{self._active} calls in flight, the most this server handles at once "
                f"(max_concurrent_rpcs={self._cap}); retry after {self._retry_after_ms} ms",
                max_concurrent_rpcs=str(self._cap),
                retry_after_ms=str(self._retry_after_ms),
            )
        return None

    def _enter(self) -> None:
        self._active += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._active -= 1
        if self._active == 0:
            self._idle.set()

    async def _refuse(self, rpc: str, error: ServiceError, context: Any) -> None:
        status = to_status(error, rpc=rpc)
        self._metrics.count(rpc, status.code, 0.0)
        self.refusing += 1
        try:
            await context.abort_with_status(status)
        finally:
            self.refusing -= 1

    def _unary(
        self, rpc: str, behavior: Callable[[bytes, Any], Awaitable[bytes]]
    ) -> Callable[[bytes, Any], Awaitable[bytes]]:
        async def handler(request: bytes, context: Any) -> bytes:
            refused = self._refusal()
            if refused is not None:
                await self._refuse(rpc, refused, context)
            self._enter()
            try:
                return await behavior(request, context)
            finally:
                self._leave()

        return handler

    def _stream(
        self, rpc: str, behavior: Callable[[AsyncIterator[bytes], Any], AsyncIterator[bytes]]
    ) -> Callable[[AsyncIterator[bytes], Any], AsyncIterator[bytes]]:
        async def handler(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
            refused = self._refusal()
            if refused is not None:
                await self._refuse(rpc, refused, context)
            self._enter()
            try:
                async for response in behavior(requests, context):
                    yield response
            finally:
                self._leave()

        return handler
