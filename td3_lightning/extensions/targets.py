"""How the target networks follow their networks: one strategy per run.

- :class:`PolyakAveraging` (TD3): after every actor update, ``theta' <- (1 - tau) theta' + tau theta`` (and so the
  running statistics of batch renormalisation).
- :class:`HardTargetCopies` (TD7, ``model.target_update_every``): every N training steps the targets become copies
  of their networks, and what reads the targets' era refreshes with them: SALE's fixed encoder takes the trained
  encoder's weights, value clipping takes the bounds of the targets seen.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from td3_lightning.batch_renorm import running_statistics
from td3_lightning.embeddings import FixedEncoder, SALEEncoder
from td3_lightning.extensions.base import StepHook


class TargetSync(StepHook):
    """A step hook (:meth:`before_step`, for syncs at given steps) that is also called after each actor update."""

    def before_step(self, module: Any, step: int) -> None:
        """Before training step ``step``: nothing by default."""

    def after_actor_update(self, module: Any) -> None:
        """After each actor update (the paper's place for the target update): nothing by default."""


class PolyakAveraging(TargetSync):
    """``theta' <- (1 - tau) theta' + tau theta`` of the actor's and the critics' targets after each actor update."""

    def __init__(self, tau: float) -> None:
        self.tau = float(tau)

    @torch.no_grad()
    def after_actor_update(self, module: Any) -> None:
        online = [*module.actor.parameters(), *module.critic.parameters()]
        target = [*module.actor_target.parameters(), *module.critic_target.parameters()]
        online += running_statistics(module.actor, module.critic)  # batch renormalisation's, averaged alike
        target += running_statistics(module.actor_target, module.critic_target)
        torch._foreach_lerp_(target, online, self.tau)


class HardTargetCopies(TargetSync):
    """Every ``every`` training steps: the targets become copies of their networks, then the fixed
    encoder (if any) takes the trained encoder's weights and the value bounds the targets seen (TD7's order)."""

    def __init__(self, every: int, fixed: FixedEncoder | None = None, encoder: SALEEncoder | None = None,
                 target_value: Any = None) -> None:
        self.every, self.fixed, self.encoder, self.target_value = int(every), fixed, encoder, target_value

    def on_train_start(self, module: Any) -> None:
        max_steps = module.trainer.max_steps
        if max_steps is not None and 0 < max_steps <= self.every and module.trainer.global_step < self.every:
            rank_zero_warn(f"model.target_update_every {self.every} is at or after trainer.max_steps ({max_steps}): "
                           "the targets (and the fixed encoder) never take the trained weights; set it below "
                           "max_steps (TD7: 250)")

    def before_step(self, module: Any, step: int) -> None:
        if step == 0 or step % self.every:
            return
        with torch.no_grad():
            for target, online in ((module.actor_target, module.actor), (module.critic_target, module.critic)):
                for t, o in zip([*target.parameters(), *running_statistics(target)],
                                [*online.parameters(), *running_statistics(online)]):
                    t.copy_(o)
        if self.fixed is not None and self.encoder is not None:
            self.fixed.refresh(self.encoder)
        if self.target_value is not None:  # value clipping: the targets seen so far bound the next ones
            self.target_value.refresh()
