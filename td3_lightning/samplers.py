"""Replay samplers: which slots a replay batch is drawn from.

The buffer draws uniformly by itself. :class:`LAPSampler` draws in proportion to priorities
(LAP, Fujimoto et al., 2020, "An Equivalence between Loss Functions and Non-Uniform Sampling in
Experience Replay", as used by TD7): a batch it hands out carries ``index`` (its slots); the update
returns each transition's ``max_i |Q_i(s, a) - y|``, and the training step hands them to :meth:`LAPSampler.update`
(TD7's ``update_priority``) before the next draw, all on the device: no host sync per step.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

#: the smallest priority before the exponent, LAP's and TD7's ``min_priority``: errors below 1 are sampled as 1
MIN_PRIORITY = 1.0
#: draws between two recomputations of the priority that new transitions get (TD7: every target update, 250 steps)
MAX_RESET_EVERY = 250


class LAPSampler:
    """Draws slots with probability ``p_i / sum p``, ``p_i = max(|delta_i|, 1) ** alpha``.

    New transitions get the largest priority seen (recomputed from the stored priorities every
    :data:`MAX_RESET_EVERY` draws), so each is likely drawn soon after it is stored.

    Args:
        capacity: the buffer's capacity.
        alpha: the exponent of the priorities (0: uniform).
        device: where the priorities live (the buffer's device).
    """

    def __init__(self, capacity: int, alpha: float, device: torch.device | str = "cpu") -> None:
        self.alpha = float(alpha)
        self.priority = torch.zeros(capacity, dtype=torch.float32, device=device)
        self.max_priority = torch.ones((), dtype=torch.float32, device=device)  # on the device: no host sync
        self.draws = 0

    def added(self, slots: Tensor) -> None:
        """New transitions in ``slots`` start at the largest priority."""
        self.priority[slots.to(self.priority.device)] = self.max_priority

    def draw(self, size: int, batch_size: int, generator: torch.Generator | None) -> Tensor:
        """``batch_size`` slots of ``range(size)``, with replacement, in proportion to their priorities."""
        self.draws += 1
        if self.draws % MAX_RESET_EVERY == 0:
            self.max_priority = self.priority[:size].max()
        cumulative = self.cumulative(size)
        device = generator.device if generator is not None else self.priority.device
        u = torch.rand(batch_size, generator=generator, device=device, dtype=torch.float64)
        return torch.searchsorted(cumulative, u.to(self.priority.device) * cumulative[-1], right=True).clamp_(
            max=size - 1)

    def cumulative(self, size: int) -> Tensor:
        """The running sum of the first ``size`` priorities, in float64: slot ``i`` is drawn for a uniform
        point between ``cumulative[i - 1]`` and ``cumulative[i]``. (A float32 sum over a million slots
        rounds each slot's share by several percent.)"""
        return torch.cumsum(self.priority[:size], dim=0, dtype=torch.float64)

    def hand_out(self, batch: dict[str, Tensor], slots: Tensor) -> dict[str, Tensor]:
        """``batch`` with its ``index``: the slots the update's priorities belong to."""
        batch["index"] = slots
        return batch

    def update(self, slots: Tensor, errors: Tensor) -> None:
        """The transitions in ``slots`` take the priorities ``max(errors, 1) ** alpha`` (``errors``: the update's
        ``max_i |Q_i(s, a) - y|``)."""
        priority = errors.clamp(min=MIN_PRIORITY).pow(self.alpha).to(self.priority.device)
        self.priority[slots.to(self.priority.device)] = priority
        self.max_priority = torch.maximum(self.max_priority, priority.max())

    def state_dict(self, size: int) -> dict[str, Any]:
        return {"priority": self.priority[:size].to("cpu", copy=True), "max_priority": float(self.max_priority),
                "draws": self.draws}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = len(state["priority"])
        self.priority[:n] = state["priority"].to(self.priority.device)
        self.max_priority = torch.tensor(float(state["max_priority"]), device=self.priority.device)
        self.draws = int(state["draws"])


def lap_loss(td: Tensor) -> Tensor:
    """LAP's loss for prioritised batches: Huber with threshold :data:`MIN_PRIORITY` of each critic's
    TD error ``td`` ``(num_critics, batch)``, ``0.5 td^2`` below it and ``|td|`` above, summed over the
    critics and averaged over the batch. With sampling in proportion to ``max(|td|, 1)^alpha`` it has
    the expected gradient of the mean squared error under uniform sampling (LAP)."""
    error = td.abs()
    return torch.where(error < MIN_PRIORITY, 0.5 * error.pow(2), MIN_PRIORITY * error).sum(dim=0).mean()
