"""The rules that an option's declared range cannot say (:mod:`td3_lightning.declarations`): between options, over
a list's items, of a value's form. One named list per option group, each rule what must hold and the line that
refuses it; and the list of options that are idle while the option they serve is off (a new run warns of them).
The options alone, no env (the env's facts are checked in ``hparams.py`` once the env is known)."""

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
    "critic hidden sizes are positive": Rule(
        lambda o: o.get("critic_hidden_dims") is None or (
            len(o["critic_hidden_dims"]) > 0 and all(h > 0 for h in o["critic_hidden_dims"])),
        lambda o: f"model.critic_hidden_dims must be positive sizes, e.g. [1024, 1024], or null (the actor's), got "
                  f"{o['critic_hidden_dims']}"),
    "value bins need the range they cover": Rule(
        lambda o: not o.get("critic_bins") or o.get("critic_range") is not None,
        lambda o: f"model.critic_bins {o.get('critic_bins')} needs model.critic_range: auto, or [low, high], the "
                  "range of the critics' Q values (e.g. [-100, 2000] for HalfCheetah: docs/options.md)"),
    "a value range is [low, high]": Rule(
        lambda o: o.get("critic_range") in (None, "auto") or is_range(o["critic_range"]),
        lambda o: f"model.critic_range must be [low, high], two finite numbers with low < high, got "
                  f"{o.get('critic_range')}"),
    "an automatic value range needs a discount": Rule(
        lambda o: not (o.get("critic_bins") and o.get("critic_range") == "auto" and o["gamma"] >= 1),
        lambda o: f"model.critic_range auto holds r / (1 - gamma), unbounded at model.gamma {o['gamma']}: set "
                  "model.gamma below 1, or model.critic_range [low, high]"),
    "resets come after training steps": Rule(
        lambda o: _training_steps(o["reset_steps"]),
        lambda o: f"model.reset_steps must be training steps >= 1, e.g. [60000], got {o['reset_steps']}"),
    "the fixed encoder refreshes at hard target updates": Rule(
        lambda o: not o["embedding_dim"] or o["target_update_every"] > 0,
        lambda o: "model.embedding_dim refreshes the fixed encoder at each hard target update: set "
                  "model.target_update_every (TD7: 250)"),
    "hard target updates copy into target networks": Rule(
        lambda o: o.get("target_networks", True) or not o["target_update_every"],
        lambda o: "model.target_update_every copies the networks into their targets, and model.target_networks "
                  "false has none: set model.target_update_every 0 (with SALE and value clipping, keep the targets)"),
    "batch renormalisation or LayerNorm": Rule(
        lambda o: not (o.get("batch_renorm") and o["layer_norm"]),
        lambda o: "model.batch_renorm and model.layer_norm both normalise the hidden layers: choose one"),
    "batch renormalisation is of the plain networks": Rule(
        lambda o: not (o.get("batch_renorm") and o["embedding_dim"]),
        lambda o: "model.batch_renorm normalises the plain networks, and SALE's (model.embedding_dim) normalise "
                  "their embeddings by AvgL1Norm: set one of them off"),
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


class Idle(NamedTuple):
    """An option of ``group`` that does nothing while the option it serves is off: ``why(model, data)`` names that
    (None: the option acts)."""

    group: str
    why: Callable[[Options, Options], str | None]


def _cnn(model: Options) -> bool:
    return model["encoder"] == "cnn" or (model["encoder"] == "auto" and len(model["obs_shape"]) == 3)


IDLE: dict[str, Idle] = {
    "priority_alpha": Idle("data", lambda m, d: "data.sampler uniform" if d["sampler"] == "uniform" else None),
    "teacher_weight": Idle("model", lambda m, d: "no model.teacher" if not m["teacher"] else None),
    "embedding_lr": Idle("model", lambda m, d: "model.embedding_dim 0" if not m["embedding_dim"] else None),
    "checkpoint_episodes": Idle("model", lambda m, d: "model.policy_checkpoints false"
                                if not m["policy_checkpoints"] else None),
    "checkpoint_after": Idle("model", lambda m, d: "model.policy_checkpoints false"
                             if not m["policy_checkpoints"] else None),
    "critic_range": Idle("model", lambda m, d: "model.critic_bins 0" if not m.get("critic_bins") else None),
    "batch_renorm_warmup": Idle("model", lambda m, d: "model.batch_renorm false"
                                if not m.get("batch_renorm") else None),
    "tau": Idle("model", lambda m, d: "model.target_update_every (hard copies)" if m["target_update_every"] else (
        "model.target_networks false" if not m.get("target_networks", True) else None)),
    "encoder_features": Idle("model", lambda m, d: "no CNN encoder" if not _cnn(m) else None),
    "shared_encoder": Idle("model", lambda m, d: "no CNN encoder" if not _cnn(m) else None),
    "schedule_steps": Idle("model", lambda m, d: "no schedule (model.exploration_noise_final null, "
                           "model.lr_final_factor 1)" if m["exploration_noise_final"] is None
                           and m["lr_final_factor"] == 1 else None),
}


def idle_options(model: Options, data: Options, defaults: Mapping[str, Options]) -> list[str]:
    """``group.option value (why)`` for each option of ``model`` and ``data`` (a new run's values) that differs
    from its default in ``defaults`` (group -> option -> default) and does nothing, given the others."""
    groups = {"model": model, "data": data}
    idle = []
    for name, (group, why) in IDLE.items():
        value = groups[group].get(name)
        if name in groups[group] and value != defaults[group].get(name) and (reason := why(model, data)):
            idle.append(f"{group}.{name} {value} ({reason})")
    return idle


def idle_reason(option: str, model: Options, data: Options) -> str | None:
    """Why ``option`` (``group.name``) does nothing given the options ``model`` and ``data`` (its :data:`IDLE` rule),
    or None: it acts, or has no such rule (a rule that reads an option they lack counts as acting)."""
    group, _, name = option.partition(".")
    rule = IDLE.get(name)
    if rule is None or rule.group != group:
        return None
    try:
        return rule.why(model, data) or None
    except (KeyError, TypeError):
        return None


def idle_model_options(model: Options) -> set[str]:
    """The model options of ``model`` that do nothing given its others (the model group's :data:`IDLE` rules)."""
    return {name for name in IDLE if idle_reason(f"model.{name}", model, {})}


def idle_data_option(name: str, data: Options) -> bool:
    """Whether the data option ``name`` does nothing given the data options ``data`` (an :data:`IDLE` rule that reads
    the data group only)."""
    return idle_reason(f"data.{name}", {}, data) is not None
