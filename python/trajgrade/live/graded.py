"""The graded trace ids that make later spans late (docs/live-grading.md, "Late spans"): each
remembered for a window after its last span, and at most a count of them, the oldest forgotten
first, both in O(1) amortised.

Ids are filed in generations, one per eighth of the window: a dict maps each id to the
generation it was last seen in (the generation object itself, so an entry costs the dict slot
and a place in its generation's queue, nothing per id beside them). A whole generation is
forgotten once the window has passed since its end, so an id is remembered for at least the
window and at most an eighth more. A late span refiles its id in the newest generation; the
older generation's queue keeps a stale place for it, skipped when that generation goes.
"""

from __future__ import annotations

from collections import Counter, deque

# Why a graded trace id was forgotten (a span of it then starts a new run).
FORGOT_WINDOW = "window"
FORGOT_CAP = "cap"

_SLICES = 8  # generations per window


class _Generation:
    __slots__ = ("ids", "start")

    def __init__(self, start: float) -> None:
        self.start = start
        self.ids: deque[str] = deque()


class GradedIds:
    """Trace id -> the run key it was graded under, for `window_s` after its last sighting
    and at most `cap` ids. The clock (monotonic seconds) is passed in."""

    def __init__(self, window_s: float, cap: int) -> None:
        self.window_s = window_s
        self.cap = cap
        self._slice_s = window_s / _SLICES
        self._where: dict[str, _Generation] = {}
        # Only the ids graded under another key (--live-group-by): the rest are their own key.
        self._keys: dict[str, str] = {}
        self._generations: deque[_Generation] = deque()
        self.forgotten: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._where)

    def remember(self, trace_id: str, key: str, now: float) -> None:
        """`trace_id` was graded under `key`, or sighted again (a late span), at `now`."""
        generation = self._generations[-1] if self._generations else None
        if generation is None or now >= generation.start + self._slice_s:
            generation = _Generation(now)
            self._generations.append(generation)
        self._where[trace_id] = generation
        generation.ids.append(trace_id)
        if key != trace_id:
            self._keys[trace_id] = key
        while len(self._where) > self.cap:
            self._forget_oldest()

    def key_of(self, trace_id: str) -> str | None:
        """The key `trace_id` was graded under, if remembered (None: not graded, or
        forgotten)."""
        if trace_id not in self._where:
            return None
        return self._keys.get(trace_id, trace_id)

    def expire(self, now: float) -> None:
        """Forget the generations the window has passed since their end."""
        generations = self._generations
        while generations and generations[0].start + self._slice_s + self.window_s <= now:
            generation = generations.popleft()
            for trace_id in generation.ids:
                self._drop(trace_id, generation, FORGOT_WINDOW)

    def _forget_oldest(self) -> None:
        generation = self._generations[0]
        while generation.ids:
            if self._drop(generation.ids.popleft(), generation, FORGOT_CAP):
                break
        if not generation.ids:
            self._generations.popleft()

    def _drop(self, trace_id: str, generation: _Generation, reason: str) -> bool:
        """Forget `trace_id` if `generation` still holds it (not refiled since)."""
        if self._where.get(trace_id) is not generation:
            return False
        del self._where[trace_id]
        self._keys.pop(trace_id, None)
        self.forgotten[reason] += 1
        return True
