"""The checks of the TD3 module's hyperparameters: their declared ranges, the rules between them
(:mod:`td3_lightning.rules`) and what the env's spaces allow; one clear line for each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from td3_lightning.declarations import check_declared
from td3_lightning.extensions import check_extension_spaces
from td3_lightning.extensions.teacher import teacher_file
from td3_lightning.networks import MIN_IMAGE_SIZE
from td3_lightning.rules import MODEL_RULES, Rule, check_rules


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


#: what the env's observation and action spaces (``obs_shape``, ``action_low``/``high``, ``critic_obs_shape``, linked
#: from the env) allow of the networks
SPACE_RULES: dict[str, Rule] = {
    "vector observations, or images with an encoder": Rule(
        lambda o: len(o["obs_shape"]) == 1 or (len(o["obs_shape"]) == 3 and o["encoder"] != "none"),
        lambda o: f"observations of shape {tuple(o['obs_shape'])} need model.encoder auto or cnn (images (C, H, W)); "
                  "the MLP networks alone take 1-D observations"),
    "a CNN encoder reads images": Rule(
        lambda o: o["encoder"] != "cnn" or len(o["obs_shape"]) == 3,
        lambda o: f"model.encoder cnn needs image observations (C, H, W), got shape {tuple(o['obs_shape'])}; "
                  "give model.encoder auto (or none) for these"),
    "images are large enough for the CNN": Rule(
        lambda o: len(o["obs_shape"]) != 3 or min(o["obs_shape"][1:]) >= MIN_IMAGE_SIZE,
        lambda o: f"images of {o['obs_shape'][1:]} pixels are too small for the CNN encoder: it needs at least "
                  f"{MIN_IMAGE_SIZE}x{MIN_IMAGE_SIZE} (set the env's resize option higher)"),
    "the privileged observation is a vector": Rule(
        lambda o: o["critic_obs_shape"] is None or len(o["critic_obs_shape"]) == 1,
        lambda o: f"model.critic_obs_shape must be a 1-D shape (a state vector), got {o['critic_obs_shape']}"),
    "an action has bounds on each side": Rule(
        lambda o: len(o["action_low"]) == len(o["action_high"]) and len(o["action_low"]) > 0,
        lambda o: "action_low and action_high must have the same, non-zero length"),
    "each action's low bound is below its high one": Rule(
        lambda o: all(lo < hi for lo, hi in zip(o["action_low"], o["action_high"])),
        lambda o: f"every action_low must be < action_high, got {o['action_low']} and {o['action_high']}"),
}


def check_hparams(hp: Mapping[str, Any], declared: type) -> None:
    """Raise :class:`UserInputError` naming the first hyperparameter out of its range or breaking a rule
    (:func:`check_model_options`), or unfit for the env's observation and action spaces (:data:`SPACE_RULES`, and
    the extensions' own)."""
    check_model_options(hp, declared)
    check_rules(SPACE_RULES, hp)
    check_extension_spaces(hp)
