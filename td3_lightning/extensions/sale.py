"""SALE's encoder training (``model.embedding_dim``): the encoder learns to predict the next state's embedding on
every replay batch; at each hard target update (``extensions/targets.py``) the fixed encoder that actor and critics
read takes its weights."""

from __future__ import annotations

from torch import Tensor

from td3_lightning.embeddings import SALEEncoder
from td3_lightning.extensions.base import AuxiliaryLoss
from td3_lightning.networks import ActionRescale
from td3_lightning.normalization import ObservationNormalizer


class SALETraining(AuxiliaryLoss):
    """``mean (g(f(s), a) - f(s'))^2`` of the trained encoder, logged as ``train/embedding_loss``."""

    name = "embedding_loss"

    def __init__(self, encoder: SALEEncoder, lr: float, normalizer: ObservationNormalizer | None = None,
                 action_rescale: ActionRescale | None = None) -> None:
        super().__init__(lr)
        self.encoder = encoder
        self._normalizer = (normalizer,) if normalizer is not None else ()  # the actor's; not saved twice
        self.action_rescale = action_rescale  # the critics' (normalize_actions): g reads the actions they read

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        obs, next_obs = batch["obs"], batch["next_obs"]
        if self._normalizer:  # the encoder reads what actor and critics read
            obs, next_obs = self._normalizer[0](obs), self._normalizer[0](next_obs)
        action = batch["action"] if self.action_rescale is None else self.action_rescale(batch["action"])
        return self.encoder.loss(obs, action, next_obs)
