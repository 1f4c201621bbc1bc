"""Validation and test metrics over deterministic episodes (one batch is one finished episode)."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torchmetrics import CatMetric, MeanMetric

class EpisodeMetrics(nn.Module):
    """``val/return``, ``val/episode_length``, ``val/terminated`` and the ``test/*`` summary with each test episode."""

    def __init__(self) -> None:
        super().__init__()
        self.val_return, self.val_length, self.val_terminated = MeanMetric(), MeanMetric(), MeanMetric()
        self.test_returns, self.test_lengths, self.test_terminated = CatMetric(), CatMetric(), CatMetric()
        self.test_seconds = MeanMetric()
        self.test_successes = CatMetric(nan_strategy="disable")

    def update_validation(self, batch: dict[str, Tensor]) -> None:
        self.val_return.update(batch["return"])
        self.val_length.update(batch["length"])
        self.val_terminated.update(batch["terminated"])

    def update_test(self, batch: dict[str, Tensor]) -> None:
        # each value 1-d: a rank with a single episode would otherwise gather a 0-d state under DDP,
        # which torchmetrics cannot size against the other ranks' 1-d ones
        self.test_returns.update(batch["return"].reshape(-1))
        self.test_lengths.update(batch["length"].reshape(-1))
        self.test_terminated.update(batch["terminated"].reshape(-1))
        self.test_seconds.update(batch["seconds"])
        self.test_successes.update(batch.get("success", torch.tensor(float("nan"))).reshape(-1))

    def compute_test(self) -> tuple[dict[str, Tensor | float], dict[str, list[float]]]:
        """The ``test/*`` metrics and the episodes (``episode_returns``, ``episode_lengths``, ``episode_terminated``,
        and ``episode_successes`` where the env reports ``info["is_success"]``); then start afresh.
        ``test/terminated`` is the share of episodes the env ended before its time limit."""
        returns = self.test_returns.compute().float().reshape(-1)
        lengths = self.test_lengths.compute().float().reshape(-1)
        terminated = self.test_terminated.compute().float().reshape(-1)
        successes = self.test_successes.compute().float().reshape(-1)
        std = returns.std(unbiased=False) if returns.numel() > 1 else torch.zeros(())
        metrics: dict[str, Tensor | float] = {
            "test/return": returns.mean(), "test/return_std": std, "test/return_min": returns.min(),
            "test/return_max": returns.max(), "test/episode_length": lengths.mean(),
            "test/terminated": terminated.mean(), "test/episodes": float(returns.numel()),
            "test/seconds_per_episode": self.test_seconds.compute(),
        }
        episodes = {"episode_returns": returns.tolist(), "episode_lengths": lengths.tolist(),
                    "episode_terminated": terminated.tolist()}
        if not successes.isnan().any():  # CarRacing: the lap was closed
            metrics["test/success_rate"] = successes.mean()
            episodes["episode_successes"] = successes.tolist()
        for metric in (self.test_returns, self.test_lengths, self.test_terminated, self.test_seconds,
                       self.test_successes):
            metric.reset()
        return metrics, episodes
