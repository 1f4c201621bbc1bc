"""Teacher distillation (``model.teacher``): the actor's action pulled toward a frozen teacher's
action on the privileged observation of the same replayed step."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from td3_lightning import checkpointing
from td3_lightning.errors import UserInputError
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


def load_teacher(path: str, module: Any) -> torch.nn.Module:
    """The frozen actor of the checkpoint ``path``, checked against the privileged observation and
    the action bounds of ``module``; a relative path is also looked up beside the installed package."""
    where = Path(path)
    if not where.is_file() and not where.is_absolute():
        beside_package = Path(str(files("td3_lightning"))).parent / where
        where = beside_package if beside_package.is_file() else where
    if not where.is_file():
        raise UserInputError(f"model.teacher: checkpoint file not found: {path}; pass an existing .ckpt file")
    checkpointing.check_checkpoint(where, "model.teacher", "model.teacher takes a .ckpt file that td3_lightning wrote")
    hparams = module.hparams
    teacher = type(module).load_from_checkpoint(where, map_location="cpu")
    shape, want = list(teacher.hparams.obs_shape), list(hparams.critic_obs_shape or [])
    if shape != want:
        raise UserInputError(
            f"model.teacher {path} reads observations of shape {shape}, but the privileged observation has "
            f"shape {want}; give the checkpoint of a policy trained on the privileged observation's env")
    if [list(teacher.hparams.action_low), list(teacher.hparams.action_high)] != [
            list(hparams.action_low), list(hparams.action_high)]:
        raise UserInputError(
            f"model.teacher {path} acts in [{teacher.hparams.action_low}, {teacher.hparams.action_high}], this env in "
            f"[{hparams.action_low}, {hparams.action_high}]; give a teacher with the same action space (action_mode)")
    return teacher.actor.requires_grad_(False).eval()
