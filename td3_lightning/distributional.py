"""A distributional critic head (``model.critic_bins``): HL-Gauss (Imani and White, 2018; Farebrother et al., 2024,
"Stop Regressing: Training Value Functions via Classification for Scalable Deep RL").

Each critic outputs logits over ``bins`` equal bins of ``[low, high]``; its Q is the expectation of the bins'
centres under the softmax. It learns by cross-entropy against the TD target ``y`` spread over the bins as a
Gaussian of standard deviation :data:`SIGMA_PER_BIN` bin widths (``y`` clamped into the range first). The target
stays TD3's scalar ``r + gamma * min_i Q'_i(s', a')``; only the regression becomes a classification.

A target beyond the range counts as its end, so a range too small caps the critics' values silently: the update
records the share of targets outside it (``train/targets_outside_range``), and fit warns once when that share,
averaged over a logging interval, passes :data:`OUTSIDE_WARNING`.

With ``critic_range auto`` the range follows the rewards instead: every batch widens it to hold ``r / (1 - d)`` of
each transition (``d`` its bootstrap discount, 0 where terminated) and 0. A Q inside that range and a reward inside
it keep every TD target ``r + d Q'`` inside it, so no target falls outside; the range is the module's state, saved in
checkpoints and kept by network resets.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from torch.nn import functional as F

#: the Gaussian's standard deviation in bin widths (the value the HL-Gauss paper recommends)
SIGMA_PER_BIN = 0.75
#: the logged term: the share of a batch's TD targets outside the range
OUTSIDE = "targets_outside_range"
#: fit warns once when more than this share of the targets over a logging interval fell outside the range
OUTSIDE_WARNING = 0.01
#: the logged terms of an automatic range: its ends
RANGE_LOW, RANGE_HIGH = "critic_range_low", "critic_range_high"
#: where an automatic range starts, before the first batch widens it
AUTO_START = (-1.0, 1.0)


class ValueHistogram(nn.Module):
    """The bins of a distributional critic: logits ``(..., bins)`` to Q values, and the loss against targets.

    Args:
        bins: number of bins (>= 2).
        low: the lower end of the first bin (None: an automatic range, :meth:`observe`).
        high: the upper end of the last bin (None with ``low``).
    """

    def __init__(self, bins: int, low: float | None = None, high: float | None = None) -> None:
        super().__init__()
        if (low is None) != (high is None):
            raise ValueError("a value range needs both ends, or neither (an automatic range)")
        self.bins, self.auto = int(bins), low is None
        unit = torch.linspace(0.0, 1.0, self.bins + 1, dtype=torch.float64)
        self.warned = False  # watch_range's one warning
        if self.auto:  # state, saved in checkpoints: the bins follow it (grid)
            self.low = self.high = self.sigma = None
            self.register_buffer("bounds", torch.tensor(AUTO_START))
            self.register_buffer("unit", unit.float(), persistent=False)
            return
        # derived from the options: not saved in checkpoints
        self.low, self.high = float(low), float(high)
        edges = self.low + (self.high - self.low) * unit
        self.register_buffer("edges", edges.float(), persistent=False)
        self.register_buffer("centers", ((edges[:-1] + edges[1:]) / 2).float(), persistent=False)
        self.sigma = SIGMA_PER_BIN * (self.high - self.low) / self.bins

    def ends(self) -> tuple[Tensor | float, Tensor | float]:
        """``(low, high)``: an automatic range's as tensors (no host read), a fixed range's as numbers."""
        return (self.bounds[0], self.bounds[1]) if self.auto else (self.low, self.high)

    def grid(self) -> tuple[Tensor, Tensor, Tensor | float]:
        """The bins' edges ``(bins + 1,)``, their centres ``(bins,)`` and the Gaussian's standard deviation."""
        if not self.auto:
            return self.edges, self.centers, self.sigma
        low, high = self.ends()
        edges = torch.lerp(low, high, self.unit)  # exact at both ends
        return edges, (edges[:-1] + edges[1:]) / 2, SIGMA_PER_BIN * (high - low) / self.bins

    @torch.no_grad()
    def observe(self, reward: Tensor, discount: Tensor, reduce: Callable[[Tensor], Tensor] | None = None) -> None:
        """An automatic range widens to hold ``reward / (1 - discount)`` of every transition of a batch (``discount``
        its bootstrap factor, below 1); ``reduce`` takes the maximum over processes. A fixed range stays."""
        if not self.auto:
            return
        limit = reward.float() / (1.0 - discount.float())
        low, high = torch.minimum(self.bounds[0], limit.min()), torch.maximum(self.bounds[1], limit.max())
        if reduce is not None:  # every process takes the widest range of all
            reach = reduce(torch.stack([-low, high]))
            low, high = -reach[0], reach[1]
        self.bounds.copy_(torch.stack([low, high]))

    def range(self) -> tuple[float, float]:
        """The range ``(low, high)`` now (a host read with an automatic range)."""
        return tuple(self.bounds.tolist()) if self.auto else (self.low, self.high)

    def expectation(self, logits: Tensor) -> Tensor:
        """``sum_k softmax(logits)_k c_k``: the Q value of logits ``(..., bins)`` -> ``(...)``."""
        return (torch.softmax(logits.float(), dim=-1) * self.grid()[1]).sum(dim=-1)  # float32 under autocast too

    def target_probs(self, y: Tensor) -> Tensor:
        """The probability of each bin under a Gaussian at ``y`` (clamped into the range) of standard deviation
        :attr:`sigma`, truncated to the range and renormalised: ``(...)`` -> ``(..., bins)``."""
        edges, _, sigma = self.grid()
        y = y.clamp(*self.ends()).unsqueeze(-1)
        cdf = torch.special.ndtr((edges - y) / sigma)
        return (cdf[..., 1:] - cdf[..., :-1]) / (cdf[..., -1:] - cdf[..., :1])

    def outside(self, y: Tensor) -> Tensor:
        """The share of the targets ``y`` below ``low`` or above ``high`` (a scalar tensor)."""
        low, high = self.ends()
        return ((y < low) | (y > high)).float().mean()

    def loss(self, logits: Tensor, y: Tensor, terms: dict[str, Tensor] | None = None) -> Tensor:
        """Cross-entropy of each critic's logits ``(critics, batch, bins)`` against ``y`` ``(batch,)``'s
        histogram, averaged over the batch and summed over the critics (as TD3's squared errors are); the share of
        ``y`` outside the range goes into ``terms`` (as :data:`OUTSIDE`) when given, an automatic range's ends too."""
        if terms is not None:
            terms[OUTSIDE] = self.outside(y.detach())
            if self.auto:
                terms[RANGE_LOW], terms[RANGE_HIGH] = self.bounds[0].clone(), self.bounds[1].clone()
        target = self.target_probs(y.detach())
        return -(target * F.log_softmax(logits.float(), dim=-1)).sum(dim=-1).mean(dim=-1).sum()

    def extra_repr(self) -> str:
        if self.auto:
            return f"bins={self.bins}, range=auto"
        return f"bins={self.bins}, low={self.low}, high={self.high}, sigma={self.sigma:g}"


def watch_range(means: dict[str, Tensor], head: ValueHistogram | None) -> dict[str, Tensor]:
    """The logged ``means`` unchanged, after one warning per run if more than :data:`OUTSIDE_WARNING` of the TD
    targets since the last log fell outside the distributional critics' range (the only host read: at a log)."""
    share = means.get(f"train/{OUTSIDE}")
    if head is None or share is None or head.warned or share.item() <= OUTSIDE_WARNING:
        return means
    head.warned = True
    low, high = head.range()
    rank_zero_warn(f"train/{OUTSIDE}: {share.item():.1%} of the critics' TD targets since the last log fell outside "
                   f"model.critic_range [{low:g}, {high:g}], where they count as its ends and the Q values "
                   "cannot follow them; widen model.critic_range to hold every Q of the run (docs/options.md)")
    return means
