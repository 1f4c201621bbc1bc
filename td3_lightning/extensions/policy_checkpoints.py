"""TD7's policy checkpoints (``model.policy_checkpoints``): validation, test, export and the shipped drivers use
the policy whose worst training episode was the best so far, not the latest weights.

Training alternates assessments and catch-up. An assessment drives whole episodes with the current actor (and
its exploration noise) while no update runs; then the updates owed for those transitions run, as many as without
the option. When an assessment ends, the assessed policy becomes the checkpoint if its worst episode is at least
the checkpoint's; an episode below the checkpoint's ends the assessment at once, without a checkpoint. Up to
``checkpoint_after`` training steps an assessment is one episode, from there on ``checkpoint_episodes`` episodes,
and the bar drops once to :data:`LATE_BAR` of the best (TD7: 20 episodes from 750,000 steps).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from td3_lightning.distributed import one_process_only
from td3_lightning.errors import UserInputError

#: the checkpoint's return is multiplied by this once, when assessments grow to ``checkpoint_episodes`` (TD7's)
LATE_BAR = 0.9


class PolicyCheckpoint(nn.Module):
    """A frozen copy of the actor (normaliser and SALE encoder included) and the worst return it was assessed on.

    :meth:`episode_end` takes each training episode's return; :attr:`assessing` says whether the assessment in
    progress needs another episode before the next update. The copy and the bar are in checkpoints; between
    assessments (where checkpoints are written) nothing else is pending."""

    def __init__(self, actor: nn.Module, episodes: int, after: int) -> None:
        super().__init__()
        self.actor = copy.deepcopy(actor).requires_grad_(False).eval()
        self.episodes, self.after = episodes, after
        # the checkpoint's worst return; the lowest finite number at first, so the first assessment is kept
        self.register_buffer("best", torch.tensor(torch.finfo(torch.float64).min, dtype=torch.float64))
        self.register_buffer("late", torch.tensor(False))  # assessments of `episodes` episodes from now on
        self.register_buffer("taken", torch.zeros((), dtype=torch.int64))  # checkpoints taken
        self._worst, self._assessed = math.inf, 0  # of the assessment in progress

    @property
    def assessing(self) -> bool:
        """An assessment is in progress: it needs at least one more episode of the same policy."""
        return self._assessed > 0

    def train(self, mode: bool = True) -> PolicyCheckpoint:
        super().train(mode)
        self.actor.eval()  # the checkpoint only acts
        return self

    @torch.no_grad()
    def episode_end(self, episode_return: float, actor: nn.Module, step: int) -> None:
        """A training episode of ``actor`` ended after ``step`` training steps: take it into the assessment."""
        if step >= self.after and not bool(self.late):
            self.late.fill_(True)
            self.best.mul_(LATE_BAR)
        self._assessed += 1
        self._worst = min(self._worst, float(episode_return))
        if self._worst < float(self.best):  # worse than the checkpoint: stop assessing, train
            self._close()
        elif self._assessed >= (self.episodes if bool(self.late) else 1):
            self.best.fill_(self._worst)
            self.actor.load_state_dict(actor.state_dict())
            self.taken += 1
            self._close()

    def _close(self) -> None:
        self._worst, self._assessed = math.inf, 0

    def metrics(self) -> dict[str, float]:
        """Logged with each training episode."""
        return {"train/checkpoint_return": float(self.best), "train/checkpoints": float(self.taken)}


def policy_version(module: Any) -> int | None:
    """Which policy ``module.policy`` is: the number of policy checkpoints taken (one frozen policy validates alike
    until the next is taken), or None without them (the policy changes with every update)."""
    checkpoint = getattr(module, "policy_checkpoint", None)
    return None if checkpoint is None else int(checkpoint.taken)


def policy_checkpoint(actor: nn.Module, hp: Mapping[str, Any]) -> PolicyCheckpoint | None:
    """The checkpoint of ``actor`` that the module's hyperparameters ``hp`` ask for (None without the option)."""
    if not hp.get("policy_checkpoints"):
        return None
    return PolicyCheckpoint(actor, hp["checkpoint_episodes"], hp["checkpoint_after"])


def check_policy_checkpoint_options(model: Mapping[str, Any], data: Mapping[str, Any] | None = None,
                                    devices: int = 1, resumed: bool = False) -> None:
    """One :class:`UserInputError` line for what ``model.policy_checkpoints`` cannot assess: several envs or
    processes (an assessment follows the episodes of one env). A ``resumed`` run keeps the option: only the
    other fix is told."""
    if not model.get("policy_checkpoints"):
        return
    other = ", as its checkpoint was trained" if resumed else ", or model.policy_checkpoints false"
    num_envs = (data or {}).get("num_envs") or 1
    if num_envs != 1:
        raise UserInputError(f"model.policy_checkpoints assesses the episodes of one env (data.num_envs {num_envs}): "
                             f"set data.num_envs 1{other}")
    one_process_only("policy_checkpoints", "assesses the episodes of one process", devices, resumed)
