"""The retry policy, a call's deadline, and the decision after each failed attempt (sans-IO).

The clock and the random source are parameters, so the whole schedule is testable without a
server or a sleep.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from trajgrade.client.status import retry_after, retryable
from trajgrade.errors import TrajgradeError

Clock = Callable[[], float]


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential back-off with jitter for UNAVAILABLE, an overloaded server and CANCELLED
    before any handler ran (`retryable`); never sooner than the server's retry-after.

    Attempt n (n >= 2) waits `min(max_backoff, initial_backoff * multiplier ** (n - 2))`, minus
    up to `jitter` of it at random; retrying stops after `max_attempts` attempts or when the
    wait would pass the call's deadline, and the last error is raised.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 3.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter is a fraction between 0 and 1")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """The wait before attempt `attempt + 1`, after `attempt` failed attempts."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        return base * (1.0 - self.jitter * rng.random())


NO_RETRY: Final = RetryPolicy(max_attempts=1)


@dataclass(frozen=True)
class Deadline:
    """A point on `clock` (time.monotonic) by which a call, retries included, must end; `at`
    None is no deadline."""

    at: float | None
    clock: Clock = field(default=time.monotonic, compare=False)

    @classmethod
    def after(cls, timeout: float | None, clock: Clock = time.monotonic) -> Deadline:
        """The deadline `timeout` seconds from now (None: none)."""
        return cls(None if timeout is None else clock() + timeout, clock)

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None without a deadline: each attempt's timeout."""
        return None if self.at is None else max(self.at - self.clock(), 0.0)


class Retry:
    """The attempts of one call: after each failure, how long to wait before the next one, or
    None to give up and raise. The attempt budget counts consecutive failures (`progress`
    resets it when a stream got answers)."""

    def __init__(self, policy: RetryPolicy, deadline: Deadline, rng: random.Random) -> None:
        self.policy = policy
        self.deadline = deadline
        self.rng = rng
        self.failures = 0

    def progress(self) -> None:
        """An answer came back: the next failure starts a fresh budget."""
        self.failures = 0

    def delay(
        self, error: TrajgradeError, *, answered: bool = False, lost: bool = False
    ) -> float | None:
        """Seconds to wait before retrying after `error`, or None to raise it: the jittered
        back-off, never less than the server's retry-after, and only if it ends before the
        deadline. `answered`: the stream got answers in this attempt (see `retryable`);
        `lost`: gRPC replaced the real status (see `lost_status`), retried as unknown."""
        self.failures += 1
        if self.failures >= self.policy.max_attempts:
            return None
        if not lost and not retryable(error, answered=answered):
            return None
        wait = max(self.policy.backoff(self.failures, self.rng), retry_after(error))
        left = self.deadline.remaining()
        if left is not None and wait >= left:
            return None
        return wait
