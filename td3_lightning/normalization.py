"""Observation normalisation from running statistics, part of the policy (``model.normalize_obs``)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn


class ObservationNormalizer(nn.Module):
    """``clip((obs - mean) / sqrt(var + eps), -clip, clip)`` with the running mean and variance of the
    observations it was :meth:`update`-d with (buffers: saved in checkpoints, traced into exports).

    Before any update it passes observations through unchanged (mean 0, variance 1).
    """

    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(self, dim: int, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.clip, self.eps = float(clip), float(eps)
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    def forward(self, obs: Tensor) -> Tensor:
        return ((obs.float() - self.mean) / torch.sqrt(self.var + self.eps)).clamp(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, obs: Tensor) -> None:
        """Merge the moments of the observations ``obs`` ``(B, dim)`` into the running ones (under
        ``torch.distributed``, of every rank's ``obs``, so all ranks keep the same statistics)."""
        shifted = obs.float().reshape(-1, self.mean.numel()) - self.mean  # about the running mean: no cancellation
        moments = torch.cat([shifted.sum(0), shifted.pow(2).sum(0), shifted.new_tensor([shifted.shape[0]])])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(moments)
        d, n = self.mean.numel(), moments[-1]
        delta = moments[:d] / n  # the batch mean minus the running mean
        batch_var = (moments[d: 2 * d] / n - delta.pow(2)).clamp(min=0)
        old = (self.count / (self.count + n.double())).float()  # the running statistics' share
        self.var.copy_(old * self.var + (1 - old) * batch_var + old * (1 - old) * delta.pow(2))
        self.mean.add_((1 - old) * delta)
        self.count.add_(n.double())
