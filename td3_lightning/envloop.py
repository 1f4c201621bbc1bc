"""The env-stepping callback: explores, steps the training envs and fills the replay buffer."""

from __future__ import annotations

import time
import warnings
from collections import deque
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_only

from td3_lightning import _lightning
from td3_lightning.data import RANK_SEED_STRIDE, TRAIN_SEED_OFFSET, ReplayChunk, ReplayDataModule, transitions_due
from td3_lightning.distributed import pack_rank_states, unpack_rank_state
from td3_lightning.errors import NonFiniteError, UserInputError


class EnvLoop(L.Callback):
    """Steps the training envs and writes their transitions to the replay buffer.

    Before the first batch it fills the buffer with ``data.warmup_steps`` transitions of
    uniformly random actions. Before every training batch it then takes as many (vector)
    env steps as keep the collected transitions at ``training steps / data.utd_ratio``: with
    one env and ``utd_ratio`` 1, exactly one env step per training step; with
    ``num_envs`` 4 and ``utd_ratio`` 1, one vector step (4 transitions) every 4 training steps.
    Actions are the actor's plus Gaussian noise (``model.exploration_noise`` times half the
    action range, or its schedule), clipped to the bounds.

    Every new episode gets the next env seed ``base_seed + k`` (``k`` counts the episodes
    started), so a resumed run replays the same episodes; on DDP ranks draw distinct seeds.
    Every training reset gets ``options={"env_steps": n}``, the transitions collected so far
    (warm-up included), for env-side schedules such as CarRacingState's
    ``missed_tile_penalty_ramp``; envs that do not read it ignore it.
    Only ``terminated`` ends bootstrapping: a time-limit ``truncated`` transition is stored as
    non-terminal with its real next observation. The vector envs never autoreset, so no
    transition crosses an episode boundary. With ``data.privileged_critic`` the privileged
    observations of every reset and step (``info["privileged_obs"]``) are stored beside the
    transitions.

    With ``model.policy_checkpoints`` it collects whole assessments
    (:mod:`~td3_lightning.extensions.policy_checkpoints`): episodes of one policy with no update between them; the
    training steps then catch up.

    Logged at the end of every episode: ``train/episode_return``, ``train/episode_length``,
    ``train/episodes``, ``train/env_steps`` (all transitions, warm-up included),
    ``perf/env_steps_per_sec``, and with policy checkpoints ``train/checkpoint_return`` (the checkpoint's
    worst assessed return) and ``train/checkpoints`` (how many were taken).
    """

    def __init__(self) -> None:
        self.env_steps = 0  # transitions, warm-up included
        self.train_transitions = 0  # transitions collected after the warm-up
        self.episodes = 0  # finished episodes
        self.episodes_started = 0  # seeds handed out
        self.base_seed: int | None = None
        self.last_episode_return: float | None = None
        self.recent_returns: deque[float] = deque(maxlen=1024)  # of the latest finished episodes
        self._obs: np.ndarray | None = None  # (num_envs, *obs_shape)
        self._critic_obs: np.ndarray | None = None  # (num_envs, *critic_obs_shape), data.privileged_critic
        self._needs_reset: np.ndarray | None = None
        self._returns: np.ndarray | None = None
        self._lengths: np.ndarray | None = None
        self._gen: torch.Generator | None = None
        self._loaded: dict[str, Any] | None = None
        self._abandoned = 0  # the episodes in progress in the checkpoint resumed from
        self._clock: tuple[float, int] | None = None
        self._transitions_from_step = False
        self._trainer: L.Trainer | None = None

    # ------------------------------------------------------------- lifecycle
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._trainer = trainer
        dm = trainer.datamodule
        if not isinstance(dm, ReplayDataModule):
            raise UserInputError("EnvLoop needs a ReplayDataModule: "
                                 "call trainer.fit(model, datamodule=ReplayDataModule(...))")
        self.num_envs = dm.num_envs
        self._returns = np.zeros(self.num_envs)
        self._lengths = np.zeros(self.num_envs, dtype=np.int64)
        self._needs_reset = np.zeros(self.num_envs, dtype=bool)
        self._gen = torch.Generator()
        rank = trainer.global_rank
        self._abandoned = 0  # an earlier fit's, said or not, is not this one's
        if self._loaded is not None:
            self._restore(self._loaded, trainer)
            self._loaded = None
        else:
            self._gen.manual_seed(int(torch.randint(2**62, (1,)).item()) + rank)
            self.base_seed = TRAIN_SEED_OFFSET + RANK_SEED_STRIDE * rank + int(torch.randint(2**30, (1,)).item())
        actor = pl_module.actor
        self._scale = actor.action_scale.detach().cpu().double()
        self._bias = actor.action_bias.detach().cpu().double()
        self._scale_np = self._scale.numpy()
        self._low_np, self._high_np = (self._bias - self._scale).numpy(), (self._bias + self._scale).numpy()
        assert dm.buffer is not None
        while len(dm.buffer) < dm.warmup_steps:
            self._step(dm, self._random_actions())
        self._clock = (time.perf_counter(), self.env_steps)
        dm.attach_collector(lambda: self.collect(trainer, pl_module))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._abandoned:
            warnings.warn(f"resumed mid-episode: {self._abandoned} episode(s) in progress are abandoned and new ones "
                          "start; checkpoints at episode ends resume exactly", stacklevel=1)
            self._abandoned = 0
        if self._transitions_from_step:  # one env step per training step in that loop
            self.train_transitions = trainer.global_step
            self._transitions_from_step = False
        # checkpoints of the first steps_per_batch versions counted a batch of several steps as one batch
        _lightning.align_batch_count(trainer)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self.collect(trainer, pl_module)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if isinstance(batch, ReplayChunk) and batch.steps > 1:
            # Lightning's batch counts (validation interval, batch_idx, the logging step) count training
            # steps, as with one step per batch: a checkpoint resumes with any steps_per_batch
            _lightning.count_extra_batches(trainer, batch.steps - 1)

    def collect(self, trainer: L.Trainer, pl_module: Any) -> None:
        """The env steps due before the next training step (``global_step + 1``); with policy checkpoints, the
        whole assessment they start (no update runs while one is in progress)."""
        dm = trainer.datamodule
        target = transitions_due(trainer.global_step + 1, dm.utd_ratio)
        while self.train_transitions < target or pl_module.wants_episodes(self._episode_in_progress()):
            self._step(dm, self._explore(pl_module), trainer)
            self.train_transitions += self.num_envs

    def _episode_in_progress(self) -> bool:
        """The (first) env's episode has begun and not ended."""
        assert self._lengths is not None and self._needs_reset is not None
        return bool(self._lengths[0] > 0 and not self._needs_reset[0])

    # ------------------------------------------------------------- acting
    def _random_actions(self) -> np.ndarray:
        u = torch.rand((self.num_envs, *self._scale.shape), generator=self._gen, dtype=torch.float64) * 2 - 1
        return (u * self._scale + self._bias).float().numpy()

    def _explore(self, pl_module: Any) -> np.ndarray:
        trainer = pl_module.trainer
        obs = torch.as_tensor(self._observe(trainer.datamodule, trainer), device=pl_module.device)
        with torch.no_grad():
            action = pl_module.act(obs).cpu().numpy().astype(np.float64)  # the one copy to the host
        noise = torch.randn(action.shape, generator=self._gen, dtype=torch.float64).numpy()
        sigma = pl_module.exploration_noise_at(trainer.global_step)
        # float64 numpy: the same roundings as the torch ops, at half the cost for one small action
        action = action + noise * sigma * self._scale_np
        return np.clip(action, self._low_np, self._high_np).astype(np.float32)

    def _next_seeds(self, mask: np.ndarray) -> list[int | None]:
        assert self.base_seed is not None
        seeds: list[int | None] = []
        for reset in mask:
            seeds.append(self.base_seed + self.episodes_started if reset else None)
            self.episodes_started += int(reset)
        return seeds

    def _observe(self, dm: ReplayDataModule, trainer: L.Trainer | None = None) -> np.ndarray:
        """The current observations, after resetting the envs whose episode ended (a reset's
        observations are checked here; the others were checked when a step returned them)."""
        env = dm.train_env
        assert env is not None and self._needs_reset is not None
        if self._obs is None:
            all_envs = np.ones(self.num_envs, dtype=bool)
            self._obs, info = env.reset(seed=self._next_seeds(all_envs), options={"env_steps": self.env_steps})
            self._critic_obs = None
            self._reset_stats(all_envs)
            self._check_finite(dm, trainer, "reset observation", self._obs)
            self._keep_critic_obs(dm, info, all_envs)
        elif self._needs_reset.any():
            mask = self._needs_reset.copy()
            self._obs, info = env.reset(seed=self._next_seeds(mask),
                                        options={"reset_mask": mask, "env_steps": self.env_steps})
            self._reset_stats(mask)
            self._check_finite(dm, trainer, "reset observation", self._obs)
            self._keep_critic_obs(dm, info, mask)
        return self._obs

    def _keep_critic_obs(self, dm: ReplayDataModule, info: dict[str, Any], mask: np.ndarray) -> None:
        """The privileged observations of the envs in ``mask`` (``data.privileged_critic``)."""
        if dm.critic_obs_shape is None:
            return
        if self._critic_obs is None:
            self._critic_obs = np.zeros((self.num_envs, *dm.critic_obs_shape), dtype=np.float32)
        self._critic_obs[mask] = privileged_obs(info, dm, self.num_envs)[mask]

    def _reset_stats(self, mask: np.ndarray) -> None:
        assert self._returns is not None and self._lengths is not None and self._needs_reset is not None
        self._returns[mask] = 0.0
        self._lengths[mask] = 0
        self._needs_reset[mask] = False

    def _step(self, dm: ReplayDataModule, actions: np.ndarray, trainer: L.Trainer | None = None) -> None:
        obs = self._observe(dm, trainer)
        assert dm.train_env is not None and dm.buffer is not None
        assert self._returns is not None and self._lengths is not None and self._needs_reset is not None
        self._check_finite(dm, trainer, "action", actions)
        next_obs, reward, terminated, truncated, info = dm.train_env.step(actions)
        self._check_finite(dm, trainer, "reward", reward, "observation", next_obs)
        if self._critic_obs is None:
            dm.buffer.add_batch(obs, actions, reward, next_obs, terminated)
        else:
            next_critic_obs = privileged_obs(info, dm, self.num_envs)
            self._check_finite(dm, trainer, "privileged observation", next_critic_obs)
            dm.buffer.add_batch(obs, actions, reward, next_obs, terminated, self._critic_obs, next_critic_obs)
            self._critic_obs = next_critic_obs
        self.env_steps += self.num_envs
        self._returns += reward
        self._lengths += 1
        self._obs = next_obs
        done = np.logical_or(terminated, truncated)
        for i in np.flatnonzero(done):
            self.episodes += 1
            self.last_episode_return = float(self._returns[i])
            self.recent_returns.append(self.last_episode_return)
            if trainer is not None:  # the module takes the episode (policy checkpoints assess it)
                extra = trainer.lightning_module.training_episode_end(float(self._returns[i]))
                self._log_episode(trainer, float(self._returns[i]), int(self._lengths[i]), extra)
        self._needs_reset |= done

    def _check_finite(self, dm: ReplayDataModule, trainer: L.Trainer | None, *named: Any) -> None:
        """Stop before a NaN or infinity reaches the env or the replay buffer."""
        for value in named[1::2]:
            array = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=np.float64)
            if array.dtype.kind in "fc" and not np.isfinite(array).all():  # integers and bools are finite
                self._non_finite(dm, trainer, *named)

    def _non_finite(self, dm: ReplayDataModule, trainer: L.Trainer | None, *named: Any) -> None:
        when = f"env step {self.env_steps + 1} " + (
            f"(training step {trainer.global_step + 1})" if trainer is not None else "(warm-up)"
        )
        for name, value in zip(named[::2], named[1::2]):
            value = np.asarray(value)
            if self.num_envs == 1 and value.ndim > 0 and value.shape[0] == 1:
                value = value[0]  # one env: report its value, not a batch of one
            bad = ~np.isfinite(value)
            if not bad.any():
                continue
            if name == "action":  # a non-finite actor: report its first non-finite loss if one was recorded
                if trainer is not None:
                    trainer.lightning_module.check_finite(action=f"; stopped at {when}")
                raise NonFiniteError(f"non-finite action {value.tolist()} from the actor at {when}")
            where = (f"({value.item()})" if value.ndim == 0
                     else f"({value[bad][0]} at index {int(np.flatnonzero(bad)[0])})")
            raise NonFiniteError(f"non-finite {name} {where} from the environment {dm.env_id} at {when}")

    @rank_zero_only
    def _log_episode(self, trainer: L.Trainer, episode_return: float, episode_length: int,
                     extra: dict[str, float]) -> None:
        now = time.perf_counter()
        metrics = {
            "train/episode_return": episode_return,
            "train/episode_length": float(episode_length),
            "train/episodes": float(self.episodes),
            "train/env_steps": float(self.env_steps),
        }
        metrics.update(extra)
        if self._clock is not None and now > self._clock[0]:
            metrics["perf/env_steps_per_sec"] = (self.env_steps - self._clock[1]) / (now - self._clock[0])
        self._clock = (now, self.env_steps)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    # ------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict[str, Any]:
        in_progress = 0  # episodes started and not finished (a finished one waits for its reset)
        if self._obs is not None and self._lengths is not None and self._needs_reset is not None:
            in_progress = int(np.count_nonzero((self._lengths > 0) & ~self._needs_reset))
        return pack_rank_states(self._trainer, {
            "env_steps": self.env_steps,
            "train_transitions": self.train_transitions,
            "episodes": self.episodes,
            "episodes_started": self.episodes_started,
            "base_seed": self.base_seed,
            "episodes_in_progress": in_progress,
            "rng": self._gen.get_state() if self._gen is not None else None,
        })  # under DDP: every rank's counters and random stream

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded = dict(state_dict)

    def _restore(self, state: dict[str, Any], trainer: L.Trainer) -> None:
        state = unpack_rank_state(trainer, state, "env loop state")
        self.env_steps = int(state["env_steps"])
        self.episodes = int(state["episodes"])
        self.base_seed = state["base_seed"]
        if "episodes_started" in state:
            self.episodes_started = int(state["episodes_started"])
            in_progress = int(state.get("episodes_in_progress", 0))
            self.train_transitions = int(state["train_transitions"])
        else:  # checkpoints of td3_lightning 0.1.0's single-env loop
            in_progress = int(int(state.get("episode_length", 0)) > 0)
            self.episodes_started = self.episodes + in_progress
            self._transitions_from_step = True  # global_step is restored after on_fit_start
        if state.get("rng") is not None:
            assert self._gen is not None
            self._gen.set_state(state["rng"])
        self._obs = None
        # The envs' physics state is not in the checkpoint: episodes in progress are abandoned (their transitions stay
        # in the buffer) and new ones start; said when training goes on (a finished run resumed trains no step)
        self._abandoned = in_progress


def privileged_obs(info: dict[str, Any], dm: ReplayDataModule, num_envs: int) -> np.ndarray:
    """``info["privileged_obs"]`` of a (vector) reset or step as ``(num_envs, *critic_obs_shape)`` float32."""
    if "privileged_obs" not in info:
        raise UserInputError(f"data.privileged_critic: {dm.env_id} returned no info['privileged_obs'] (its "
                             "privileged_observation_space promises one); set data.privileged_critic false")
    value = np.asarray(info["privileged_obs"], dtype=np.float32)
    shape = tuple(dm.critic_obs_shape or ())
    if value.shape == shape:  # one env (SingleEnv passes the env's own info through)
        value = value[None]
    if value.shape != (num_envs, *shape):
        raise UserInputError(f"data.privileged_critic: {dm.env_id}'s info['privileged_obs'] "
                             f"has shape {value.shape[1:]}, "
                             f"its privileged_observation_space says {shape}; fix the env or set "
                             "data.privileged_critic false")
    return value
