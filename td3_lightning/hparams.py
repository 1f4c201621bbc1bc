"""The checks of the TD3 module's hyperparameters: their declared ranges, the rules between them
(:mod:`td3_lightning.rules`) and what the env's spaces allow; one clear line for each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from td3_lightning.declarations import check_declared
from td3_lightning.errors import UserInputError
from td3_lightning.extensions import check_extension_spaces
from td3_lightning.extensions.teacher import teacher_file
from td3_lightning.networks import MIN_IMAGE_SIZE
from td3_lightning.rules import MODEL_RULES, check_rules


def check_model_options(hp: Mapping[str, Any], declared: type) -> None:
    """Raise :class:`UserInputError` for the first model option out of the range that ``declared`` (the module's
    class) gives it, or breaking one of :data:`~td3_lightning.rules.MODEL_RULES` (``hp``: the options alone, no env
    shapes)."""
    check_declared("model", declared, hp)
    check_rules(MODEL_RULES, hp)


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
