"""Linear schedules of the exploration noise and the learning rates, by training step."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinearSchedule:
    """``start`` at step 0, moving linearly to ``final`` at step ``steps``, then staying.

    ``steps`` None means the run's length, given as ``default_steps`` when asked; with no
    length at all the schedule is already at ``final``.
    """

    start: float
    final: float
    steps: int | None = None

    def at(self, step: int, default_steps: int | None = None) -> float:
        if self.final == self.start:
            return self.start
        total = self.steps if self.steps is not None else default_steps
        progress = 1.0 if not total or total <= 0 else min(1.0, step / total)
        return self.start + (self.final - self.start) * progress
