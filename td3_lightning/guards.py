"""The non-finite guard: training stops at the first NaN or infinity in a loss or a weight.

On the CPU every loss is checked before its backward pass (a host sync there is nearly free),
so the weights never become non-finite. On an accelerator a per-step check would cost a host
sync, so the step of the first non-finite loss is recorded on the device and checked at the
points where a sync happens anyway (logging, validation, test, checkpoints, acting).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from td3_lightning.errors import NonFiniteError

LOSS_NAMES = ("critic loss", "actor loss", "auxiliary loss")  # by optimizer index (stepping.CRITIC, ...)
_LR_OPTIONS = ("model.critic_lr", "model.actor_lr", "model.embedding_lr")


def loss_message(slot: int, step: int, value: float, action: str = "") -> str:
    """The one-line error for a non-finite loss (``slot`` 0: critic, 1: actor, 2 and up: auxiliary)."""
    slot = min(slot, len(LOSS_NAMES) - 1)
    return (
        f"non-finite {LOSS_NAMES[slot]} ({value}) at training step {step}{action}; "
        f"try a lower {_LR_OPTIONS[slot]} or check the scale of the rewards and observations"
    )


class LossGuard:
    """Finds the first non-finite critic or actor loss, at once or deferred."""

    def __init__(self) -> None:
        self._steps: Tensor | None = None  # (critic, actor): training step of the first non-finite loss, or -1
        self._values: Tensor | None = None  # (critic, actor): that loss

    def check_now(self, slot: int, loss: Tensor, step: int) -> None:
        """Raise :class:`NonFiniteError` if ``loss`` is not finite (one host sync)."""
        value = loss.item()
        if not math.isfinite(value):
            raise NonFiniteError(loss_message(slot, step, value))

    def record(self, slot: int, loss: Tensor, step: int) -> None:
        """Remember ``step`` on the device if ``loss`` is the first non-finite one (no host sync)."""
        if self._steps is None or self._values is None or self._steps.device != loss.device:
            self._steps = torch.full((len(LOSS_NAMES),), -1, dtype=torch.long, device=loss.device)
            self._values = torch.zeros(len(LOSS_NAMES), dtype=torch.float32, device=loss.device)
        slot = min(slot, len(LOSS_NAMES) - 1)
        hit = (self._steps[slot] < 0) & ~torch.isfinite(loss)
        self._steps[slot] = torch.where(hit, step, self._steps[slot])
        self._values[slot] = torch.where(hit, loss.detach().float(), self._values[slot])

    def raise_recorded(self, action: str = "") -> None:
        """Raise :class:`NonFiniteError` for the first recorded non-finite loss, if any (one host sync)."""
        if self._steps is None or self._values is None:
            return
        for slot, step in enumerate(self._steps.tolist()):
            if step >= 0:
                raise NonFiniteError(loss_message(slot, step, float(self._values[slot]), action))


def check_finite_weights(state_dict: dict[str, Tensor], step: int, action: str = "") -> None:
    """Raise :class:`NonFiniteError` naming the first non-finite floating-point tensor (one host sync)."""
    tensors = {k: v for k, v in state_dict.items() if isinstance(v, Tensor) and v.is_floating_point()}
    if not tensors:
        return
    finite = torch.stack([torch.isfinite(v).all() for v in tensors.values()]).tolist()
    if not all(finite):
        name = next(k for k, ok in zip(tensors, finite) if not ok)
        raise NonFiniteError(f"non-finite weights in {name} at training step {step}{action}")
