"""A circular replay buffer of preallocated tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from td3_lightning.samplers import LAPSampler

FIELDS = ("obs", "action", "reward", "next_obs", "terminated")
#: the privileged observations of a transition, for an asymmetric critic (``critic_obs_shape``)
CRITIC_FIELDS = ("critic_obs", "next_critic_obs")
#: what a buffer's ``check_layout`` reads of a saved state (a checkpoint's inspection keeps these)
LAYOUT_KEYS = ("kind", "capacity", "num_streams", "frame_capacity")
#: the fields an n-step transition takes from its last step
_END_FIELDS = ("next_obs", "terminated", "next_critic_obs")


class _Replay:
    """What both buffers share: ``len``, single adds through ``add_batch``, uniform draws and
    n-step transitions."""

    size: int
    pos: int
    capacity: int
    device: torch.device
    reward: Tensor
    terminated: Tensor
    n_step: int = 1
    num_streams: int = 1

    def __len__(self) -> int:
        return self.size

    critic_obs_shape: tuple[int, ...] | None = None

    def add(self, obs: Any, action: Any, reward: float, next_obs: Any, terminated: bool,
            critic_obs: Any = None, next_critic_obs: Any = None) -> None:
        """Write one transition (as row 0 of a batch of one)."""
        critic = {} if critic_obs is None else {"critic_obs": [critic_obs], "next_critic_obs": [next_critic_obs]}
        self.add_batch([obs], [action], [reward], [next_obs], [terminated], **critic)

    def add_batch(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any,
                  critic_obs: Any = None, next_critic_obs: Any = None) -> None:
        raise NotImplementedError

    def _make_critic_fields(self, critic_obs_shape: Sequence[int] | None) -> None:
        """float32 storage of the privileged observations (``critic_obs``, ``next_critic_obs``)."""
        self.critic_obs_shape = None if critic_obs_shape is None else tuple(int(d) for d in critic_obs_shape)
        if self.critic_obs_shape is not None:
            for f in CRITIC_FIELDS:
                setattr(self, f, torch.zeros((self.capacity, *self.critic_obs_shape), dtype=torch.float32,
                                             device=self.device))

    def _check_critic_args(self, critic_obs: Any, next_critic_obs: Any) -> None:
        if (critic_obs is None) != (self.critic_obs_shape is None) or (critic_obs is None) != (next_critic_obs is None):
            raise ValueError("critic_obs and next_critic_obs are given exactly when the buffer was made with "
                             "critic_obs_shape (a privileged critic)")

    def _critic_state(self, rows: int) -> dict[str, Any]:
        if self.critic_obs_shape is None:
            return {}
        return {f: getattr(self, f)[:rows].to("cpu", copy=True) for f in CRITIC_FIELDS}

    def _load_critic_state(self, state: dict[str, Any], rows: int) -> None:
        if (state.get("critic_obs") is None) != (self.critic_obs_shape is None):
            has = "stores" if state.get("critic_obs") is not None else "does not store"
            raise ValueError(f"the checkpoint's replay buffer {has} privileged critic observations; resume with the "
                             "data.privileged_critic the checkpoint was trained with")
        if self.critic_obs_shape is None:
            return
        for f in CRITIC_FIELDS:
            src, dst = state[f], getattr(self, f)
            if tuple(src.shape[1:]) != tuple(dst.shape[1:]):
                raise ValueError(f"replay buffer field '{f}' has shape {tuple(src.shape[1:])} in the checkpoint but "
                                 f"{tuple(dst.shape[1:])} in this run: the checkpoint belongs to another environment")
            dst[:rows] = src.to(self.device, dst.dtype)

    def _set_n_step(self, n_step: int, num_streams: int) -> None:
        if int(n_step) != n_step or n_step < 1:
            raise ValueError(f"n_step must be an integer >= 1, got {n_step!r}")
        if int(num_streams) != num_streams or num_streams < 1:
            raise ValueError(f"num_streams must be an integer >= 1, got {num_streams!r}")
        self.n_step, self.num_streams = int(n_step), int(num_streams)

    def _check_rows(self, n: int) -> None:
        if self.n_step > 1 and n != self.num_streams:
            raise ValueError(f"an n-step buffer follows each env's row: add {self.num_streams} rows at a time "
                             f"(one per env), got {n}")

    def _same_episode(self, slot: Tensor, later: Tensor) -> Tensor:
        """Whether transition ``later`` starts where transition ``slot`` ended (same episode)."""
        raise NotImplementedError

    def _last_steps(self, idx: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The n-step transitions starting at slots ``idx``.

        Returns the rewards of their ``n_step`` steps ``(B, n_step)`` (zero after the last
        step), the number of steps ``m`` (float, 1..n_step) and the slot of each last step.
        A transition stops early at a ``terminated`` step, at an episode boundary (a
        transition's ``next_obs`` differs from the next ``obs`` of its env: a reset; a reset
        that returns exactly the last observation continues the sum, which is exact when
        the observation is the state) and at the newest transition of its env.
        """
        newer = (self.pos - 1 - idx) % self.capacity  # transitions written after each slot
        last = idx
        going = ~self.terminated[idx]
        rewards = [self.reward[idx]]
        steps = torch.ones(idx.shape, dtype=torch.float32, device=self.device)
        for k in range(1, self.n_step):
            later = (idx + k * self.num_streams) % self.capacity
            going = going & (newer >= k * self.num_streams) & self._same_episode(last, later)
            rewards.append(torch.where(going, self.reward[later], 0.0))
            steps += going
            last = torch.where(going, later, last)
            going = going & ~self.terminated[later]
        return torch.stack(rewards, dim=1), steps, last

    def gather(self, idx: Tensor, last: Tensor | None = None) -> dict[str, Tensor]:
        """The transitions from slots ``idx`` to the end of slots ``last`` (default ``idx``)."""
        raise NotImplementedError

    def gather_n_step(self, idx: Tensor) -> dict[str, Tensor]:
        """The transitions at ``idx``, as n-step transitions when ``n_step`` > 1.

        With ``n_step`` 1 this is :meth:`gather`. Otherwise ``reward`` holds the rewards of the
        up to ``n_step`` steps from ``obs`` ``(B, n_step)``, zero past the last one;
        ``horizon`` the number of steps ``m``; ``next_obs`` and ``terminated`` are the last
        step's (see :meth:`_last_steps` for where a transition stops).
        """
        if self.n_step == 1:
            return self.gather(idx)
        rewards, steps, last = self._last_steps(idx)
        batch = self.gather(idx, last)
        batch["reward"], batch["horizon"] = rewards, steps
        return batch

    def _draw(self, batch_size: int, generator: torch.Generator | None) -> Tensor:
        """``batch_size`` uniform draws from ``range(size)``, with replacement, on the buffer's device."""
        if self.size == 0:
            raise RuntimeError("cannot sample from an empty replay buffer")
        device = generator.device if generator is not None else None
        return torch.randint(self.size, (batch_size,), generator=generator, device=device).to(self.device)


class ReplayBuffer(_Replay):
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
        critic_obs_shape: also store a privileged observation of ``obs`` and of ``next_obs``
            for the critics (``critic_obs``, ``next_critic_obs``, float32).
        n_step: steps per sampled transition (see :meth:`gather_n_step`); 1 = one-step TD.
        num_streams: envs adding rows side by side: each ``add_batch`` of an n-step buffer
            adds one row per env, so an env's next transition lies ``num_streams`` slots on.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: Sequence[int],
        action_dim: int,
        obs_dtype: torch.dtype | np.dtype = torch.float32,
        device: torch.device | str = "cpu",
        critic_obs_shape: Sequence[int] | None = None,
        n_step: int = 1,
        num_streams: int = 1,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"buffer capacity must be at least 1, got {capacity}")
        self._set_n_step(n_step, num_streams)
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
        self._make_critic_fields(critic_obs_shape)
        self.fields = FIELDS if self.critic_obs_shape is None else FIELDS + CRITIC_FIELDS
        self.pos = 0  # next slot to write
        self.size = 0  # filled slots
        self.sampler: LAPSampler | None = None  # None: uniform draws; see samplers.py
        # on the CPU, writes go through numpy views of the same memory (about 3 us instead of 60)
        self._host = [getattr(self, f).numpy() for f in self.fields] if self.device.type == "cpu" else None

    @property
    def bytes_per_transition(self) -> int:
        """Storage of one transition, summed over the fields."""
        return sum(getattr(self, f)[0].numel() * getattr(self, f).element_size() for f in self.fields)

    def add_batch(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any,
                  critic_obs: Any = None, next_critic_obs: Any = None) -> None:
        """Write ``n`` transitions (leading dimension ``n``) into the next ``n`` slots."""
        self._check_critic_args(critic_obs, next_critic_obs)
        n = len(reward)
        self._check_rows(n)
        if n > self.capacity:
            raise ValueError(f"cannot add {n} transitions at once to a buffer of capacity {self.capacity}")
        values = (obs, action, reward, next_obs, terminated, critic_obs, next_critic_obs)[: len(self.fields)]
        if self._host is not None and self.pos + n <= self.capacity:
            rows = slice(self.pos, self.pos + n)
            for dst, src in zip(self._host, values):
                dst[rows] = src  # numpy casts to the field's dtype as torch.as_tensor(..., dtype) does
        else:
            idx = ((torch.arange(n) + self.pos) % self.capacity).to(self.device)
            for f, src in zip(self.fields, values):
                dst = getattr(self, f)
                dst[idx] = torch.as_tensor(np.asarray(src), device=self.device, dtype=dst.dtype)
        if self.sampler is not None:
            self.sampler.added((torch.arange(n) + self.pos) % self.capacity)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """``batch_size`` transitions drawn with replacement from the filled slots, uniformly or by the
        :attr:`sampler` (n-step transitions with ``n_step`` > 1)."""
        if self.sampler is None:
            return self.gather_n_step(self._draw(batch_size, generator))
        slots = self.sampler.draw(self.size, batch_size, generator)
        return self.sampler.hand_out(self.gather_n_step(slots), slots)

    def gather(self, idx: Tensor, last: Tensor | None = None) -> dict[str, Tensor]:
        """The transitions at ``idx`` as a dict of tensors; ``next_obs``, ``terminated`` (and
        ``next_critic_obs``) from the slots ``last`` when given (the end of an n-step transition)."""
        end = idx if last is None else last
        return {f: getattr(self, f)[end if f in _END_FIELDS else idx] for f in self.fields}

    def _same_episode(self, slot: Tensor, later: Tensor) -> Tensor:
        return (self.next_obs[slot] == self.obs[later]).flatten(1).all(dim=1)

    def state_dict(self) -> dict[str, Any]:
        """The filled part of the storage plus the write position (CPU tensors)."""
        n = self.size
        state: dict[str, Any] = {"capacity": self.capacity, "pos": self.pos, "size": n, "num_streams": self.num_streams,
                                 **self._critic_state(n)}
        for f in FIELDS:
            # clone: a slice would serialise the whole preallocated storage
            state[f] = getattr(self, f)[:n].to("cpu", copy=True)
        if self.sampler is not None:
            state["sampler"] = self.sampler.state_dict(n)
        return state

    def check_layout(self, state: dict[str, Any]) -> None:
        """Raise ValueError (naming the option to set) when this buffer cannot continue a saved one: another kind,
        capacity or, for n-step sums, env count. Reads only the ``LAYOUT_KEYS`` of ``state``."""
        if state.get("kind") == "frame_stack":
            raise ValueError("the checkpoint's replay buffer stores shared frames (data.frame_stack), this run "
                             "stores whole observations: resume with the data.frame_stack the checkpoint was "
                             "trained with")
        if int(state["capacity"]) != self.capacity:
            raise ValueError(
                f"replay buffer capacity mismatch: checkpoint has {state['capacity']}, this run has "
                f"{self.capacity}; set data.buffer_size to {state['capacity']}"
            )
        streams = int(state.get("num_streams", self.num_streams))
        if self.n_step > 1 and streams != self.num_streams:
            raise ValueError(f"the checkpoint's replay buffer holds the rows of {streams} env(s) side by side, this "
                             f"run steps {self.num_streams}: n-step sums would follow the wrong rows; set "
                             f"data.num_envs to {streams} (or data.n_step to 1)")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore contents saved by :meth:`state_dict` (:meth:`check_layout` first)."""
        self.check_layout(state)
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
        self._load_critic_state(state, n)
        self.pos, self.size = int(state["pos"]), n
        if self.sampler is not None and state.get("sampler") is not None:
            self.sampler.load_state_dict(state["sampler"])
        elif self.sampler is not None:  # a checkpoint of uniform sampling: every transition starts at the top
            self.sampler.added(torch.arange(n))


def tensor_bytes(replay: Any) -> int:
    """The bytes of the storage that ``replay`` and its sampler hold per slot (their tensors with a dimension; scalars
    such as the largest priority are bookkeeping); built on the meta device, what it would take."""
    owners = [replay] + ([replay.sampler] if getattr(replay, "sampler", None) is not None else [])
    return sum(t.numel() * t.element_size() for owner in owners for t in vars(owner).values()
               if isinstance(t, torch.Tensor) and t.dim() > 0)


def ring_frames(capacity: int) -> int:
    """Frames a :class:`FrameStackReplay` ring keeps for ``capacity`` transitions, margins aside: one per
    transition and an eighth more for the whole stacks that resets write."""
    return capacity + capacity // 8


class FrameStackReplay(_Replay):
    """Replay of frame-stacked image observations that stores every frame once.

    An observation is ``frame_stack`` frames of ``c`` channels, stacked along the first
    axis: ``(frame_stack * c, H, W)`` ``uint8``. Consecutive observations of an episode
    share ``frame_stack - 1`` frames, and a transition's ``next_obs`` is the next
    transition's ``obs``; stored naively, every frame would be kept ``2 * frame_stack``
    times. Here the frames live once in a ring of ``frame_capacity`` frames and each
    transition keeps the ids of its ``obs`` and ``next_obs`` frames, so a transition costs
    about one frame.

    Sharing is found by comparing contents, so it is exact for any env: ``obs`` reuses the
    previous ``next_obs`` of the same row (env) when they are equal, ``next_obs`` reuses
    ``obs``'s last ``frame_stack - 1`` frames when it is ``obs`` shifted by one frame, and
    anything else (a reset, a different stacking) is written in full (repeated frames in
    a stack, as after a reset, are written once). ``sample`` returns exactly the
    observations that were added. Episode boundaries need no special care: a reset's
    observation never matches the previous ``next_obs`` by construction of the stack, and
    if it does, the frames are the same bytes anyway.

    The transitions form a FIFO of at most ``capacity``; when the frame ring wraps, the
    oldest transitions whose frames were overwritten are dropped first (with episodes of
    more than 8 steps the default ring is large enough that this never happens before
    ``capacity`` is reached).

    Args:
        capacity: maximum number of transitions.
        obs_shape: ``(frame_stack * c, H, W)``.
        action_dim: length of one action.
        frame_stack: frames per observation.
        device: where frames and indices live.
        num_streams: envs adding rows side by side (rows of ``add_batch``).
        frame_capacity: frames kept; default :func:`ring_frames` plus a small margin.
        critic_obs_shape: also store a privileged observation of ``obs`` and of ``next_obs``
            for the critics (``critic_obs``, ``next_critic_obs``, float32, per transition).
        n_step: steps per sampled transition (see :meth:`gather_n_step`); 1 = one-step TD.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: Sequence[int],
        action_dim: int,
        frame_stack: int,
        device: torch.device | str = "cpu",
        num_streams: int = 1,
        frame_capacity: int | None = None,
        critic_obs_shape: Sequence[int] | None = None,
        n_step: int = 1,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"buffer capacity must be at least 1, got {capacity}")
        self._set_n_step(n_step, num_streams)
        obs_shape = tuple(int(s) for s in obs_shape)
        if len(obs_shape) != 3 or frame_stack < 1 or obs_shape[0] % frame_stack:
            raise ValueError(f"observation shape {obs_shape} is not {frame_stack} stacked frames (k * c, H, W)")
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.obs_shape = obs_shape
        self.action_dim = int(action_dim)
        self.k = int(frame_stack)
        self.c = obs_shape[0] // self.k
        self.frame_shape = (self.c, *obs_shape[1:])
        # transitions added since a transition's oldest frame was written: at most this many frames
        self.margin = (self.k + 1) * self.k * self.num_streams
        self.frame_capacity = int(frame_capacity or ring_frames(self.capacity) + 2 * self.margin + self.k + 1)
        if self.frame_capacity <= self.margin + 2 * (self.k + 1) * self.num_streams:
            raise ValueError(f"frame_capacity {self.frame_capacity} is too small for {self.num_streams} env(s)")
        self.frames = torch.zeros((self.frame_capacity, *self.frame_shape), dtype=torch.uint8, device=self.device)
        self.obs_ids = torch.zeros((self.capacity, self.k), dtype=torch.long, device=self.device)
        self.next_ids = torch.zeros_like(self.obs_ids)
        self.action = torch.zeros((self.capacity, self.action_dim), dtype=torch.float32, device=self.device)
        self.reward = torch.zeros(self.capacity, dtype=torch.float32, device=self.device)
        self.terminated = torch.zeros(self.capacity, dtype=torch.bool, device=self.device)
        self._make_critic_fields(critic_obs_shape)
        self._min_id = np.zeros(self.capacity, dtype=np.int64)  # oldest frame of each transition
        self.pos = 0  # next transition slot
        self.size = 0  # live transitions, the newest ``size`` slots before ``pos``
        self.frames_written = 0  # global id of the next frame
        self.added = 0  # transitions ever added
        self._last_next: list[np.ndarray | None] = [None] * self.num_streams  # each row's previous next_obs
        self._last_next_ids: list[list[int] | None] = [None] * self.num_streams

    @property
    def bytes_per_transition(self) -> float:
        """Storage per transition at capacity: frames, frame ids, action, reward, flag."""
        frame_bytes = self.frames[0].numel()
        per_slot = 2 * self.k * 8 + 8 + 4 * self.action_dim + 4 + 1  # ids, min id, action, reward, flag
        if self.critic_obs_shape is not None:
            per_slot += 2 * 4 * int(np.prod(self.critic_obs_shape))
        return self.frame_capacity * frame_bytes / self.capacity + per_slot

    # ----------------------------------------------------------------- writing
    def _write_frames(self, frames: list[np.ndarray]) -> list[int]:
        ids = list(range(self.frames_written, self.frames_written + len(frames)))
        slots = torch.tensor([i % self.frame_capacity for i in ids], device=self.device)
        self.frames[slots] = torch.as_tensor(np.stack(frames), device=self.device)
        self.frames_written += len(frames)
        return ids

    def _write_stack(self, obs: np.ndarray) -> list[int]:
        """Write the frames of one stacked observation (a frame equal to the one before it is shared)."""
        frames = obs.reshape(self.k, *self.frame_shape)
        new: list[np.ndarray] = []
        which: list[int] = []  # index into `new` of each of the k frames
        for j in range(self.k):
            if j > 0 and np.array_equal(frames[j], frames[j - 1]):
                which.append(which[-1])
            else:
                new.append(frames[j])
                which.append(len(new) - 1)
        ids = self._write_frames(new)
        return [ids[w] for w in which]

    @property
    def _oldest_live_id(self) -> int:
        """Frames with a lower id are overwritten, or may be within the next ``margin`` writes."""
        return self.frames_written - self.frame_capacity + self.margin

    def _live(self, ids: list[int] | None) -> bool:
        return ids is not None and min(ids) >= self._oldest_live_id

    def add_batch(self, obs: Any, action: Any, reward: Any, next_obs: Any, terminated: Any,
                  critic_obs: Any = None, next_critic_obs: Any = None) -> None:
        """Write ``n`` transitions; row ``i`` comes from env ``i`` (the sharing is tracked per row)."""
        self._check_critic_args(critic_obs, next_critic_obs)
        obs, next_obs = np.asarray(obs, dtype=np.uint8), np.asarray(next_obs, dtype=np.uint8)
        n = len(obs)
        if n > self.num_streams:
            raise ValueError(f"{n} rows added to a frame replay made for {self.num_streams} env(s)")
        self._check_rows(n)
        c = self.c
        for i in range(n):
            o, no = obs[i], next_obs[i]
            last = self._last_next[i]
            if last is not None and self._live(self._last_next_ids[i]) and np.array_equal(o, last):
                oid = list(self._last_next_ids[i])  # type: ignore[arg-type]
            else:
                oid = self._write_stack(o)
            if self.k > 1 and np.array_equal(no[:-c], o[c:]):
                nid = oid[1:] + self._write_frames([no[-c:]])
            else:
                nid = self._write_stack(no)
            slot = self.pos
            self.obs_ids[slot] = torch.tensor(oid, device=self.device)
            self.next_ids[slot] = torch.tensor(nid, device=self.device)
            self._min_id[slot] = min(oid)
            self.pos = (self.pos + 1) % self.capacity
            self.size = min(self.size + 1, self.capacity)
            self.added += 1
            self._last_next[i], self._last_next_ids[i] = no.copy(), nid
        idx = (torch.arange(n) + self.pos - n) % self.capacity
        idx = idx.to(self.device)
        self.action[idx] = torch.as_tensor(np.asarray(action), device=self.device, dtype=torch.float32)
        self.reward[idx] = torch.as_tensor(np.asarray(reward), device=self.device, dtype=torch.float32)
        self.terminated[idx] = torch.as_tensor(np.asarray(terminated), device=self.device, dtype=torch.bool)
        if self.critic_obs_shape is not None:
            for f, src in zip(CRITIC_FIELDS, (critic_obs, next_critic_obs)):
                getattr(self, f)[idx] = torch.as_tensor(np.asarray(src), device=self.device, dtype=torch.float32)
        # drop the oldest transitions whose frames the ring has overwritten (or is about to)
        oldest_allowed = self._oldest_live_id
        while self.size > 0 and self._min_id[(self.pos - self.size) % self.capacity] < oldest_allowed:
            self.size -= 1

    # ----------------------------------------------------------------- reading
    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> dict[str, Tensor]:
        """``batch_size`` transitions drawn uniformly with replacement from the live ones
        (n-step transitions with ``n_step`` > 1)."""
        return self.gather_n_step((self._draw(batch_size, generator) + (self.pos - self.size)) % self.capacity)

    def _stack(self, ids: Tensor) -> Tensor:
        frames = self.frames[ids % self.frame_capacity]  # (B, k, c, H, W)
        return frames.reshape(ids.shape[0], *self.obs_shape)

    def gather(self, idx: Tensor, last: Tensor | None = None) -> dict[str, Tensor]:
        """The transitions in slots ``idx``, observations as stacked ``uint8`` frames;
        ``next_obs``, ``terminated`` (and ``next_critic_obs``) from the slots ``last`` when given."""
        end = idx if last is None else last
        batch = {
            "obs": self._stack(self.obs_ids[idx]),
            "action": self.action[idx],
            "reward": self.reward[idx],
            "next_obs": self._stack(self.next_ids[end]),
            "terminated": self.terminated[end],
        }
        if self.critic_obs_shape is not None:
            batch["critic_obs"] = self.critic_obs[idx]
            batch["next_critic_obs"] = self.next_critic_obs[end]
        return batch

    def _same_episode(self, slot: Tensor, later: Tensor) -> Tensor:
        # an observation equal to its env's previous next_obs shares its frames (see add_batch)
        return (self.next_ids[slot] == self.obs_ids[later]).all(dim=1)

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """Frames and transitions written so far, the counters and each row's sharing state."""
        slots = min(self.frames_written, self.frame_capacity)
        filled = min(self.added, self.capacity)
        return {
            "kind": "frame_stack",
            "capacity": self.capacity,
            "frame_capacity": self.frame_capacity,
            "num_streams": self.num_streams,
            "pos": self.pos,
            "size": self.size,
            "added": self.added,
            "frames_written": self.frames_written,
            "frames": self.frames[:slots].to("cpu", copy=True),
            "obs_ids": self.obs_ids[:filled].to("cpu", copy=True),
            "next_ids": self.next_ids[:filled].to("cpu", copy=True),
            "min_id": torch.from_numpy(self._min_id[:filled].copy()),
            "action": self.action[:filled].to("cpu", copy=True),
            "reward": self.reward[:filled].to("cpu", copy=True),
            "terminated": self.terminated[:filled].to("cpu", copy=True),
            "last_next": [None if x is None else torch.from_numpy(x.copy()) for x in self._last_next],
            "last_next_ids": [None if x is None else list(x) for x in self._last_next_ids],
            **self._critic_state(filled),
        }

    def check_layout(self, state: dict[str, Any]) -> None:
        """Raise ValueError (naming the options to set) when this buffer cannot continue a saved one: another kind,
        capacity or frame ring (its size follows the env count). Reads only the ``LAYOUT_KEYS`` of ``state``."""
        if state.get("kind") != "frame_stack":
            raise ValueError("the checkpoint's replay buffer stores whole observations, not shared frames: "
                             "resume with the data.frame_stack the checkpoint was trained with")
        envs = f"data.num_envs {state['num_streams']}" if "num_streams" in state else "the same data.num_envs"
        for key in ("capacity", "frame_capacity"):
            if int(state[key]) != getattr(self, key):
                raise ValueError(f"replay buffer {key} mismatch: checkpoint has {state[key]}, this run has "
                                 f"{getattr(self, key)}; set data.buffer_size to {state['capacity']} and {envs}")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore contents saved by :meth:`state_dict` (:meth:`check_layout` first)."""
        self.check_layout(state)
        if tuple(state["frames"].shape[1:]) != self.frame_shape:
            raise ValueError(f"replay frames have shape {tuple(state['frames'].shape[1:])} in the checkpoint but "
                             f"{self.frame_shape} in this run: the checkpoint belongs to another environment")
        slots = state["frames"].shape[0]
        self.frames[:slots] = state["frames"].to(self.device)
        filled = state["obs_ids"].shape[0]
        for name in ("obs_ids", "next_ids", "action", "reward", "terminated"):
            getattr(self, name)[:filled] = state[name].to(self.device)
        self._min_id[:filled] = state["min_id"].numpy()
        self._load_critic_state(state, filled)
        self.pos, self.size = int(state["pos"]), int(state["size"])
        self.frames_written = int(state["frames_written"])
        self.added = int(state["added"])
        self._last_next = [None if x is None else x.numpy().copy() for x in state["last_next"]]
        self._last_next_ids = [None if x is None else list(x) for x in state["last_next_ids"]]
