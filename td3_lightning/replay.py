"""A circular replay buffer of preallocated tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

FIELDS = ("obs", "action", "reward", "next_obs", "terminated")


class ReplayBuffer:
    """Fixed-capacity circular storage of ``(obs, action, reward, next_obs, terminated)``.

    Every field is one preallocated tensor on ``device``; observations keep their dtype
    (``uint8`` frames stay ``uint8``), actions and rewards are ``float32`` and
    ``terminated`` is ``bool``. Only ``terminated`` is stored: a time-limit truncation
    is not the end of the task, so its transition keeps bootstrapping.

    Args:
        capacity: maximum number of transitions; the oldest are overwritten first.
        obs_shape: shape of one observation.
        action_dim: length of one action.
        obs_dtype: dtype of the stored observations.
        device: where the tensors live (the training device makes sampling copy-free).
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: Sequence[int],
        action_dim: int,
        obs_dtype: torch.dtype | np.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        if capacity < 1:
            raise ValueError(f"buffer capacity must be at least 1, got {capacity}")
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.obs_shape = tuple(obs_shape)
        self.action_dim = int(action_dim)
        if not isinstance(obs_dtype, torch.dtype):  # a numpy dtype, e.g. from a gymnasium space
            obs_dtype = torch.from_numpy(np.zeros(0, dtype=obs_dtype)).dtype
        self.obs = torch.zeros((capacity, *self.obs_shape), dtype=obs_dtype, device=self.device)
        self.next_obs = torch.zeros_like(self.obs)
        self.action = torch.zeros((capacity, self.action_dim), dtype=torch.float32, device=self.device)
        self.reward = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self.terminated = torch.zeros(capacity, dtype=torch.bool, device=self.device)
        self.pos = 0  # next slot to write
        self.size = 0  # filled slots

    def __len__(self) -> int:
        return self.size

    @property
    def bytes_per_transition(self) -> int:
        """Storage of one transition, summed over the fields."""
        return sum(getattr(self, f)[0].numel() * getattr(self, f).element_size() for f in FIELDS)

    def add(self, obs: Any, action: Any, reward: float, next_obs: Any, terminated: bool) -> None:
        """Write one transition into the next slot."""
        self.add_batch([obs], [action], [reward], [next_obs], [terminated])

    def add_batch(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any) -> None:
        """Write ``n`` transitions (leading dimension ``n``) into the next ``n`` slots."""
        n = len(reward)
        if n > self.capacity:
            raise ValueError(f"cannot add {n} transitions at once to a buffer of capacity {self.capacity}")
        idx = (torch.arange(n) + self.pos) % self.capacity
        idx = idx.to(self.device)
        self.obs[idx] = torch.as_tensor(np.asarray(obs), device=self.device, dtype=self.obs.dtype)
        self.action[idx] = torch.as_tensor(np.asarray(action), device=self.device, dtype=torch.float32)
        self.reward[idx] = torch.as_tensor(np.asarray(reward), device=self.device, dtype=torch.float32)
        self.next_obs[idx] = torch.as_tensor(np.asarray(next_obs), device=self.device, dtype=self.obs.dtype)
        self.terminated[idx] = torch.as_tensor(np.asarray(terminated), device=self.device, dtype=torch.bool)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement from the filled slots."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        idx = torch.randint(self.size, (batch_size,), generator=generator, device=self._gen_device(generator))
        return self.gather(idx.to(self.device))

    def gather(self, idx: Tensor) -> dict[str, Tensor]:
        """The transitions at ``idx`` as a dict of tensors."""
        return {f: getattr(self, f)[idx] for f in FIELDS}

    @staticmethod
    def _gen_device(generator: torch.Generator | None) -> torch.device | None:
        return generator.device if generator is not None else None

    def state_dict(self) -> dict[str, Any]:
        """The filled part of the storage plus the write position (CPU tensors)."""
        n = self.size
        state: dict[str, Any] = {"capacity": self.capacity, "pos": self.pos, "size": n}
        for f in FIELDS:
            # clone: a slice would serialise the whole preallocated storage
            state[f] = getattr(self, f)[:n].to("cpu", copy=True)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore contents saved by :meth:`state_dict` (the capacity must match)."""
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"replay buffer capacity mismatch: checkpoint has {state['capacity']}, this run has "
                f"{self.capacity}; set data.buffer_size to {state['capacity']}"
            )
        n = int(state["size"])
        for f in FIELDS:
            src = state[f]
            dst = getattr(self, f)
            if tuple(src.shape[1:]) != tuple(dst.shape[1:]):
                raise ValueError(
                    f"replay buffer field '{f}' has shape {tuple(src.shape[1:])} in the checkpoint but "
                    f"{tuple(dst.shape[1:])} in this run: the checkpoint belongs to another environment"
                )
            dst[:n] = src.to(self.device, dst.dtype)
        self.pos, self.size = int(state["pos"]), n
