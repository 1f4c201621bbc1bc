"""Deterministic evaluation episodes: what ``validate`` and ``test`` (and validation during ``fit``) play."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import IterableDataset

from td3_lightning.video import video_fps

Policy = Callable[[np.ndarray], np.ndarray]


def numpy_policy(actor: torch.nn.Module, device: torch.device | str = "cpu") -> Policy:
    """``actor`` (batched tensors) as a deterministic ``obs -> action`` on numpy arrays, one observation at a time."""
    def act(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return actor(torch.as_tensor(obs, device=device).unsqueeze(0))[0].cpu().numpy()

    return act


def run_episode(
    env: gym.Env, policy: Policy, seed: int | None, frames: list[np.ndarray] | None = None
) -> dict[str, float]:
    """Play one episode with ``policy``; return its return, length, wall-clock seconds,
    ``terminated`` (1.0 when the env ended the episode itself: a fall, a crash, a goal; 0.0 at its time limit) and
    ``success`` (the last step's ``info["is_success"]``, gymnasium's convention, as 1.0 or 0.0;
    NaN when the env does not report it: CarRacing's closed lap does).

    With ``frames`` (the env made with ``render_mode="rgb_array"``), every rendered frame,
    the first observation's included, is appended to it.
    """
    start = time.perf_counter()
    obs, info = env.reset(seed=seed)
    if frames is not None:
        frames.append(env.render())
    total, length, done, terminated = 0.0, 0, False, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        total += float(reward)
        length += 1
        done = terminated or truncated
        if frames is not None:
            frames.append(env.render())
    success = float(bool(info["is_success"])) if "is_success" in info else math.nan
    return {"return": total, "length": float(length), "seconds": time.perf_counter() - start,
            "terminated": float(bool(terminated)), "success": success}


#: called with ``(episode index, seed, frames, fps, stats)`` for each recorded episode
VideoSink = Callable[[int, int, list[np.ndarray], float, dict[str, float]], None]


class EpisodeStream(IterableDataset):
    """Yields one finished episode per item: ``{"return", "length", "seconds", "terminated", "success", "seed"}``.

    Args:
        env_fn: the env to play.
        policy: observation -> action.
        seeds: env seed of each episode.
        record: how many of the first episodes to record (played on ``video_env_fn()``), or a
            function called at the start of each pass that returns it.
        video_env_fn: the same env with ``render_mode="rgb_array"``.
        on_video: called with ``(episode index, seed, frames, fps, stats)`` for each
            recorded episode.
    """

    def __init__(
        self,
        env_fn: Callable[[], gym.Env],
        policy: Policy,
        seeds: list[int],
        record: int | Callable[[], int] = 0,
        video_env_fn: Callable[[], gym.Env] | None = None,
        on_video: VideoSink | None = None,
    ) -> None:
        self.env_fn, self.policy, self.seeds = env_fn, policy, seeds
        self.record, self.video_env_fn, self.on_video = record, video_env_fn, on_video

    def __len__(self) -> int:
        return len(self.seeds)

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        env = self.env_fn()
        record = self.record() if callable(self.record) else self.record
        for i, seed in enumerate(self.seeds):
            if i < record and self.video_env_fn is not None and self.on_video is not None:
                video_env = self.video_env_fn()
                frames: list[np.ndarray] = []
                stats = run_episode(video_env, self.policy, seed, frames)
                self.on_video(i, seed, frames, video_fps(video_env), stats)
                video_env.close()
            else:
                stats = run_episode(env, self.policy, seed)
            yield {k: torch.tensor(v, dtype=torch.float64) for k, v in {**stats, "seed": seed}.items()}
