"""Callbacks: the environment loop that feeds the replay buffer, and the progress bar."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
import warnings
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ProgressBar
from lightning.pytorch.utilities import rank_zero_only

from td3_lightning.data import TRAIN_SEED_OFFSET, ReplayDataModule
from td3_lightning.errors import UserInputError
from td3_lightning.module import NonFiniteError


class EnvLoop(L.Callback):
    """Steps the training env once before every training batch and writes the transition
    to the replay buffer.

    Before the first batch it fills the buffer with ``data.warmup_steps`` uniformly random
    actions; afterwards it acts with the actor plus Gaussian noise
    (``model.exploration_noise`` times half the action range), clipped to the bounds.
    Episode ``e`` is reset with env seed ``base_seed + e``, so a resumed run replays the
    same episodes. Only ``terminated`` ends bootstrapping: a time-limit ``truncated``
    transition is stored as non-terminal with its real next observation.

    Logged at the end of every episode: ``train/episode_return``, ``train/episode_length``,
    ``train/episodes``, ``train/env_steps`` (warm-up included) and
    ``perf/env_steps_per_sec``.
    """

    def __init__(self) -> None:
        self.env_steps = 0  # all env steps, warm-up included
        self.episodes = 0  # finished (or abandoned) episodes
        self.base_seed: int | None = None
        self.episode_return = 0.0
        self.episode_length = 0
        self.last_episode_return: float | None = None
        self._obs: np.ndarray | None = None
        self._gen: torch.Generator | None = None
        self._loaded: dict[str, Any] | None = None
        self._clock: tuple[float, int] | None = None

    # ------------------------------------------------------------- lifecycle
    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        dm = trainer.datamodule
        if not isinstance(dm, ReplayDataModule):
            raise UserInputError("EnvLoop needs a ReplayDataModule: call trainer.fit(model, datamodule=ReplayDataModule(...))")
        self._gen = torch.Generator()
        if self._loaded is not None:
            self._restore(self._loaded)
            self._loaded = None
        else:
            self._gen.manual_seed(int(torch.randint(2**62, (1,)).item()))
            self.base_seed = TRAIN_SEED_OFFSET + int(torch.randint(2**30, (1,)).item())
        actor = pl_module.actor
        self._scale = actor.action_scale.detach().cpu().double()
        self._bias = actor.action_bias.detach().cpu().double()
        assert dm.buffer is not None
        while len(dm.buffer) < dm.warmup_steps:
            self._step(dm, self._random_action())
        self._clock = (time.perf_counter(), self.env_steps)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._step(trainer.datamodule, self._explore(pl_module), trainer)

    # ------------------------------------------------------------- acting
    def _random_action(self) -> np.ndarray:
        u = torch.rand(self._scale.shape, generator=self._gen, dtype=torch.float64) * 2 - 1
        return (u * self._scale + self._bias).float().numpy()

    def _explore(self, pl_module: Any) -> np.ndarray:
        obs = torch.as_tensor(self._current_obs_or_reset(pl_module.trainer.datamodule), device=pl_module.device)
        with torch.no_grad():
            action = pl_module.actor(obs.unsqueeze(0))[0].double().cpu()
        noise = torch.randn(action.shape, generator=self._gen, dtype=torch.float64)
        action = action + noise * pl_module.hparams.exploration_noise * self._scale
        return torch.clamp(action, self._bias - self._scale, self._bias + self._scale).float().numpy()

    def _current_obs_or_reset(self, dm: ReplayDataModule) -> np.ndarray:
        if self._obs is None:
            assert dm.train_env is not None and self.base_seed is not None
            self._obs, _ = dm.train_env.reset(seed=self.base_seed + self.episodes)
            self.episode_return, self.episode_length = 0.0, 0
        return self._obs

    def _step(self, dm: ReplayDataModule, action: np.ndarray, trainer: L.Trainer | None = None) -> None:
        obs = self._current_obs_or_reset(dm)
        assert dm.train_env is not None and dm.buffer is not None
        if not np.isfinite(action).all():
            self._non_finite(dm, trainer, "action", action)
        next_obs, reward, terminated, truncated, _ = dm.train_env.step(action)
        if not (np.isfinite(reward) and np.isfinite(next_obs).all() and (self.episode_length or np.isfinite(obs).all())):
            self._non_finite(dm, trainer, "reward", reward, "observation", next_obs, "reset observation", obs)
        dm.buffer.add(obs, action, float(reward), next_obs, bool(terminated))
        self.env_steps += 1
        self.episode_return += float(reward)
        self.episode_length += 1
        self._obs = next_obs
        if terminated or truncated:
            self.episodes += 1
            self.last_episode_return = self.episode_return
            if trainer is not None:
                self._log_episode(trainer)
            self._obs = None

    def _non_finite(self, dm: ReplayDataModule, trainer: L.Trainer | None, *named: Any) -> None:
        """Stop before a NaN or infinity reaches the env or the replay buffer."""
        when = f"env step {self.env_steps + 1} " + (
            f"(training step {trainer.global_step + 1})" if trainer is not None else "(warm-up)"
        )
        for name, value in zip(named[::2], named[1::2]):
            value = np.asarray(value)
            bad = ~np.isfinite(value)
            if not bad.any():
                continue
            if name == "action":  # a non-finite actor: report its first non-finite loss if one was recorded
                if trainer is not None:
                    trainer.lightning_module.check_finite(action=f"; stopped at {when}")
                raise NonFiniteError(f"non-finite action {value.tolist()} from the actor at {when}")
            where = f"({value.item()})" if value.ndim == 0 else f"({value[bad][0]} at index {int(np.flatnonzero(bad)[0])})"
            raise NonFiniteError(f"non-finite {name} {where} from the environment {dm.env_id} at {when}")

    @rank_zero_only
    def _log_episode(self, trainer: L.Trainer) -> None:
        now = time.perf_counter()
        metrics = {
            "train/episode_return": self.episode_return,
            "train/episode_length": float(self.episode_length),
            "train/episodes": float(self.episodes),
            "train/env_steps": float(self.env_steps),
        }
        if self._clock is not None and now > self._clock[0]:
            metrics["perf/env_steps_per_sec"] = (self.env_steps - self._clock[1]) / (now - self._clock[0])
        self._clock = (now, self.env_steps)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    # ------------------------------------------------------------- checkpoint state
    def state_dict(self) -> dict[str, Any]:
        return {
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "base_seed": self.base_seed,
            "episode_return": self.episode_return,
            "episode_length": self.episode_length if self._obs is not None else 0,
            "rng": self._gen.get_state() if self._gen is not None else None,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded = dict(state_dict)

    def _restore(self, state: dict[str, Any]) -> None:
        self.env_steps = int(state["env_steps"])
        self.episodes = int(state["episodes"])
        self.base_seed = state["base_seed"]
        if state.get("rng") is not None:
            assert self._gen is not None
            self._gen.set_state(state["rng"])
        self._obs = None
        if int(state.get("episode_length", 0)) > 0:
            # The env's physics state is not in the checkpoint: the episode in progress is
            # abandoned (its transitions stay in the buffer) and the next one starts.
            warnings.warn(
                f"resumed mid-episode: the episode in progress ({state['episode_length']} steps) is abandoned "
                "and a new one starts; checkpoints at episode ends resume exactly",
                stacklevel=2,
            )
            self.episodes += 1


class RLProgressBar(ProgressBar):
    """One status line for the whole run: env steps of ``max_steps``, last episode return,
    last evaluation return and steps/s.

    On a terminal the line is redrawn in place at most every ``refresh_seconds``; when the
    output is not a terminal (CI logs, files) a new line is printed every ``log_seconds``
    and after every evaluation, so logs stay short.

    Args:
        refresh_seconds: minimum time between redraws on a terminal.
        log_seconds: time between lines when the output is not a terminal.
    """

    def __init__(self, refresh_seconds: float = 0.5, log_seconds: float = 30.0) -> None:
        super().__init__()
        self.refresh_seconds = refresh_seconds
        self.log_seconds = log_seconds
        self._enabled = True
        self._last_draw = 0.0
        self._start: tuple[float, int] = (0.0, 0)
        self._tty = sys.stdout.isatty()

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = (time.perf_counter(), trainer.global_step)

    def _line(self, trainer: L.Trainer) -> str:
        elapsed = time.perf_counter() - self._start[0]
        rate = (trainer.global_step - self._start[1]) / elapsed if elapsed > 0 else 0.0
        total = f"/{trainer.max_steps}" if trainer.max_steps and trainer.max_steps > 0 else ""
        parts = [f"step {trainer.global_step}{total}", f"{rate:.0f} steps/s"]
        loop = next((c for c in trainer.callbacks if isinstance(c, EnvLoop)), None)
        if loop is not None and loop.last_episode_return is not None:
            parts.append(f"episodes {loop.episodes}, last return {loop.last_episode_return:.1f}")
        val = trainer.callback_metrics.get("val/return")
        if val is not None:
            parts.append(f"val/return {float(val):.1f}")
        parts.append(f"{elapsed / 60:.1f} min")
        return " | ".join(parts)

    def _draw(self, trainer: L.Trainer, force: bool = False) -> None:
        if not self._enabled or trainer.global_rank != 0:
            return
        now = time.perf_counter()
        if not force and now - self._last_draw < (self.refresh_seconds if self._tty else self.log_seconds):
            return
        self._last_draw = now
        if self._tty:
            sys.stdout.write("\r\033[K" + self._line(trainer))
        else:
            sys.stdout.write(self._line(trainer) + "\n")
        sys.stdout.flush()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._draw(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._draw(trainer, force=True)
            if self._tty and self._enabled and trainer.global_rank == 0:
                sys.stdout.write("\n")

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._draw(trainer, force=True)
        if self._tty and self._enabled and trainer.global_rank == 0:
            sys.stdout.write("\n")


class TestReport(L.Callback):
    """After ``test``: prints one summary line and writes ``test_results.json`` (every
    ``test/*`` metric) into the run folder, for scripts."""

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_rank != 0:
            return
        m = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
        if "test/return" not in m:
            return
        print(
            f"test: {int(m['test/episodes'])} episodes, return {m['test/return']:.1f} ± {m['test/return_std']:.1f} "
            f"(min {m['test/return_min']:.1f}, max {m['test/return_max']:.1f}), "
            f"{m['test/seconds_per_episode']:.2f} s per episode"
        )
        if trainer.log_dir is not None:
            path = Path(trainer.log_dir) / "test_results.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(m, indent=2) + "\n")
            os.replace(tmp, path)
            print(f"test results written to {path}")
