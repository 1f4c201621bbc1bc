"""Replay-batch transforms applied before the update: n-step returns and DrQ's random shifts."""

from __future__ import annotations

import torch
from torch import Tensor

from td3_lightning.extensions.base import BatchTransform
from td3_lightning.normalization import ObservationNormalizer


class NStepReturn(BatchTransform):
    """n-step batches (``data.n_step``: ``reward`` ``(B, n)``, zero past each transition's last
    step, and ``horizon`` ``m``) to one reward ``r_0 + gamma r_1 + ... + gamma^(m-1) r_(m-1)`` and
    the bootstrap's ``discount`` ``gamma^m``. One-step batches pass unchanged."""

    def __init__(self, gamma: float) -> None:
        self.gamma = gamma

    def __call__(self, batch: dict[str, Tensor], generator: torch.Generator | None = None) -> dict[str, Tensor]:
        if "horizon" not in batch:
            return batch
        reward = batch["reward"]
        powers = torch.arange(reward.shape[1], device=reward.device, dtype=reward.dtype)
        out = {k: v for k, v in batch.items() if k != "horizon"}
        out["reward"], out["discount"] = (reward * self.gamma**powers).sum(dim=1), self.gamma ** batch["horizon"]
        return out


class ObservationStatistics(BatchTransform):
    """Merges every replay batch's observations into the running statistics of the observation
    normaliser (``model.normalize_obs``) that actor, critics and targets share; the batch passes unchanged."""

    def __init__(self, normalizer: ObservationNormalizer) -> None:
        self.normalizer = normalizer

    def __call__(self, batch: dict[str, Tensor], generator: torch.Generator | None = None) -> dict[str, Tensor]:
        self.normalizer.update(batch["obs"])
        return batch


class RandomShift(BatchTransform):
    """DrQ's augmentation (``model.random_shift``) of every image observation of the batch,
    independently for ``obs`` and ``next_obs``."""

    def __init__(self, pad: int) -> None:
        self.pad = int(pad)

    def __call__(self, batch: dict[str, Tensor], generator: torch.Generator | None = None) -> dict[str, Tensor]:
        out = dict(batch)
        for key in ("obs", "next_obs"):
            if batch[key].dim() == 4:
                out[key] = random_shift(batch[key], self.pad, generator)
        return out


def random_shift(images: Tensor, pad: int, generator: torch.Generator | None = None) -> Tensor:
    """Each image ``(C, H, W)`` of the batch padded by ``pad`` pixels (edges repeated) and cropped
    back to ``H x W`` at a random offset in ``[0, 2 * pad]`` per axis; the dtype is kept."""
    n, c, h, w = images.shape
    device = images.device
    padded = torch.nn.functional.pad(images.float(), (pad, pad, pad, pad), mode="replicate")
    dx, dy = torch.randint(0, 2 * pad + 1, (2, n, 1), generator=generator, device=device)
    rows = (torch.arange(h, device=device) + dy)[:, None, :, None]  # (n, 1, h, 1)
    cols = (torch.arange(w, device=device) + dx)[:, None, None, :]  # (n, 1, 1, w)
    batch = torch.arange(n, device=device)[:, None, None, None]
    channel = torch.arange(c, device=device)[None, :, None, None]
    return padded[batch, channel, rows, cols].to(images.dtype)
