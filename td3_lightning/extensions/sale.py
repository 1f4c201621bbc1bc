"""SALE's encoder training (``model.embedding_dim``) and the hard target updates of TD7
(``model.target_update_every``): the encoder learns to predict the next state's embedding on every
replay batch; at each target update the fixed encoder that actor and critics read takes its weights."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from td3_lightning.embeddings import FixedEncoder, SALEEncoder
from td3_lightning.extensions.base import AuxiliaryLoss, StepHook
from td3_lightning.normalization import ObservationNormalizer


class SALETraining(AuxiliaryLoss):
    """``mean (g(f(s), a) - f(s'))^2`` of the trained encoder, logged as ``train/embedding_loss``."""

    name = "embedding_loss"

    def __init__(self, encoder: SALEEncoder, lr: float, normalizer: ObservationNormalizer | None = None) -> None:
        super().__init__(lr)
        self.encoder = encoder
        self._normalizer = (normalizer,) if normalizer is not None else ()  # the actor's; not saved twice

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        obs, next_obs = batch["obs"], batch["next_obs"]
        if self._normalizer:  # the encoder reads what actor and critics read
            obs, next_obs = self._normalizer[0](obs), self._normalizer[0](next_obs)
        return self.encoder.loss(obs, batch["action"], next_obs)


class HardTargetUpdates(StepHook):
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
                for t, o in zip(target.parameters(), online.parameters()):
                    t.copy_(o)
        if self.fixed is not None and self.encoder is not None:
            self.fixed.refresh(self.encoder)
        if self.target_value is not None:  # value clipping: the targets seen so far bound the next ones
            self.target_value.refresh()
