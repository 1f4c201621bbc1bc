"""A callback for the DDP tests: each rank writes what it holds at the end of ``fit``."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import torch


class RankProbe(L.Callback):
    """Writes ``rank<r>.json`` into ``folder``: a checksum of the weights, the replay's
    first rewards and the env loop's counters."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        weights = torch.cat([p.detach().reshape(-1).double() for p in pl_module.state_dict().values()])
        loop = next(c for c in trainer.callbacks if type(c).__name__ == "EnvLoop")
        buffer = trainer.datamodule.buffer
        info = {
            "weights_sum": float(weights.sum()),
            "weights_abs_sum": float(weights.abs().sum()),
            "replay_rewards": buffer.reward[:5].tolist(),
            "replay_size": len(buffer),
            "env_steps": loop.env_steps,
            "base_seed": loop.base_seed,
        }
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"rank{trainer.global_rank}.json").write_text(json.dumps(info))
