"""The checks of the Trainer and checkpoint options that this project counts in training steps.

Lightning checks some of them only once a run has started (``val_check_interval 0`` divides by
zero after the first step), some with a traceback (``max_steps -5``) and some not at all
(``max_steps 0`` makes an empty run folder): the command line calls :func:`check_trainer_options`
on the parsed config, before any env is made or anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from td3_lightning.errors import UserInputError

#: how a time is written for ``trainer.val_check_interval`` (Lightning's format)
TIME_FORMAT = '"DD:HH:MM:SS", e.g. "00:01:00:00"'


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_time(text: str) -> bool:
    """Whether ``text`` is a duration above zero written as DD:HH:MM:SS."""
    parts = text.strip().split(":")
    return len(parts) == 4 and all(p.isdigit() for p in parts) and any(int(p) for p in parts)


def check_trainer_options(trainer: Mapping[str, Any], checkpoint: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`UserInputError` naming the first Trainer or checkpoint option out of range."""
    max_steps = trainer.get("max_steps")
    if max_steps is not None and (not _is_int(max_steps) or (max_steps < 1 and max_steps != -1)):
        raise UserInputError(f"trainer.max_steps must be at least 1 training step, or -1 for no limit; got {max_steps}")
    interval = trainer.get("val_check_interval")
    if interval is not None and not isinstance(interval, Mapping) and not (
        (_is_int(interval) and interval >= 1) or (isinstance(interval, str) and _is_time(interval))
    ):
        raise UserInputError(
            f"trainer.val_check_interval must be a number of training steps >= 1 or a time ({TIME_FORMAT}); "
            f"got {interval}"
        )
    log_every = trainer.get("log_every_n_steps")
    if log_every is not None and log_every < 0:
        raise UserInputError(
            f"trainer.log_every_n_steps must be >= 0 training steps (0: no step logging); got {log_every}"
        )
    every_epochs = trainer.get("check_val_every_n_epoch")
    if every_epochs is not None and every_epochs < 1:
        raise UserInputError(
            f"trainer.check_val_every_n_epoch must be >= 1 or null (the replay stream is one endless epoch: "
            f"trainer.val_check_interval counts the steps); got {every_epochs}"
        )
    accumulate = trainer.get("accumulate_grad_batches")
    if accumulate is not None and accumulate != 1:
        raise UserInputError(f"trainer.accumulate_grad_batches must be 1: TD3 steps its optimizers itself "
                             f"(manual optimization); got {accumulate}")
    every = (checkpoint or {}).get("every_n_train_steps")
    if every is not None and every < 0:
        raise UserInputError(
            f"checkpoint.every_n_train_steps must be >= 0 training steps (0 or null: off); got {every}"
        )


def validation_steps(trainer: Mapping[str, Any]) -> int | None:
    """The training steps between validations (None: a time, or none set)."""
    interval = trainer.get("val_check_interval")
    return interval if _is_int(interval) else None
