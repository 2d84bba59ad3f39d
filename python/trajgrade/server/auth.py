"""Bearer-token authentication: an interceptor that lets only health checks through unasked."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from trajgrade.errors import UnauthenticatedError
from trajgrade.server.status import to_status

UNAUTHENTICATED = "missing or invalid bearer token (authorization: Bearer <token>)"

# Health stays open so orchestrators and `trajgrade health` need no secret.
OPEN_PREFIXES = ("/grpc.health.v1.Health/",)


def _token_of(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer":
                return token.strip()
    return None


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Answers UNAUTHENTICATED unless 'authorization: Bearer <token>' matches."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an empty bearer token would let everyone in")
        self._token = token.encode("utf-8")

    def allowed(self, metadata: Any) -> bool:
        """Constant-time comparison, so response timing does not leak the token."""
        presented = _token_of(metadata)
        if presented is None:
            return False
        return hmac.compare_digest(presented.encode("utf-8"), self._token)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        if method.startswith(OPEN_PREFIXES) or self.allowed(
            handler_call_details.invocation_metadata
        ):
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return _refusal(handler)


def _refusal(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that answers UNAUTHENTICATED."""
    status = to_status(UnauthenticatedError(UNAUTHENTICATED))

    async def refuse_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort_with_status(status)

    async def refuse_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await context.abort_with_status(status)
        yield None  # pragma: no cover - abort raises; this only makes it an async generator

    kwargs = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_stream, **kwargs)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse_unary, **kwargs)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse_stream, **kwargs)
    return grpc.unary_unary_rpc_method_handler(refuse_unary, **kwargs)
