"""User turns of a run (SPEC §10 `turn`, `turns`): each new user message starts a turn."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class TurnTimeline:
    """Turns read from the model inputs of the root agent, placed in time.

    Every model input repeats the conversation so far, so the number of user messages in an
    input is the turn that model call belongs to, and the k-th user message is turn k's input.
    Anything else (a tool call, a sub-agent's model call, an answer) belongs to the turn in
    effect when it starts: the highest turn of the root agent's model calls that started
    before it (or at the same time and earlier in the input). With no user message seen at
    all, turns are not recorded (0).
    """

    user_inputs: dict[int, str] = field(default_factory=dict)
    _marks: list[tuple[int, int, int]] = field(default_factory=list)

    def model_input(self, start: int, order: int, user_texts: list[str]) -> None:
        """Record one root-agent model input holding `user_texts`, in conversation order."""
        if not user_texts:
            return
        for number, text in enumerate(user_texts, start=1):
            self.user_inputs.setdefault(number, text)
        self._marks.append((start, order, len(user_texts)))

    def freeze(self) -> None:
        """Sort the marks and make the turn never go back (a late retry of an old input)."""
        self._marks.sort()
        highest = 0
        for index, (start, order, turn) in enumerate(self._marks):
            highest = max(highest, turn)
            self._marks[index] = (start, order, highest)

    @property
    def recorded(self) -> bool:
        return bool(self._marks)

    @property
    def count(self) -> int:
        """The number of turns seen (0 when not recorded)."""
        return self._marks[-1][2] if self._marks else 0

    def turn_at(self, start: int, order: int) -> int:
        """The turn in effect at (start, order); 1 before the first model call, 0 unrecorded."""
        if not self._marks:
            return 0
        index = bisect.bisect_right(self._marks, (start, order, 1 << 62))
        return self._marks[index - 1][2] if index else 1
