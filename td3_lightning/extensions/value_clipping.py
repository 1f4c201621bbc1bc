"""TD7's value clipping (``model.value_clipping``): the next state's value in the critics' target is clamped to
the range of the targets seen before the last hard target update.

``y = r + gamma * (1 - terminated) * clamp(min_i Q'_i(s', a'), low, high)``, where ``low`` and ``high`` are the
smallest and largest target of the whole run up to the last hard target update (0 and 0 before the first).
It keeps the targets inside what the data supports while the embeddings that feed the critics change.
The bounds are buffers: they are in checkpoints, and a resume continues them exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class TargetValue(nn.Module):
    """``r + discount * next_q``: the target of the critics, without clipping."""

    def forward(self, reward: Tensor, discount: Tensor, next_q: Tensor) -> Tensor:
        return reward + discount * next_q

    def refresh(self) -> None:
        """At a hard target update (nothing to do without clipping)."""


class ClippedTargetValue(TargetValue):
    """``r + discount * clamp(next_q, low, high)``, recording the smallest and largest target it returns;
    :meth:`refresh` (at each hard target update) makes them the new bounds."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("low", torch.zeros(()))
        self.register_buffer("high", torch.zeros(()))
        # nothing seen yet: an empty range (finite, as the weights' guard wants every float buffer)
        self.register_buffer("seen_low", torch.tensor(torch.finfo(torch.float32).max))
        self.register_buffer("seen_high", torch.tensor(torch.finfo(torch.float32).min))

    @torch.no_grad()
    def forward(self, reward: Tensor, discount: Tensor, next_q: Tensor) -> Tensor:
        target = reward + discount * next_q.clamp(self.low, self.high)
        torch.minimum(self.seen_low, target.min(), out=self.seen_low)  # on the device: no host sync
        torch.maximum(self.seen_high, target.max(), out=self.seen_high)
        return target

    @torch.no_grad()
    def refresh(self) -> None:
        seen = self.seen_low <= self.seen_high  # no target yet: the bounds stay (no host sync either way)
        self.low.copy_(torch.where(seen, self.seen_low, self.low))
        self.high.copy_(torch.where(seen, self.seen_high, self.high))
