"""Options set away from their defaults that do nothing in a run, because the option they serve is off."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

#: (option, the group its value is in, why it is idle given both groups' values, or None when it acts)
_RULES: list[tuple[str, str, Callable[[Mapping[str, Any], Mapping[str, Any]], str | None]]] = [
    ("priority_alpha", "data", lambda m, d: "data.sampler uniform" if d["sampler"] == "uniform" else None),
    ("teacher_weight", "model", lambda m, d: "no model.teacher" if not m["teacher"] else None),
    ("embedding_lr", "model", lambda m, d: "model.embedding_dim 0" if not m["embedding_dim"] else None),
    ("checkpoint_episodes", "model", lambda m, d: "model.policy_checkpoints false" if not m["policy_checkpoints"]
     else None),
    ("checkpoint_after", "model", lambda m, d: "model.policy_checkpoints false" if not m["policy_checkpoints"]
     else None),
    ("critic_range", "model", lambda m, d: "model.critic_bins 0" if not m.get("critic_bins") else None),
    ("tau", "model", lambda m, d: "model.target_update_every (hard copies)" if m["target_update_every"] else None),
    ("encoder_features", "model", lambda m, d: "no CNN encoder" if not _cnn(m) else None),
    ("shared_encoder", "model", lambda m, d: "no CNN encoder" if not _cnn(m) else None),
    ("schedule_steps", "model", lambda m, d: "no schedule (model.exploration_noise_final null, "
     "model.lr_final_factor 1)" if m["exploration_noise_final"] is None and m["lr_final_factor"] == 1 else None),
]


def _cnn(model: Mapping[str, Any]) -> bool:
    return model["encoder"] == "cnn" or (model["encoder"] == "auto" and len(model["obs_shape"]) == 3)


def idle_options(model: Mapping[str, Any], data: Mapping[str, Any], defaults: Mapping[str, Mapping[str, Any]]
                 ) -> list[str]:
    """``group.option value (why)`` for each option of ``model`` and ``data`` (a new run's values) that differs
    from its default in ``defaults`` (group -> option -> default) and does nothing, given the others."""
    groups = {"model": model, "data": data}
    idle = []
    for name, group, why in _RULES:
        value = groups[group].get(name)
        if name in groups[group] and value != defaults[group].get(name) and (reason := why(model, data)):
            idle.append(f"{group}.{name} {value} ({reason})")
    return idle


def idle_data_option(name: str, data: Mapping[str, Any]) -> bool:
    """Whether the data option ``name`` does nothing given the data options ``data`` (a rule of :data:`_RULES`
    that reads the data group only)."""
    return any(option == name and group == "data" and why({}, data) for option, group, why in _RULES)


def signature_defaults(cls: type) -> dict[str, Any]:
    """The defaults of ``cls``'s constructor arguments."""
    return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}
