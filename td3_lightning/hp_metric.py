"""``hp_metric`` = the mean validation return, so TensorBoard's HPARAMS tab compares runs by it."""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger


class HpMetric(L.Callback):
    """Logs ``hp_metric`` (the mean ``val/return``) at every validation of a ``fit``; the first
    one also writes the hyperparameters with it to every TensorBoard logger.

    Pair it with ``TensorBoardLogger(default_hp_metric=False)`` (the command line's default
    logger), so that TensorBoard shows no ``-1`` placeholder before the first validation.
    """

    def __init__(self) -> None:
        self._written = False

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._written = False

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # TD3's mean validation return, synced over ranks
        metric = getattr(getattr(pl_module, "episode_metrics", None), "val_return", None)
        if trainer.sanity_checking or trainer.state.fn != "fit" or metric is None or metric.update_count == 0:
            return
        value = metric.compute()
        if self._written:
            pl_module.log("hp_metric", float(value), sync_dist=True)  # the same value on every rank
            return
        self._written = True  # on every rank: the first value goes with the hyperparameters
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.log_hyperparams(dict(logger.hparams), {"hp_metric": float(value)}, step=trainer.global_step)

    def state_dict(self) -> dict[str, Any]:
        return {}
