"""The seams: the interfaces through which options beyond the paper reach the TD3 update."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


def critic_view(batch: dict[str, Tensor], next_obs: bool = False) -> Tensor:
    """What the critics see of ``s`` (or of ``s'``): the privileged ``critic_obs`` (``next_critic_obs``)
    where the batch has one (asymmetric actor-critic, ``data.privileged_critic``), else the observation."""
    if next_obs:
        return batch.get("next_critic_obs", batch["next_obs"])
    return batch.get("critic_obs", batch["obs"])


@dataclass(frozen=True)
class ActorView:
    """What an actor-loss term may read: the batch, the actor's encoder features, its output
    before the tanh, the action, and the half action range."""

    batch: dict[str, Tensor]
    features: Tensor
    preactivation: Tensor
    action: Tensor
    action_scale: Tensor

    @property
    def critic_obs(self) -> Tensor:
        return critic_view(self.batch)


class ActorTerm(nn.Module):
    """A term ``weight * value`` of the actor's loss; ``value`` is logged as ``train/<name>``.

    A term with parameters (a prediction head) is trained by the actor's optimizer and saved in
    checkpoints, but is not part of the policy. A weight of 0 logs the value without training on it.
    """

    name: str = ""

    def __init__(self, weight: float) -> None:
        super().__init__()
        self.weight = float(weight)

    def forward(self, view: ActorView) -> Tensor:
        raise NotImplementedError

    def on_fit_start(self, module: Any) -> None:
        """Called when fitting starts with the module (load what the term reads, e.g. a teacher)."""


class ActorTerms(nn.ModuleDict):
    """The actor-loss terms by name; calling them adds each weighted term to the loss -> the loss and each
    term's value by name (logged as ``train/<name>``)."""

    def forward(self, loss: Tensor, view: ActorView) -> tuple[Tensor, dict[str, Tensor]]:
        values = {}
        for term in self.values():
            values[term.name] = value = term(view)
            if term.weight:
                loss = loss + term.weight * value
        return loss, values


class AuxiliaryLoss(nn.Module):
    """A loss with its own parameters and Adam optimizer (learning rate ``lr``), stepped on every replay
    batch before the critic update; logged as ``train/<name>``."""

    name: str = ""

    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = float(lr)

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        raise NotImplementedError


class BatchTransform:
    """Maps a replay batch to the batch the update sees; draws come from ``generator``."""

    def __call__(self, batch: dict[str, Tensor], generator: torch.Generator) -> dict[str, Tensor]:
        raise NotImplementedError


class StepHook:
    """Called before every training step ``step`` (counted from 0) with the module."""

    def on_train_start(self, module: Any) -> None:
        """Called when training starts (warn about a setting that the run's length makes void)."""

    def before_step(self, module: Any, step: int) -> None:
        raise NotImplementedError
