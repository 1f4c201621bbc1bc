"""The rules that an option's declared range cannot say (:mod:`td3_lightning.declarations`): between options, over
a list's items, of a value's form. One named list per option group, each rule what must hold and the line that
refuses it; the options alone, no env (the env's facts are checked in ``hparams.py`` once the env is known)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

from td3_lightning.errors import UserInputError

Options = Mapping[str, Any]


class Rule(NamedTuple):
    """What must hold of a group's options, and the one line that refuses them when it does not."""

    holds: Callable[[Options], bool]
    refusal: Callable[[Options], str]


def is_range(value: Any) -> bool:
    """Two finite numbers, the first below the second."""
    return (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
            and value[0] < value[1])


def is_device(name: str) -> bool:
    """Whether torch reads ``name`` as a device (``cpu``, ``cuda:0``)."""
    try:
        torch.device(name)
    except (RuntimeError, ValueError):
        return False
    return True


def _training_steps(steps: Any) -> bool:
    return isinstance(steps, (list, tuple)) and all(
        isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in steps)


MODEL_RULES: dict[str, Rule] = {
    "hidden sizes are positive": Rule(
        lambda o: len(o["hidden_dims"]) > 0 and all(h > 0 for h in o["hidden_dims"]),
        lambda o: f"model.hidden_dims must be positive sizes, e.g. [256, 256], got {o['hidden_dims']}"),
    "value bins need the range they cover": Rule(
        lambda o: not o.get("critic_bins") or o.get("critic_range") is not None,
        lambda o: f"model.critic_bins {o.get('critic_bins')} needs model.critic_range [low, high], the range of the "
                  "critics' Q values (e.g. [-100, 2000] for HalfCheetah: docs/options.md)"),
    "a value range is [low, high]": Rule(
        lambda o: o.get("critic_range") is None or is_range(o["critic_range"]),
        lambda o: f"model.critic_range must be [low, high], two finite numbers with low < high, got "
                  f"{o.get('critic_range')}"),
    "resets come after training steps": Rule(
        lambda o: _training_steps(o["reset_steps"]),
        lambda o: f"model.reset_steps must be training steps >= 1, e.g. [60000], got {o['reset_steps']}"),
    "the fixed encoder refreshes at hard target updates": Rule(
        lambda o: not o["embedding_dim"] or o["target_update_every"] > 0,
        lambda o: "model.embedding_dim refreshes the fixed encoder at each hard target update: set "
                  "model.target_update_every (TD7: 250)"),
    "value clipping takes its bounds at hard target updates": Rule(
        lambda o: not o.get("value_clipping") or o["target_update_every"] > 0,
        lambda o: "model.value_clipping takes new bounds at each hard target update: set model.target_update_every "
                  "(TD7: 250)"),
}

DATA_RULES: dict[str, Rule] = {
    "batches are sampled in the main process": Rule(
        lambda o: o["num_workers"] == 0,
        lambda o: f"data.num_workers must be 0, got {o['num_workers']}: worker processes would each copy the replay "
                  "buffer; batches are sampled in the main process"),
    "the buffer's device is a torch device": Rule(
        lambda o: o["buffer_device"] == "auto" or is_device(o["buffer_device"]),
        lambda o: f"data.buffer_device must be auto or a torch device such as cpu or cuda:0, "
                  f"got {o['buffer_device']!r}"),
    "the warm-up fits in the buffer": Rule(
        lambda o: o["warmup_steps"] <= o["buffer_size"],
        lambda o: f"data.warmup_steps ({o['warmup_steps']}) must not exceed data.buffer_size ({o['buffer_size']})"),
}


def check_rules(rules: Mapping[str, Rule], options: Options) -> None:
    """Raise :class:`UserInputError` with the refusal of the first of ``rules`` that ``options`` break."""
    for rule in rules.values():
        if not rule.holds(options):
            raise UserInputError(rule.refusal(options))
