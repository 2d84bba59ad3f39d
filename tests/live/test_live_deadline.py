"""The live settle timer (live/deadline.py): the core's timerfd on the loop, `call_at` elsewhere.

Behaviour, not speed (bench/bench_live.py measures the settle timer's lateness): the callback
never runs before its deadline, once per arming, the last arming wins, and a cancelled or
closed timer stays silent.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from trajgrade import _core
from trajgrade.live.deadline import LoopDeadline


@pytest.fixture(params=["timerfd", "call_at"])
def fd_timer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    if request.param == "call_at":
        monkeypatch.delattr(_core, "DeadlineTimer")
    return bool(request.param == "timerfd")


def test_the_core_has_the_timerfd_on_linux() -> None:
    # The server runs on Linux: the fallback must not be what it uses there.
    assert hasattr(_core, "DeadlineTimer")


async def test_fires_once_after_its_deadline(fd_timer: bool) -> None:
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    timer = LoopDeadline(loop, lambda: fired.append(time.monotonic()))
    assert (timer._fd_timer is not None) == fd_timer
    at = time.monotonic() + 0.03
    timer.arm(at)
    assert timer.at == at
    await asyncio.sleep(0.1)
    assert len(fired) == 1 and fired[0] >= at
    assert timer.at is None
    timer.close()


async def test_the_last_arming_wins_and_cancel_silences(fd_timer: bool) -> None:
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    timer = LoopDeadline(loop, lambda: fired.append(time.monotonic()))
    timer.arm(time.monotonic() + 0.02)
    later = time.monotonic() + 0.08
    timer.arm(later)  # moved later: nothing at the first deadline
    await asyncio.sleep(0.05)
    assert fired == []
    await asyncio.sleep(0.08)
    assert len(fired) == 1 and fired[0] >= later
    timer.arm(time.monotonic() + 0.02)
    timer.cancel()
    await asyncio.sleep(0.05)
    assert len(fired) == 1 and timer.at is None
    timer.close()


async def test_a_past_deadline_fires_at_once_and_a_closed_timer_never(fd_timer: bool) -> None:
    loop = asyncio.get_running_loop()
    fired: list[int] = []
    timer = LoopDeadline(loop, lambda: fired.append(1))
    timer.arm(time.monotonic() - 5.0)
    await asyncio.sleep(0.02)
    assert fired == [1]
    timer.arm(time.monotonic() + 0.01)
    timer.close()
    await asyncio.sleep(0.05)
    assert fired == [1]


def test_the_core_timer_refuses_a_deadline_that_is_not_finite() -> None:
    timer = _core.DeadlineTimer()
    with pytest.raises(ValueError, match="finite"):
        timer.arm(float("nan"))
    assert timer.clear() is False  # never armed: nothing to take
