"""A distributional critic head (``model.critic_bins``): HL-Gauss (Imani and White, 2018; Farebrother et al., 2024,
"Stop Regressing: Training Value Functions via Classification for Scalable Deep RL").

Each critic outputs logits over ``bins`` equal bins of ``[low, high]``; its Q is the expectation of the bins'
centres under the softmax. It learns by cross-entropy against the TD target ``y`` spread over the bins as a
Gaussian of standard deviation :data:`SIGMA_PER_BIN` bin widths (``y`` clamped into the range first). The target
stays TD3's scalar ``r + gamma * min_i Q'_i(s', a')``; only the regression becomes a classification.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

#: the Gaussian's standard deviation in bin widths (the value the HL-Gauss paper recommends)
SIGMA_PER_BIN = 0.75


class ValueHistogram(nn.Module):
    """The bins of a distributional critic: logits ``(..., bins)`` to Q values, and the loss against targets.

    Args:
        bins: number of bins (>= 2).
        low: the lower end of the first bin.
        high: the upper end of the last bin.
    """

    def __init__(self, bins: int, low: float, high: float) -> None:
        super().__init__()
        self.bins, self.low, self.high = int(bins), float(low), float(high)
        edges = torch.linspace(self.low, self.high, self.bins + 1, dtype=torch.float64)
        # derived from the options: not saved in checkpoints
        self.register_buffer("edges", edges.float(), persistent=False)
        self.register_buffer("centers", ((edges[:-1] + edges[1:]) / 2).float(), persistent=False)
        self.sigma = SIGMA_PER_BIN * (self.high - self.low) / self.bins

    def expectation(self, logits: Tensor) -> Tensor:
        """``sum_k softmax(logits)_k c_k``: the Q value of logits ``(..., bins)`` -> ``(...)``."""
        return (torch.softmax(logits.float(), dim=-1) * self.centers).sum(dim=-1)  # float32 under autocast too

    def target_probs(self, y: Tensor) -> Tensor:
        """The probability of each bin under a Gaussian at ``y`` (clamped into the range) of standard deviation
        :attr:`sigma`, truncated to the range and renormalised: ``(...)`` -> ``(..., bins)``."""
        y = y.clamp(self.low, self.high).unsqueeze(-1)
        cdf = torch.special.ndtr((self.edges - y) / self.sigma)
        return (cdf[..., 1:] - cdf[..., :-1]) / (cdf[..., -1:] - cdf[..., :1])

    def loss(self, logits: Tensor, y: Tensor) -> Tensor:
        """Cross-entropy of each critic's logits ``(critics, batch, bins)`` against ``y`` ``(batch,)``'s
        histogram, averaged over the batch and summed over the critics (as TD3's squared errors are)."""
        target = self.target_probs(y.detach())
        return -(target * F.log_softmax(logits.float(), dim=-1)).sum(dim=-1).mean(dim=-1).sum()

    def extra_repr(self) -> str:
        return f"bins={self.bins}, low={self.low}, high={self.high}, sigma={self.sigma:g}"
