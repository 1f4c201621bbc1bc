"""The checks of the TD3 module's hyperparameters: one clear line for each value out of range."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from td3_lightning.declarations import check_declared
from td3_lightning.errors import UserInputError
from td3_lightning.extensions import check_extension_options, check_extension_spaces
from td3_lightning.extensions.teacher import teacher_file
from td3_lightning.networks import MIN_IMAGE_SIZE


def check_model_options(hp: Mapping[str, Any], declared: type) -> None:
    """Raise :class:`UserInputError` for the first model option out of the range that ``declared`` (the module's
    class) gives it, or breaking a rule between options or of a list's items (``hp``: the options alone, no env
    shapes)."""
    check_declared("model", declared, hp)
    rules = [
        (len(hp["hidden_dims"]) > 0 and all(h > 0 for h in hp["hidden_dims"]),
         f"model.hidden_dims must be positive sizes, e.g. [256, 256], got {hp['hidden_dims']}"),
        (not hp.get("critic_bins") or hp.get("critic_range") is not None,
         f"model.critic_bins {hp.get('critic_bins')} needs model.critic_range [low, high], the range of the critics' "
         "Q values (e.g. [-100, 2000] for HalfCheetah: docs/options.md)"),
        (hp.get("critic_range") is None or _is_range(hp["critic_range"]),
         f"model.critic_range must be [low, high], two finite numbers with low < high, got {hp.get('critic_range')}"),
    ]
    for ok, message in rules:
        if not ok:
            raise UserInputError(message)
    check_extension_options(hp)


def _is_range(value: Any) -> bool:
    """Two finite numbers, the first below the second."""
    return (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
            and value[0] < value[1])


def check_model_files(hp: Mapping[str, Any]) -> None:
    """The files that model options name (``model.teacher``): the module reads them only when fitting starts, so that
    a checkpoint loads without them; fit's command line checks them with the options."""
    if hp.get("teacher"):
        teacher_file(hp["teacher"])


def check_hparams(hp: Mapping[str, Any], declared: type) -> None:
    """Raise :class:`UserInputError` naming the first hyperparameter out of its range or breaking a rule
    (:func:`check_model_options`), or unfit for the env's observation and action spaces."""
    check_model_options(hp, declared)
    low, high, shape = hp["action_low"], hp["action_high"], hp["obs_shape"]
    rules = [
        (len(shape) == 1 or (len(shape) == 3 and hp["encoder"] != "none"),
         f"observations of shape {tuple(shape)} need model.encoder auto or cnn (images (C, H, W)); "
         "the MLP networks alone take 1-D observations"),
        (hp["encoder"] != "cnn" or len(shape) == 3,
         f"model.encoder cnn needs image observations (C, H, W), got shape {tuple(shape)}"),
        (len(shape) != 3 or min(shape[1:]) >= MIN_IMAGE_SIZE,
         f"images of {shape[1:]} pixels are too small for the CNN encoder: it needs at least "
         f"{MIN_IMAGE_SIZE}x{MIN_IMAGE_SIZE} (set the env's resize option higher)"),
        (hp["critic_obs_shape"] is None or len(hp["critic_obs_shape"]) == 1,
         f"model.critic_obs_shape must be a 1-D shape (a state vector), got {hp['critic_obs_shape']}"),
        (len(low) == len(high) and len(low) > 0, "action_low and action_high must have the same, non-zero length"),
        (all(lo < hi for lo, hi in zip(low, high)), f"every action_low must be < action_high, got {low} and {high}"),
    ]
    for ok, message in rules:
        if not ok:
            raise UserInputError(message)
    check_extension_spaces(hp)
