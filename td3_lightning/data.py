"""ReplayDataModule: the environments, the replay buffer and the data streams Lightning iterates.

Training data is an endless stream of replay batches (``DataLoader(batch_size=None)``);
validation and test data are streams of finished deterministic episodes, one per batch.
"""

from __future__ import annotations

import contextlib
import json
import math
import shlex
import sys
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from td3_lightning import _lightning
from td3_lightning.declarations import check_declared, signature_defaults
from td3_lightning.rules import DATA_RULES, check_rules, idle_data_option, is_device
from td3_lightning.distributed import pack_rank_states, unpack_rank_state
from td3_lightning.envs import EnvSpec, SingleEnv, check_spaces, make_env, training_aids_set
from td3_lightning.errors import UserInputError
from td3_lightning.evaluation import EpisodeStream, Policy, numpy_policy
from td3_lightning.checkpointing import options_as_trained
from td3_lightning.replay import FrameStackReplay, ReplayBuffer, ring_frames, tensor_bytes
from td3_lightning.samplers import LAPSampler
from td3_lightning.validation import validate_once
from td3_lightning.video import log_tensorboard_video, write_video

# Training episodes are seeded from this value up, so evaluation and test seeds below it
# (the defaults are) are never tracks or start states the agent trained on.
TRAIN_SEED_OFFSET = 2**20
# Under DDP each rank's training episodes use seeds offset by this much, so ranks never share
# episodes (or tracks).
RANK_SEED_STRIDE = 2**31

# What to do when an env cannot render here (MuJoCo needs an OpenGL context; on a machine
# without a display, EGL or OSMesa gives one).
RENDER_FIX = "for MuJoCo without a display set MUJOCO_GL=egl (or osmesa) before starting"

# The replay stream reports this length so that Lightning sees a sized loader and does not
# draw a batch ahead of the training step: each batch is sampled right before it is used.
_ENDLESS = sys.maxsize


class ReplayStream(IterableDataset):
    """Yields replay batches forever, each sampled when it is requested."""

    def __init__(self, datamodule: ReplayDataModule) -> None:
        self.datamodule = datamodule

    def __len__(self) -> int:
        return _ENDLESS

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        if get_worker_info() is not None:
            raise UserInputError(
                "the replay stream cannot run in DataLoader worker processes (each would copy the buffer); "
                "use num_workers=0"
            )
        dm = self.datamodule
        if not dm.has_collector:
            dm.collect()  # says that the EnvLoop callback is missing
        while True:
            yield dm.next_batch() if dm.chunk_steps == 1 else ReplayChunk(dm, dm.next_batch())


class ReplayLoader(DataLoader):
    """The training loader. Resumable: the stream's state (buffer, sampler random state,
    batches in flight) is saved and restored by :class:`ReplayDataModule`."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


#: the data options that shape how a run trains (beyond its env and replay capacity, checked apart): in checkpoints
TRAINING_OPTIONS = ("batch_size", "warmup_steps", "utd_ratio", "n_step", "sampler", "priority_alpha")
#: recorded in checkpoints later than those: compared only where recorded (an older checkpoint's value is unknown)
RECORDED_LATER = ("num_envs", "train_env_kwargs")


def recorded_option(datamodule: Any, name: str) -> Any:
    """The value of the data option ``name`` that a checkpoint records: for ``train_env_kwargs`` the training aids
    (what the training env takes beyond ``env_kwargs``, compared apart), else the attribute."""
    if name == "train_env_kwargs":
        return {key: value for key, value in datamodule.train_env_kwargs.items()
                if key not in datamodule.env_kwargs or datamodule.env_kwargs[key] != value}
    return getattr(datamodule, name)


def _as_argument(value: Any) -> str:
    """``value`` as a command-line value: a mapping as quoted JSON (YAML reads it), else as printed."""
    return shlex.quote(json.dumps(value)) if isinstance(value, dict) else str(value)


def changed_training_options(saved: dict[str, Any] | None, datamodule: Any, path: str,
                             replay_size: int | None = None) -> str | None:
    """What a resume of the checkpoint at ``path`` (its data options ``saved``; ``replay_size`` transitions in its
    buffer) changes of how it trains, as a warning line (None: nothing). Replay priorities read with another
    exponent, or dropped, are refused."""
    defaults = signature_defaults(ReplayDataModule)  # for options the checkpoint predates
    saved = options_as_trained(saved, {name: defaults[name] for name in TRAINING_OPTIONS})  # not recorded: {}
    ours = {name: recorded_option(datamodule, name) for name in TRAINING_OPTIONS + RECORDED_LATER if name in saved}
    changed = {name: value for name, value in saved.items() if name in ours and ours[name] != value
               and not (idle_data_option(name, saved) and idle_data_option(name, ours))}  # idle in both: no matter
    if "warmup_steps" in changed and replay_size is not None and replay_size >= max(changed["warmup_steps"],
                                                                                     ours["warmup_steps"]):
        del changed["warmup_steps"]  # a buffer past both warm-ups: neither adds a random step
    if not changed:
        return None
    if saved.get("sampler") == "lap" and ({"sampler", "priority_alpha"} & set(changed)):
        alpha = saved.get("priority_alpha")
        fate = (f"data.sampler {datamodule.sampler} would drop" if datamodule.sampler != "lap"
                else f"data.priority_alpha {datamodule.priority_alpha} would misread")
        raise UserInputError(
            f"checkpoint {path} holds LAP priorities (data.sampler lap, data.priority_alpha {alpha}) that this fit's "
            f"{fate}: add --data.sampler lap --data.priority_alpha {alpha} to resume it, or train a new run")
    listing = ", ".join(f"data.{name} {ours[name]} (the checkpoint's: {value})" for name, value in changed.items())
    add = " ".join(f"--data.{name} {_as_argument(value)}" for name, value in changed.items())
    return f"checkpoint {path} was trained with other data options than this fit's: {listing}; add {add} to go on " \
           "as it was trained"


class ReplayChunk:
    """The replay batches of up to ``data.steps_per_batch`` training steps, as one Lightning batch.

    The first batch is sampled when Lightning fetches the chunk, as a lone batch would be. Each
    later one is sampled when the training step asks for it and is followed by the env steps of
    its training step, so every step sees the same samples and the same transitions, in the same
    order, as with one training step per batch. A chunk ends at a multiple of ``chunk_steps``
    training steps, at ``trainer.max_steps``, or (in a single process) on a SIGTERM.
    """

    def __init__(self, datamodule: ReplayDataModule, first: dict[str, Tensor]) -> None:
        self.datamodule, self.first = datamodule, first
        self.steps = 0  # batches handed out so far
        self.device: torch.device | None = None  # where to move each batch (a buffer off the training device)

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        dm = self.datamodule
        self.steps = 1
        yield self._on_device(self.first)
        while not dm.chunk_ends():
            batch = dm.next_batch()
            dm.num_consumed += 1
            dm.collect()  # the env steps of this training step
            self.steps += 1
            yield self._on_device(batch)

    def _on_device(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        if self.device is None:
            return batch
        return {k: v.to(self.device, non_blocking=self.device.type == "cuda") for k, v in batch.items()}


class ReplayDataModule(L.LightningDataModule):
    """Environments, replay buffer and data streams for TD3 (every option: ``docs/options.md``).

    Args:
        env_id: gymnasium environment id (CarRacingState-v0, Pendulum-v1, ...).
        env_kwargs: keyword arguments of gymnasium.make for every env instance.
        train_env_kwargs: extra keyword arguments for the training env only (training aids); evaluation uses env_kwargs.
        batch_size: transitions per replay batch (>= 1).
        buffer_size: replay capacity in transitions; the oldest are overwritten first (>= 1).
        warmup_steps: random-action env steps that fill the buffer before the first update (>= 1).
        eval_episodes: deterministic episodes per validation, on env seeds eval_seed, eval_seed + 1, ... (>= 1).
        eval_seed: env seed of the first validation episode (>= 0).
        test_episodes: deterministic episodes of the test subcommand (>= 1).
        test_seed: env seed of the first test episode (>= 0).
        buffer_device: where the replay tensors live: auto (the training device) or a torch device such as cpu.
        save_replay: put the replay buffer in checkpoints (an exact resume needs it).
        record_test: record the first N test episodes as videos in <run folder>/videos/ (>= 0).
        record_val: record the first N episodes of every validation (>= 0).
        video_format: mp4 or gif.
        tensorboard_video_every: every N validations, the first episode as a GIF in TensorBoard (>= 0; 0 = off).
        num_envs: training envs stepped together as one vector env (>= 1).
        utd_ratio: updates per collected transition (> 0); max_steps still counts updates.
        vector_mode: async (one process per env) or sync (all in this process).
        frame_stack: image observations: frames per stacked observation, each stored once (>= 1; null: the env's own).
        privileged_critic: the critics see the env's info["privileged_obs"], the actor only the observation.
        steps_per_batch: training steps per Lightning batch: the same training with less loop overhead (>= 1).
        n_step: steps per replayed transition: n-step returns (>= 1; 1 = TD3's one-step target).
        sampler: uniform, or lap: in proportion to the TD error (LAP, with its matching critic loss).
        priority_alpha: lap: exponent of the priorities max(|TD error|, 1), in [0, 1] (0 = uniform, 1 = proportional).
        num_workers: must be 0: the buffer lives in the main process, batches are sampled there.
    """

    def __init__(
        self,
        env_id: str = "Pendulum-v1",
        env_kwargs: dict[str, Any] | None = None,
        train_env_kwargs: dict[str, Any] | None = None,
        batch_size: int = 256,
        buffer_size: int = 1_000_000,
        warmup_steps: int = 10_000,
        eval_episodes: int = 10,
        eval_seed: int = 1_000,
        test_episodes: int = 100,
        test_seed: int = 0,
        buffer_device: str = "auto",
        save_replay: bool = True,
        record_test: int = 0,
        record_val: int = 0,
        video_format: Literal["mp4", "gif"] = "mp4",
        tensorboard_video_every: int = 5,
        num_envs: int = 1,
        utd_ratio: float = 1.0,
        vector_mode: Literal["async", "sync"] = "async",
        frame_stack: int | None = None,
        privileged_critic: bool = False,
        steps_per_batch: int = 1,
        n_step: int = 1,
        sampler: Literal["uniform", "lap"] = "uniform",
        priority_alpha: float = 0.4,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        check_data_options(locals())
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.train_env_kwargs = {**self.env_kwargs, **(train_env_kwargs or {})}
        self.batch_size = batch_size
        self.buffer_size = buffer_size
        self.warmup_steps = warmup_steps
        self.eval_episodes, self.eval_seed = eval_episodes, eval_seed
        self.test_episodes, self.test_seed = test_episodes, test_seed
        self.buffer_device = buffer_device
        self.save_replay = save_replay
        self._replay_left_out = False  # inside replay_left_out()
        self.record_test, self.record_val, self.video_format = record_test, record_val, video_format
        self.tensorboard_video_every = tensorboard_video_every
        self._val_runs = 0  # validation runs of this process, the sanity check excluded
        self._render_problem: str | None = None  # "" once a frame was rendered; see render_problem
        self.num_envs, self.utd_ratio, self.vector_mode = num_envs, utd_ratio, vector_mode
        self.frame_stack = frame_stack
        self.steps_per_batch = steps_per_batch
        self.n_step = n_step
        self.sampler, self.priority_alpha = sampler, priority_alpha
        self.chunk_steps = steps_per_batch  # what this fit uses (see chunk_steps)
        self._collector: Callable[[], None] | None = None  # see attach_collector

        probe = make_env(env_id, self.env_kwargs)  # fails early on a bad id, kwargs or spaces
        try:
            self.spec: EnvSpec = check_spaces(probe, env_id)
            self.time_limit: int | None = getattr(probe.spec, "max_episode_steps", None)  # steps per episode at most
            self._critic_obs_shape = privileged_shape(probe, env_id) if privileged_critic else None
        finally:
            probe.close()
        self.privileged_critic = privileged_critic
        if frame_stack is not None and (
            frame_stack < 1 or (len(self.spec.obs_shape) == 3 and self.spec.obs_shape[0] % frame_stack)
        ):
            raise UserInputError(
                f"data.frame_stack {frame_stack} does not divide {env_id}'s {self.spec.obs_shape[0]} image channels; "
                "leave it unset (the env's own frame_stack) or set 1 to store whole observations"
            )
        if frame_stack is not None and frame_stack > 1 and len(self.spec.obs_shape) != 3:
            raise UserInputError(
                f"data.frame_stack {frame_stack} stacks image frames, and {env_id}'s observations are not images "
                f"(shape {tuple(self.spec.obs_shape)}); leave it unset"
            )
        # priorities are kept per stored observation, and the shared ring holds about one frame per transition
        if self.sampler != "uniform" and (stack := self._shares_frames()):
            factor = round(2 * stack * self.buffer_size / ring_frames(self.buffer_size))
            raise UserInputError(f"data.sampler {self.sampler} needs a replay of whole observations: set "
                                 f"data.frame_stack 1 (observation and next observation stored whole, {stack} "
                                 f"frames each: about {factor}x the replay memory) or data.sampler uniform")
        if self.train_env_kwargs != self.env_kwargs:
            make_env(env_id, self.train_env_kwargs, option="data.train_env_kwargs").close()

        self.train_env: gym.vector.VectorEnv | SingleEnv | None = None
        self.eval_env: gym.Env | None = None
        self.buffer: ReplayBuffer | None = None
        self._sample_gen: torch.Generator | None = None
        self._pending: deque[dict[str, Tensor]] = deque()  # restored batches to replay first
        self._recent: deque[dict[str, Tensor]] = deque(maxlen=4)
        self.num_sampled = 0  # batches handed to the training loop
        self.num_consumed = 0  # batches that reached a training step
        self._loaded_state: dict[str, Any] | None = None

    # ------------------------------------------------------------- env facts for the model
    @property
    def obs_shape(self) -> list[int]:
        return list(self.spec.obs_shape)

    @property
    def critic_obs_shape(self) -> list[int] | None:
        """Shape of the critics' privileged observation (None: the critics see ``obs_shape``)."""
        return None if self._critic_obs_shape is None else list(self._critic_obs_shape)

    @property
    def action_low(self) -> list[float]:
        return list(self.spec.action_low)

    @property
    def action_high(self) -> list[float]:
        return list(self.spec.action_high)

    # ------------------------------------------------------------- setup
    def make_train_env(self) -> gym.vector.VectorEnv | SingleEnv:
        """The training envs as one vector env that never autoresets (the env loop resets
        finished envs itself, with their own seeds, so no transition crosses a reset); one env
        on its own, behind the same calls (:class:`SingleEnv`)."""
        env_id, kwargs = self.env_id, dict(self.train_env_kwargs)
        if self.num_envs == 1:
            return SingleEnv(make_env(env_id, kwargs))
        fns = [lambda: make_env(env_id, kwargs) for _ in range(self.num_envs)]
        mode = gym.vector.AutoresetMode.DISABLED
        if self.num_envs > 1 and self.vector_mode == "async":
            return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode)
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)

    def make_eval_env(self, render_mode: str | None = None) -> gym.Env:
        return make_env(self.env_id, self.env_kwargs, render_mode=render_mode)

    def setup(self, stage: str) -> None:
        if stage in ("fit", "validate", "test"):
            validate_once(self.trainer, stage)
        if aids := training_aids_set(self.env_id, self.env_kwargs):  # said once every check has passed
            played = "validation plays" if stage == "fit" else f"this {stage} plays"
            fix = "give them in data.train_env_kwargs" if stage == "fit" else "leave them out to score by its own rules"
            rank_zero_warn(f"data.env_kwargs sets {', '.join(aids)}, training aids of {self.env_id}: {played} by those "
                           f"changed rules, so its return is not the env's score; {fix}")
        if stage == "fit":
            self.chunk_steps, lowered_by = chunk_steps(self.trainer, self.steps_per_batch)
            if lowered_by:
                rank_zero_warn(
                    f"data.steps_per_batch {self.steps_per_batch} runs as {self.chunk_steps} training steps per batch "
                    f"so that every step of {', '.join(lowered_by)} ends a batch; intervals that are multiples of "
                    f"{self.steps_per_batch} keep the full speed-up"
                )
        if stage == "fit" and self.train_env is None:
            self.train_env = self.make_train_env()
            device = self._device() if self.buffer_device == "auto" else torch.device(self.buffer_device)
            self.buffer = self._make_buffer(device)
            self._sample_gen = torch.Generator(device=device)
            rank = self.trainer.global_rank if self.trainer is not None else 0
            self._sample_gen.manual_seed(int(torch.randint(2**62, (1,)).item()) + rank)

    # ------------------------------------------------------------- the env loop's side
    def attach_collector(self, collect: Callable[[], None]) -> None:
        """The one link from the replay stream back to the env loop.

        ``collect()`` takes the env steps due before the next training step and writes their
        transitions to :attr:`buffer`. The env-stepping callback (``EnvLoop``) attaches it at the
        start of a fit and calls it itself before every Lightning batch; the stream calls it
        only between the training steps of a :class:`ReplayChunk` (``data.steps_per_batch`` > 1),
        where no callback hook runs, so that every step sees the transitions it would see alone.
        """
        self._collector = collect

    @property
    def has_collector(self) -> bool:
        """Whether an env loop attached its collector (see :meth:`attach_collector`)."""
        return self._collector is not None

    def collect(self) -> None:
        """Run the attached collector (see :meth:`attach_collector`)."""
        if self._collector is None:
            raise UserInputError(
                "ReplayDataModule needs the EnvLoop callback to step the envs: "
                "L.Trainer(callbacks=[td3_lightning.EnvLoop()])"
            )
        self._collector()

    def chunk_ends(self) -> bool:
        """Whether the current chunk of training steps is complete (see :class:`ReplayChunk`)."""
        trainer = self.trainer
        step = trainer.global_step
        # a SIGTERM ends the chunk at once in a single process; under DDP the ranks must agree, so
        # it waits for the end of the chunk, where Lightning broadcasts it
        return (step % self.chunk_steps == 0 or 0 <= trainer.max_steps <= step
                or (trainer.world_size == 1 and trainer.received_sigterm))

    def _shares_frames(self) -> int:
        """The frames per observation when the replay stores each frame of stacked image observations once
        (:class:`FrameStackReplay`), else 0."""
        stack = self.spec.frame_stack if self.frame_stack is None else self.frame_stack
        return stack if len(self.spec.obs_shape) == 3 and stack > 1 else 0

    def _make_buffer(self, device: torch.device) -> ReplayBuffer | FrameStackReplay:
        """Image observations of stacked frames share their frames; anything else is stored whole."""
        if stack := self._shares_frames():
            return FrameStackReplay(self.buffer_size, self.spec.obs_shape, len(self.spec.action_low), stack, device,
                                    num_streams=self.num_envs, critic_obs_shape=self._critic_obs_shape,
                                    n_step=self.n_step)
        buffer = ReplayBuffer(self.buffer_size, self.spec.obs_shape, len(self.spec.action_low), self.spec.obs_dtype,
                              device, critic_obs_shape=self._critic_obs_shape, n_step=self.n_step,
                              num_streams=self.num_envs)
        if self.sampler == "lap":
            buffer.sampler = LAPSampler(self.buffer_size, self.priority_alpha, device)
        return buffer

    def replay_bytes(self) -> int:
        """The memory a fit's replay buffer takes (counted on the meta device: nothing is allocated)."""
        return tensor_bytes(self._make_buffer(torch.device("meta")))

    def check_replay_layout(self, layout: dict[str, Any]) -> None:
        """Raise ValueError, naming what to set, when this run's buffer cannot continue one saved with ``layout``
        (built on the meta device: nothing is allocated)."""
        self._make_buffer(torch.device("meta")).check_layout(layout)

    def transitions_after(self, max_steps: int) -> int:
        """The transitions in the buffer after ``max_steps`` training steps (-1: no limit): the warm-up's and
        ``ceil(max_steps / utd_ratio)`` more, each in whole steps of the ``num_envs`` envs, at most its capacity."""
        if max_steps < 0:
            return self.buffer_size
        n = self.num_envs
        warmup, more = self.warmup_steps, transitions_due(max_steps, self.utd_ratio)
        return min(self.buffer_size, (-(-warmup // n) + -(-more // n)) * n)

    def _device(self) -> torch.device:
        trainer = self.trainer
        return trainer.strategy.root_device if trainer is not None else torch.device("cpu")

    def teardown(self, stage: str) -> None:
        for env in (self.train_env, self.eval_env):
            if env is not None:
                env.close()
        self.train_env = self.eval_env = None

    # ------------------------------------------------------------- training stream
    def next_batch(self) -> dict[str, Tensor]:
        """The next training batch: a restored in-flight batch first, then fresh samples."""
        if self._pending:
            batch = self._pending.popleft()
        else:
            assert self.buffer is not None, "setup('fit') creates the buffer"
            batch = self.buffer.sample(self.batch_size, self._sample_gen)
        self._recent.append(batch)
        self.num_sampled += 1
        return batch

    def update_priorities(self, index: Tensor, priority: Tensor) -> None:
        """The update's new priorities ``max_i |Q_i(s, a) - y|`` of the prioritised batch with ``index`` (TD7's
        ``update_priority``): the LAP sampler's draws after this one read them (on its device)."""
        self.buffer.sampler.update(index, priority)  # type: ignore[union-attr]  (only LAP's batches have an index)

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        # replay batches are sampled on the training device: skip Lightning's walk over the batch
        if isinstance(batch, ReplayChunk):
            buffer = self.buffer
            batch.device = device if buffer is not None and buffer.device != device else None  # data.buffer_device
            return batch
        if isinstance(batch, dict) and all(isinstance(v, Tensor) and v.device == device for v in batch.values()):
            return batch
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        trainer = self.trainer
        if trainer is not None and trainer.training:
            self.num_consumed += 1
        return batch

    def train_dataloader(self) -> DataLoader:
        return ReplayLoader(ReplayStream(self), batch_size=None, num_workers=0)

    # ------------------------------------------------------------- evaluation streams
    def policy(self) -> Policy:
        """Deterministic action of the trainer's current policy (the actor, or its checkpoint), as numpy."""
        module = self.trainer.lightning_module
        return numpy_policy(module.policy, module.device)

    def _episodes(self, stage: str, first_seed: int, n: int, record: int) -> DataLoader:
        if self.eval_env is None:
            self.eval_env = self.make_eval_env()
        env = self.eval_env
        trainer = self.trainer
        video_dir = Path(trainer.log_dir or ".") / "videos"
        tensorboard = False

        def plan() -> int:  # at the start of each pass: how many episodes to render
            nonlocal tensorboard
            tensorboard = stage == "val" and self._val_run_logs_video()
            return max(record, 1 if tensorboard else 0)

        def on_video(index: int, seed: int, frames: list[np.ndarray], fps: float, stats: dict[str, float]) -> None:
            if index < record:
                step = getattr(trainer.lightning_module, "num_critic_updates", trainer.global_step)
                path = write_video(video_dir / f"{stage}-step{step}-seed{seed}.{self.video_format}", frames, fps)
                rank_zero_info(f"video of episode seed {seed} (return {stats['return']:.1f}): {path}")
            if tensorboard and index == 0:
                log_tensorboard_video(trainer, f"{stage}/video", frames, fps)

        # under DDP the episodes are split over the ranks; the metrics gather them
        world, rank = trainer.world_size, trainer.global_rank
        stream = EpisodeStream(
            lambda: env,
            self.policy(),
            [first_seed + i for i in range(rank, n, world)],
            record=plan,
            video_env_fn=lambda: self.make_eval_env(render_mode="rgb_array"),
            on_video=on_video,
        )
        return DataLoader(stream, batch_size=None, num_workers=0)

    def changed_training_options(self, saved: dict[str, Any] | None, path: str,
                                 replay_size: int | None = None) -> str | None:
        """:func:`changed_training_options` of this datamodule: what a resume of ``path`` changes of how it trains."""
        return changed_training_options(saved, self, path, replay_size)

    def check_n_step(self) -> tuple[str, ...]:
        """The warning of n-step returns longer than the env's episodes: each is the rest of its episode (a Monte
        Carlo return), summed over ``n_step`` stored steps for every replayed transition."""
        if self.time_limit is None or self.n_step <= self.time_limit:
            return ()
        return (f"data.n_step {self.n_step} is above the {self.time_limit} steps of {self.env_id}'s episodes: every "
                f"return runs to its episode's end, and each replayed transition sums {self.n_step} stored steps; set "
                f"data.n_step {self.time_limit} or less (n-step returns take a few steps, e.g. 3)",)

    def check_episodes(self, stage: str, world_size: int) -> tuple[str, ...]:
        """One line for the episodes of ``stage`` (val or test) that cannot be played: fewer than the
        ``world_size`` processes that share them, or recorded where the env cannot render; returns the warning of
        more recordings asked for than episodes played."""
        option, n, record = (("test_episodes", self.test_episodes, self.record_test) if stage == "test"
                             else ("eval_episodes", self.eval_episodes, self.record_val))
        if n < world_size:
            raise UserInputError(f"data.{option} ({n}) must be at least the number of processes ({world_size}): "
                                 "each process plays its share of the episodes")
        if record > 0 and (problem := self.render_problem()) is not None:
            raise UserInputError(f"data.record_{stage}: {self.env_id} cannot render frames here ({problem}); "
                                 f"{RENDER_FIX}, or set data.record_{stage} 0")
        if record > n:
            return (f"data.record_{stage} {record} asks for more videos than the {n} episode{'s' if n > 1 else ''} "
                    f"of data.{option}: {n} {'are' if n > 1 else 'is'} recorded; set data.record_{stage} {n}, or "
                    f"raise data.{option}",)
        return ()

    def _val_run_logs_video(self) -> bool:
        """Whether the validation run starting now sends its first episode to TensorBoard."""
        trainer = self.trainer
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return False
        every = self.tensorboard_video_every
        logs = every > 0 and self._val_runs % every == 0 and trainer.is_global_zero
        self._val_runs += 1
        if logs and "rgb_array" not in (self.eval_env.metadata.get("render_modes") or []):
            warnings.warn(f"{self.env_id} cannot render rgb_array frames: no TensorBoard videos "
                          "(set data.tensorboard_video_every 0 to silence this)", stacklevel=2)
            self.tensorboard_video_every = 0
            return False
        if logs and (problem := self.render_problem()) is not None:
            warnings.warn(f"{self.env_id} cannot render frames here ({problem}): no TensorBoard videos; "
                          f"{RENDER_FIX} (set data.tensorboard_video_every 0 to silence this)", stacklevel=2)
            self.tensorboard_video_every = 0
            return False
        return logs

    def render_problem(self) -> str | None:
        """None if the env renders an ``rgb_array`` frame in this process, else the error's first
        line (e.g. MuJoCo without an OpenGL context). Tried once, on a throwaway env."""
        if self._render_problem is None:
            try:
                with warnings.catch_warnings():  # a display library's own warnings: the problem is said below
                    warnings.filterwarnings("ignore", module="glfw")
                    env = self.make_eval_env(render_mode="rgb_array")
                    try:
                        env.reset(seed=0)
                        frame = env.render()
                        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
                            raise RuntimeError(f"render() gave {type(frame).__name__}, not an RGB image")
                    finally:
                        env.close()
                self._render_problem = ""
            except Exception as err:  # any backend error: report it in one line
                lines = str(err).strip().splitlines()
                self._render_problem = f"{type(err).__name__}: {lines[0] if lines else ''}"
        return self._render_problem or None

    def val_dataloader(self) -> DataLoader:
        return self._episodes("val", self.eval_seed, self.eval_episodes, self.record_val)

    def test_dataloader(self) -> DataLoader:
        return self._episodes("test", self.test_seed, self.test_episodes, self.record_test)

    # ------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict[str, Any]:
        in_flight = self.num_sampled - self.num_consumed
        state: dict[str, Any] = {
            "env_id": self.env_id,
            "env_kwargs": json.loads(json.dumps(self.env_kwargs, default=str)),  # plain data: told back on a mismatch
            "obs_shape": list(self.spec.obs_shape),
            "action_dim": len(self.spec.action_low),
            "sample_rng": self._sample_gen.get_state() if self._sample_gen is not None else None,
            "in_flight": [
                {k: v.cpu() for k, v in b.items()} for b in list(self._recent)[len(self._recent) - in_flight :]
            ]
            if in_flight > 0
            else [],
            "replay": self.buffer.state_dict() if (self.buffer is not None and self.save_replay
                                                   and not self._replay_left_out) else None,
            "replay_left_out": self._replay_left_out,  # a best checkpoint: its run's last.ckpt holds the buffer
            # told back if a resume changes one
            "options": {name: recorded_option(self, name) for name in TRAINING_OPTIONS + RECORDED_LATER},
            "validated_on": [self.eval_seed, self.eval_episodes],  # a test on these seeds is warned of
        }
        return pack_rank_states(self.trainer, state)  # under DDP: every rank's buffer

    @contextlib.contextmanager
    def replay_left_out(self) -> Iterator[None]:
        """Checkpoints written inside leave the replay buffer out (files to play or export, not to resume)."""
        self._replay_left_out = True
        try:
            yield
        finally:
            self._replay_left_out = False

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if tuple(state.get("obs_shape", self.spec.obs_shape)) != tuple(self.spec.obs_shape):
            raise UserInputError(
                f"the checkpoint's observation shape {tuple(state['obs_shape'])} does not match "
                f"{self.env_id}'s {tuple(self.spec.obs_shape)}; use the env the checkpoint was trained on"
            )
        if self.buffer is None:  # validate / test: no replay needed
            return
        state = unpack_rank_state(self.trainer, state, "replay buffer")
        if state.get("replay") is not None:
            try:
                self.buffer.load_state_dict(state["replay"])
            except ValueError as error:  # a layout this run's options cannot continue: the message names the fix
                raise UserInputError(f"cannot resume: {error}") from None
        else:
            why = "a best checkpoint: its run's last.ckpt holds it" if state.get("replay_left_out") \
                else "data.save_replay was off"
            warnings.warn(
                f"the checkpoint has no replay buffer ({why}): the buffer is refilled from "
                f"scratch with {self.warmup_steps} warm-up steps",
                stacklevel=1,  # Lightning calls this: told as this package's (a warning: line)
            )
        if state.get("sample_rng") is not None and self._sample_gen is not None:
            self._sample_gen.set_state(state["sample_rng"])
        device = self.buffer.device
        # (an in-flight LAP batch of a checkpoint before the update returned priorities carries an unfilled one)
        self._pending = deque({k: v.to(device) for k, v in b.items() if k != "priority"}
                              for b in state.get("in_flight", []))


def transitions_due(steps: int, utd_ratio: float) -> int:
    """The env transitions collected by the time ``steps`` training steps have run at ``utd_ratio`` updates per
    transition, warm-up not counted (the tolerance keeps ``21 / 0.7`` at 30)."""
    return math.ceil(steps / utd_ratio - 1e-9)


def check_data_options(options: Mapping[str, Any]) -> None:
    """Raise :class:`UserInputError` naming the first :class:`ReplayDataModule` option out of its declared range or
    breaking one of :data:`~td3_lightning.rules.DATA_RULES` (``options``: its arguments by name). Needs no env: the
    command line runs it as soon as the options are parsed."""
    check_declared("data", ReplayDataModule, options)
    check_rules(DATA_RULES, options)


def check_buffer_device(options: dict[str, Any]) -> None:
    """``data.buffer_device`` names a device this machine has (checked for fit, which builds the buffer)."""
    device = options.get("buffer_device", "auto")
    if device != "auto" and is_device(device) and not _device_present(torch.device(device)):
        raise UserInputError(f"data.buffer_device {device}: this machine has no such device ({_devices_here()}); "
                             "use auto or cpu")


def _device_present(device: torch.device) -> bool:
    """Whether this machine has ``device`` (CPU always; CUDA and MPS as torch sees them)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count()
    if device.type == "mps":
        return torch.backends.mps.is_available()
    if device.type == "xpu":
        return hasattr(torch, "xpu") and torch.xpu.is_available()
    return True


def _devices_here() -> str:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return f"{count} CUDA device{'s' if count != 1 else ''}" + (", MPS" if torch.backends.mps.is_available() else "")


def privileged_shape(env: gym.Env, env_id: str) -> tuple[int, ...]:
    """The shape of the privileged observation ``env`` offers (``data.privileged_critic``)."""
    space = getattr(env.unwrapped, "privileged_observation_space", None)
    if space is None:
        raise UserInputError(
            f"data.privileged_critic needs an env that offers a privileged observation (info['privileged_obs'], "
            f"described by env.unwrapped.privileged_observation_space, e.g. CarRacingPixels-v0); '{env_id}' offers "
            "none: set data.privileged_critic false"
        )
    if not isinstance(space, gym.spaces.Box) or space.shape is None or len(space.shape) != 1:
        raise UserInputError(f"'{env_id}' has a privileged observation space {space}; data.privileged_critic takes a "
                             "1-D Box (a state vector for the critics' MLP): set data.privileged_critic false")
    return tuple(space.shape)


def chunk_steps(trainer: L.Trainer | None, steps_per_batch: int) -> tuple[int, list[str]]:
    """The training steps per batch a fit can use: validation, logging and step-based
    checkpoints happen at the end of a batch, so chunks end at multiples of the greatest common
    divisor of ``steps_per_batch`` and those intervals. Also returns, by name, the intervals
    that are not multiples of ``steps_per_batch``."""
    if trainer is None or steps_per_batch == 1:
        return steps_per_batch, []
    intervals = [("trainer.log_every_n_steps", trainer.log_every_n_steps)]
    val = getattr(trainer, "val_check_interval", None)  # unset when the interval is a time
    if isinstance(val, int) and not isinstance(val, bool) and not _lightning.val_check_is_a_time(trainer):
        intervals.append(("trainer.val_check_interval", val))
    for cb in trainer.checkpoint_callbacks:
        every = _lightning.every_n_train_steps(cb)
        if every:
            intervals.append(("checkpoint.every_n_train_steps", every))
    steps, lowered_by = steps_per_batch, []
    for name, value in intervals:
        if value > 0 and value % steps_per_batch:
            steps = math.gcd(steps, value)
            lowered_by.append(f"{name} {value}")
    return steps, lowered_by
