"""The core's front on the server's TCP addresses, with live grading on (--core-front, the
default): rust/py/src/grader_front.rs.

The front serves GraderService/WatchResults itself, from the core's hub, so that a live
result is written to its watchers off the event loop as soon as it is published (grpc.aio
writes one message at a time, each completed by a turn of the loop that also grades). Every
other call is passed as it is to the grpc.aio server, which listens on a unix socket in a
private directory (0700) instead of the TCP addresses (it still serves the unix-socket ones).
TLS and the token are the server's: the front terminates TLS; grpc.aio checks the other
calls' tokens as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from pathlib import Path
from typing import Any

import grpc

from trajgrade import _core
from trajgrade.live.watch import WatchHub, core_hub
from trajgrade.server.settings import Settings
from trajgrade.server.tls import server_pem

_CODES = {code.value[0]: code for code in grpc.StatusCode}
# A unix socket's path holds at most 107 bytes (sun_path); "/grader.sock" takes 12.
_MAX_SOCKET_DIR = 90
# How often the front's ended WatchResults calls are counted in the RPC metrics.
_COUNT_EVERY_S = 1.0


def is_tcp(address: str) -> bool:
    """The front serves TCP addresses only: on a unix socket the HTTP/2 library under it
    refuses the `:authority` gRPC's C-core clients send (hyperium/h2#487), so grpc.aio serves
    those itself, as without the front."""
    return not address.startswith("unix:")


def wanted(settings: Settings) -> bool:
    """The front serves the TCP addresses: live grading on, the front not turned off."""
    return settings.live_enabled and settings.core_front and any(map(is_tcp, settings.listen))


class CoreFront:
    """The fronts of one server process (one per listen address) and grpc.aio's socket."""

    def __init__(self, settings: Settings, hub: WatchHub, metrics: Any) -> None:
        self.settings = settings
        self.metrics = metrics
        self.core = core_hub(settings.watch_queue_size)
        hub.core = self.core
        self._directory = Path(tempfile.mkdtemp(prefix="trajgrade-"))  # 0700
        if len(str(self._directory)) > _MAX_SOCKET_DIR:  # a long TMPDIR
            self._directory.rmdir()
            self._directory = Path(tempfile.mkdtemp(prefix="trajgrade-", dir="/tmp"))
        self.upstream = self._directory / "grader.sock"
        self._fronts: list[_core.GraderFront] = []
        self._counting: asyncio.Task[None] | None = None

    @property
    def upstream_address(self) -> str:
        """Where grpc.aio listens instead of the addresses."""
        return f"unix:{self.upstream}"

    def start(self, token: str | None) -> dict[str, int]:
        """Bind every TCP listen address (after grpc.aio serves its socket); the bound port of
        each."""
        s = self.settings
        tls = server_pem(s)
        ports = {}
        for address in filter(is_tcp, s.listen):
            front = _core.GraderFront(
                address, str(self.upstream), self.core, s.max_message_bytes, token, tls
            )
            self._fronts.append(front)
            ports[address] = front.port
        self._counting = asyncio.get_running_loop().create_task(self._count_forever())
        return ports

    def count(self) -> None:
        """The WatchResults calls the front ended, into the RPC metrics."""
        for code, seconds in self.core.take_ended():
            self.metrics.count("WatchResults", _CODES.get(code, grpc.StatusCode.UNKNOWN), seconds)

    async def _count_forever(self) -> None:
        while True:
            await asyncio.sleep(_COUNT_EVERY_S)
            self.count()

    async def stop(self, grace: float) -> None:
        """Stop listening; calls in flight get `grace` seconds (off the loop) to finish."""
        if self._counting is not None:
            self._counting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._counting
            self._counting = None
        loop = asyncio.get_running_loop()
        for front in self._fronts:
            await loop.run_in_executor(None, front.stop, grace)
        self._fronts.clear()
        self.count()
        shutil.rmtree(self._directory, ignore_errors=True)
