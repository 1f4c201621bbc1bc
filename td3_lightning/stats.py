"""Training statistics kept on the device and logged as means every ``log_every_n_steps``.

A ``.item()`` per training step would cost a host sync per step on an accelerator; instead
the losses are kept as device tensors, folded into running sums every 256 steps, and read
once per logging interval.
"""

from __future__ import annotations

import torch
from torch import Tensor

_FOLD_EVERY = 256


class TrainingStatistics:
    """Means of the critic loss, the first critic's Q and the actor loss since the last :meth:`means`.

    Args:
        copy_outputs: keep copies of the tensors handed in, not views: needed when they are the
            outputs of a CUDA graph, which its next replay overwrites.
    """

    def __init__(self, copy_outputs: bool = False) -> None:
        self.copy_outputs = copy_outputs
        self._hist: tuple[list[Tensor], list[Tensor], list[Tensor]] = ([], [], [])  # critic loss, Q1, actor loss
        self._sums: Tensor | None = None
        self._counts = [0, 0, 0]
        self._terms: dict[str, tuple[Tensor, int]] = {}  # name -> (running sum on the device, count)

    def add(self, critic_loss: Tensor, q1: Tensor, actor_loss: Tensor | None) -> None:
        keep = (lambda t: t.detach().clone()) if self.copy_outputs else Tensor.detach
        critic_losses, q1s, actor_losses = self._hist
        critic_losses.append(keep(critic_loss))
        q1s.append(keep(q1))
        if actor_loss is not None:
            actor_losses.append(keep(actor_loss))
        if len(critic_losses) >= _FOLD_EVERY:
            self._fold()

    def add_terms(self, values: dict[str, Tensor]) -> None:
        """Scalar parts of a loss by name (logged as ``train/<name>``), summed on the device."""
        for name, value in values.items():
            total, count = self._terms.get(name, (None, 0))
            value = value.detach()
            self._terms[name] = (value.clone() if total is None else total + value, count + 1)

    def means(self) -> dict[str, Tensor]:
        """``train/critic_loss``, ``train/q``, (if the actor was updated) ``train/actor_loss`` and the
        loss terms added since the last call; then start afresh."""
        sums, counts = self._fold(), self._counts
        means = {"train/critic_loss": sums[0] / counts[0], "train/q": sums[1] / counts[1]}
        if counts[2]:
            means["train/actor_loss"] = sums[2] / counts[2]
        means.update({f"train/{name}": total / count for name, (total, count) in self._terms.items()})
        self._sums, self._counts, self._terms = None, [0, 0, 0], {}
        return means

    def _fold(self) -> Tensor:
        """Add the histories to the running sums (a few kernels) and return them."""
        hist, counts = self._hist, self._counts
        if self._sums is None:
            device = next((h[0].device for h in hist if h), torch.device("cpu"))
            self._sums = torch.zeros(3, device=device)
        parts = [torch.stack(hist[0]).sum() if hist[0] else None, torch.cat(hist[1]).sum() if hist[1] else None,
                 torch.stack(hist[2]).sum() if hist[2] else None]
        for i, part in enumerate(parts):
            if part is not None:
                self._sums[i] += part
        counts[0] += len(hist[0])
        counts[1] += sum(x.numel() for x in hist[1])
        counts[2] += len(hist[2])
        for h in hist:
            h.clear()
        return self._sums
