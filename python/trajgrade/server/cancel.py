"""Deadlines and cancellation reach the core: one CancelToken per RPC, cancelled when the
caller goes away or the deadline passes, so a grading in progress stops within milliseconds
and its thread serves the next caller (the core checks the token at every unit of work)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from trajgrade import _core
from trajgrade.errors import DeadlineExceededError


@contextlib.contextmanager
def cancellation(context: Any) -> Iterator[_core.CancelToken]:
    """A token for the RPC of ``context`` (a grpc.aio.ServicerContext).

    It is cancelled when the RPC's deadline passes (a timer on the event loop), when the RPC
    ends for any reason (its done callback: the client cancelled, the connection dropped), or
    when the handler leaves this block with an exception (its task was cancelled). The core's
    ``CancelledError`` for a call whose deadline has passed becomes DEADLINE_EXCEEDED.
    """
    token = _core.CancelToken()
    remaining = context.time_remaining()
    timer = None
    expired: list[bool] = []  # the deadline timer fired (its clock and grpc's may differ)
    if remaining is not None:
        timer = asyncio.get_running_loop().call_later(max(remaining, 0.0), _expire, token, expired)
    context.add_done_callback(lambda _context: token.cancel())
    try:
        yield token
        # A batch or stream chunk cut by the deadline comes back as CANCELLED item errors, not
        # as CancelledError: it is a partial answer, and the deadline's status replaces it.
        if token.cancelled and (expired or _deadline_passed(context)):
            raise DeadlineExceededError("the deadline passed while the request was graded")
    except _core.CancelledError as exc:
        if expired or _deadline_passed(context):
            raise DeadlineExceededError("the deadline passed while the request was graded") from exc
        raise
    except BaseException:
        token.cancel()
        raise
    finally:
        if timer is not None:
            timer.cancel()


def _deadline_passed(context: Any) -> bool:
    left = context.time_remaining()
    return left is not None and left <= 0


def _expire(token: _core.CancelToken, expired: list[bool]) -> None:
    expired.append(True)
    token.cancel()
