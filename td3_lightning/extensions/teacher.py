"""Teacher distillation (``model.teacher``): the actor's action pulled toward a frozen teacher's
action on what the critics see of the same replayed step (the privileged observation, else the observation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from td3_lightning import checkpointing
from td3_lightning.errors import UserInputError, shipped_path
from td3_lightning.extensions.base import ActorTerm, ActorView


class Teacher(ActorTerm):
    """The mean squared distance, in half action ranges, between the actor's action and the
    teacher's; the teacher is read when fitting starts and is not saved with the module."""

    name = "teacher_distance"

    def __init__(self, weight: float, path: str) -> None:
        super().__init__(weight)
        self.path = path
        self.teacher: tuple[torch.nn.Module, ...] = ()  # a tuple keeps it out of the state dict

    def on_fit_start(self, module: Any) -> None:
        if not self.teacher:
            self.teacher = (load_teacher(self.path, module).to(module.device),)

    def forward(self, view: ActorView) -> Tensor:
        if not self.teacher:
            raise RuntimeError("the teacher is read when fitting starts: call on_fit_start(module) first")
        with torch.no_grad():
            target = self.teacher[0](view.critic_obs)
        return ((view.action - target) / view.action_scale).pow(2).sum(dim=1).mean()


def teacher_file(path: str) -> Path:
    """The checkpoint file ``model.teacher`` names (a ``td3_lightning/...`` path: the installed package's file);
    one-line :class:`UserInputError` unless it is a readable td3_lightning checkpoint."""
    where = Path(shipped_path(path))
    if not where.is_file():
        problem = "is a folder, not a file" if where.is_dir() else "not found"
        raise UserInputError(f"model.teacher: checkpoint file {problem}: {path}; pass an existing .ckpt file")
    checkpointing.check_checkpoint(where, "model.teacher", "model.teacher takes a .ckpt file that td3_lightning wrote")
    return where


def check_teacher(path: str, hparams: Any) -> Path:
    """The file of :func:`teacher_file`, checked against the shape of what the critics see (the privileged
    observation, ``critic_obs_shape``, else the observation) and the action bounds of the student's ``hparams``,
    without loading it: one-line :class:`UserInputError`."""
    where = teacher_file(path)
    facts = checkpointing.inspect_checkpoint(str(where))
    privileged = hparams.get("critic_obs_shape") is not None
    seen = "privileged observation" if privileged else "observation"
    shape = list(facts["obs_shape"] or [])
    want = list(hparams["critic_obs_shape"] if privileged else hparams.get("obs_shape") or [])
    if shape != want:
        image_student = not privileged and len(want) == 3 and len(shape) == 1  # e.g. the car's state driver
        other = (", or set data.privileged_critic true for a teacher of the env's privileged observation (the car's "
                 "state vector)") if image_student else ""
        raise UserInputError(
            f"model.teacher {path} reads observations of shape {shape}, but the {seen} has shape {want}; give "
            f"the checkpoint of a policy trained on the {seen}'s env (and env_kwargs){other}")
    bounds, ours = facts["action_bounds"], [list(hparams["action_low"]), list(hparams["action_high"])]
    if bounds is not None and [list(b) for b in bounds] != ours:
        raise UserInputError(
            f"model.teacher {path} acts in [{bounds[0]}, {bounds[1]}], this env in [{ours[0]}, {ours[1]}]; "
            "give a teacher with the same action space (action_mode)")
    return where


def load_teacher(path: str, module: Any) -> torch.nn.Module:
    """The frozen policy of the checkpoint ``path`` (its actor, or its policy checkpoint) (:func:`check_teacher` against
    ``module``'s hyperparameters)."""
    where = check_teacher(path, module.hparams)
    teacher = type(module).load_from_checkpoint(where, map_location="cpu")
    return teacher.policy.requires_grad_(False).eval()
