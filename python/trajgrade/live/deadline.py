"""One callback at a deadline on the event loop, to the microsecond.

`loop.call_at` fires late: asyncio waits in `epoll_wait`, whose timeout is in whole
milliseconds rounded up, so a deadline 0.2 ms away wakes the loop after 1 ms. A live run's
settle deadline is on its result's latency path, so the live timer is the core's timerfd
(`_core.DeadlineTimer`, Linux), watched by the same `epoll_wait`; elsewhere, `call_at`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from trajgrade import _core


class LoopDeadline:
    """A callback run on the loop once its deadline has passed; armed again for each deadline
    (arming replaces the deadline before). Times are `loop.time()` (`time.monotonic()`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        self._loop = loop
        self._callback = callback
        self.at: float | None = None  # the deadline armed, None when none is
        make = getattr(_core, "DeadlineTimer", None)
        self._fd_timer: _core.DeadlineTimer | None = make() if make is not None else None
        self._handle: asyncio.TimerHandle | None = None
        if self._fd_timer is not None:
            loop.add_reader(self._fd_timer.fileno(), self._fired)

    def arm(self, at: float) -> None:
        self.at = at
        if self._fd_timer is not None:
            self._fd_timer.arm(at)
            return
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(at, self._fired)

    def cancel(self) -> None:
        self.at = None
        if self._fd_timer is not None:
            self._fd_timer.disarm()
            self._fd_timer.clear()  # a firing not yet taken
        elif self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self) -> None:
        """No more callbacks: the descriptor leaves the loop and is closed."""
        self.cancel()
        if self._fd_timer is not None:
            self._loop.remove_reader(self._fd_timer.fileno())
            self._fd_timer = None

    def _fired(self) -> None:
        if self._fd_timer is not None and not self._fd_timer.clear():
            return  # re-armed for later since it became readable
        self._handle = None
        self.at = None
        self._callback()
