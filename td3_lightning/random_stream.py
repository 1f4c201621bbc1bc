"""The module's own random stream (target-policy noise, image shifts, reset seeds), saved in checkpoints."""

from __future__ import annotations

import torch
from torch import Tensor


class RandomStream:
    """A ``torch.Generator`` on the module's device, seeded from the global stream on first use or
    restored from a checkpoint's state (:meth:`set_state`, applied when it is next used)."""

    def __init__(self) -> None:
        self._gen: torch.Generator | None = None
        self._pending: Tensor | None = None

    def generator(self, device: torch.device) -> torch.Generator:
        if self._gen is None or self._gen.device != device:
            self._gen = torch.Generator(device=device)
            if self._pending is not None:
                self._gen.set_state(self._pending)
                self._pending = None
            else:
                self._gen.manual_seed(int(torch.randint(2**62, (1,)).item()))
        return self._gen

    def standard_normal(self, like: Tensor) -> Tensor:
        """Draws shaped like ``like``, on its device."""
        return torch.randn(like.shape, generator=self.generator(like.device), device=like.device, dtype=torch.float32)

    def get_state(self) -> Tensor | None:
        return self._gen.get_state() if self._gen is not None else None

    def set_state(self, state: Tensor | None) -> None:
        self._gen, self._pending = None, state
