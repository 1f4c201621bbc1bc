"""Linear schedules of the exploration noise and the learning rates, by training step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from td3_lightning.errors import UserInputError


@dataclass(frozen=True)
class LinearSchedule:
    """``start`` at step 0, moving linearly to ``final`` at step ``steps``, then staying.

    ``steps`` None means the run's length, given as ``default_steps`` when asked; with no
    length at all the schedule is already at ``final``.
    """

    start: float
    final: float
    steps: int | None = None

    @property
    def moves(self) -> bool:
        return self.final != self.start

    def at(self, step: int, default_steps: int | None = None) -> float:
        if not self.moves:
            return self.start
        total = self.steps if self.steps is not None else default_steps
        progress = 1.0 if not total or total <= 0 else min(1.0, step / total)
        return self.start + (self.final - self.start) * progress


class Schedules:
    """The exploration noise and the learning-rate factor by training step, over ``steps`` training
    steps (None: the run's length, ``trainer.max_steps``)."""

    def __init__(self, exploration_noise: float, exploration_noise_final: float | None, lr_final_factor: float,
                 steps: int | None) -> None:
        final = exploration_noise if exploration_noise_final is None else exploration_noise_final
        self.exploration = LinearSchedule(exploration_noise, final, steps)
        self.lr = LinearSchedule(1.0, lr_final_factor, steps)

    def exploration_noise_at(self, step: int, run_length: int | None) -> float:
        return self.exploration.at(step, run_length)

    def lr_factor_at(self, step: int, run_length: int | None) -> float:
        return self.lr.at(step, run_length)

    def set_learning_rates(self, optimizers: list[object], base_lrs: list[float], step: int,
                           run_length: int | None) -> None:
        """Each optimizer's learning rate at training step ``step`` (counted from 0): its base rate
        times the factor, written into the rate where it is a tensor (a CUDA graph reads it there).
        Nothing to do for constant rates."""
        if not self.lr.moves:
            return
        factor = self.lr.at(step, run_length)
        for optimizer, base in zip(optimizers, base_lrs):
            for group in getattr(optimizer, "optimizer", optimizer).param_groups:
                if isinstance(group["lr"], Tensor):
                    group["lr"].fill_(base * factor)
                else:
                    group["lr"] = base * factor

    def metrics(self, step: int, run_length: int | None) -> dict[str, float]:
        """``train/exploration_noise`` and ``train/lr_factor`` where they change during the run."""
        out = {}
        if self.exploration.moves:
            out["train/exploration_noise"] = self.exploration.at(step, run_length)
        if self.lr.moves:
            out["train/lr_factor"] = self.lr.at(step, run_length)
        return out


def check_schedule_length(hp: Any, max_steps: int | None) -> None:
    """A schedule over the run's length (``schedule_steps`` null) needs one: refused with ``trainer.max_steps`` -1,
    where it would hold its final values from the first step."""
    schedules = Schedules(hp["exploration_noise"], hp["exploration_noise_final"], hp["lr_final_factor"],
                          hp["schedule_steps"])
    scheduled = [name for name, schedule in (("model.exploration_noise_final", schedules.exploration),
                                             ("model.lr_final_factor", schedules.lr)) if schedule.moves]
    if scheduled and schedules.lr.steps is None and (max_steps is None or max_steps < 0):
        raise UserInputError(f"{' and '.join(scheduled)} schedule over trainer.max_steps, which is -1 (no limit): set "
                             "model.schedule_steps to the training steps the schedule takes, or a trainer.max_steps")


def run_length(module: Any) -> int | None:
    """The run's length in training steps (``trainer.max_steps``), None without a Trainer or a limit."""
    try:
        max_steps = module.trainer.max_steps
    except RuntimeError:  # not attached to a Trainer
        return None
    return max_steps if max_steps and max_steps > 0 else None
