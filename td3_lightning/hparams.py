"""The checks of the TD3 module's hyperparameters: one clear line for each value out of range."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from td3_lightning.errors import UserInputError
from td3_lightning.extensions import check_extension_options, check_extension_spaces
from td3_lightning.extensions.teacher import teacher_file
from td3_lightning.networks import MIN_IMAGE_SIZE
from td3_lightning.stepping import COMPILE_MODES


def check_model_options(hp: Mapping[str, Any]) -> None:
    """Raise :class:`UserInputError` naming the first model option out of its range. Needs the options alone, not
    the env's shapes: the command line runs it as soon as the options are parsed (before a checkpoint's
    hyperparameters replace them)."""
    rules = [
        (hp["encoder"] in ("auto", "cnn", "none"), f"model.encoder must be auto, cnn or none, got {hp['encoder']!r}"),
        (hp["compile_mode"] in COMPILE_MODES,
         f"model.compile_mode must be one of {', '.join(COMPILE_MODES)}, got {hp['compile_mode']!r}"),
        (hp["encoder_features"] >= 1, f"model.encoder_features must be >= 1, got {hp['encoder_features']}"),
        (len(hp["hidden_dims"]) > 0 and all(h > 0 for h in hp["hidden_dims"]),
         f"model.hidden_dims must be positive sizes, e.g. [256, 256], got {hp['hidden_dims']}"),
        (hp["num_critics"] >= 2, f"model.num_critics must be at least 2 (clipped double-Q), got {hp['num_critics']}"),
        (hp.get("critic_bins", 0) == 0 or hp.get("critic_bins", 0) >= 2,
         f"model.critic_bins must be 0 (off) or at least 2, got {hp.get('critic_bins')}"),
        (not hp.get("critic_bins") or hp.get("critic_range") is not None,
         f"model.critic_bins {hp.get('critic_bins')} needs model.critic_range [low, high], the range of the critics' "
         "Q values (e.g. [-100, 2000] for HalfCheetah: docs/options.md)"),
        (hp.get("critic_range") is None or _is_range(hp["critic_range"]),
         f"model.critic_range must be [low, high], two finite numbers with low < high, got {hp.get('critic_range')}"),
        (0.0 <= hp["gamma"] <= 1.0, f"model.gamma must be in [0, 1], got {hp['gamma']}"),
        (0.0 < hp["tau"] <= 1.0, f"model.tau must be in (0, 1], got {hp['tau']}"),
        (hp["policy_noise"] >= 0, f"model.policy_noise must be >= 0, got {hp['policy_noise']}"),
        (hp["noise_clip"] >= 0, f"model.noise_clip must be >= 0, got {hp['noise_clip']}"),
        (hp["policy_freq"] >= 1, f"model.policy_freq must be >= 1, got {hp['policy_freq']}"),
        (hp["exploration_noise"] >= 0, f"model.exploration_noise must be >= 0, got {hp['exploration_noise']}"),
        (hp["actor_lr"] > 0, f"model.actor_lr must be > 0, got {hp['actor_lr']}"),
        (hp["critic_lr"] > 0, f"model.critic_lr must be > 0, got {hp['critic_lr']}"),
        (hp["exploration_noise_final"] is None or hp["exploration_noise_final"] >= 0,
         f"model.exploration_noise_final must be >= 0, got {hp['exploration_noise_final']}"),
        (hp["lr_final_factor"] > 0, f"model.lr_final_factor must be > 0, got {hp['lr_final_factor']}"),
        (hp["schedule_steps"] is None or hp["schedule_steps"] >= 1,
         f"model.schedule_steps must be >= 1, got {hp['schedule_steps']}"),
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


def check_hparams(hp: Mapping[str, Any]) -> None:
    """Raise :class:`UserInputError` naming the first hyperparameter out of range (:func:`check_model_options`) or
    unfit for the env's observation and action spaces."""
    check_model_options(hp)
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
