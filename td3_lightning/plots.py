"""The learning curve: training and evaluation return against training steps."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L

from td3_lightning.declarations import check_declared
from td3_lightning.checkpointing import MAX_NAME_BYTES, atomic_path
from td3_lightning.errors import UserInputError
from td3_lightning.stops import stop_signal


#: the formats of the plot, by file name ending
PLOT_FORMATS = (".png", ".svg", ".pdf", ".jpg")


def check_learning_curve_options(options: Mapping[str, Any]) -> None:
    """One clear line for a :class:`LearningCurve` option out of its declared range or of a file name that is no plot
    in the run folder (``options``: its arguments by name)."""
    name = options["filename"]
    if name and (Path(name).name != name or name in (".", "..")):
        raise UserInputError(f"learning_curve.filename must be a file name inside the run folder, without a folder, "
                             f"e.g. learning_curve.png; got {name!r}")
    if name and len(os.fsencode(name)) > MAX_NAME_BYTES:
        raise UserInputError(f"learning_curve.filename is too long for a file name ({len(os.fsencode(name))} bytes; "
                             f"at most {MAX_NAME_BYTES}): give a shorter one")
    if name and Path(name).suffix.lower() not in PLOT_FORMATS:
        raise UserInputError(f"learning_curve.filename must end in {', '.join(PLOT_FORMATS)}, got {name!r} "
                             "(empty: no plot)")
    check_declared("learning_curve", LearningCurve, options)


class LearningCurve(L.Callback):
    """Records every training episode's return and every evaluation's mean return, and at
    the end of ``fit`` draws both against training steps into ``<run folder>/learning_curve.png``.

    The points are kept in checkpoints, so the curve of a resumed run covers the whole run.

    Args:
        filename: file name of the plot inside the run folder, ending in .png, .svg, .pdf or .jpg (empty: no plot).
        smooth: window (in episodes) of the moving average drawn over the training returns (>= 1; 1 = no smoothing).
    """

    def __init__(self, filename: str = "learning_curve.png", smooth: int = 20) -> None:
        check_learning_curve_options(locals())
        self.filename = filename
        self.smooth = smooth
        self.train: list[tuple[int, float]] = []
        self.val: list[tuple[int, float]] = []
        self._seen_episodes = 0
        self._env_loop: Any = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from td3_lightning.envloop import EnvLoop

        loop = self._env_loop = next((c for c in trainer.callbacks if isinstance(c, EnvLoop)), None)
        if loop is not None and not self.train:  # warm-up episodes (random actions) are not drawn
            self._seen_episodes = loop.episodes

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        loop = self._env_loop
        if loop is not None and loop.episodes > self._seen_episodes:
            new = min(loop.episodes - self._seen_episodes, len(loop.recent_returns))
            self.train.extend((trainer.global_step, r)
                              for r in list(loop.recent_returns)[len(loop.recent_returns) - new :])
            self._seen_episodes = loop.episodes

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        value = trainer.callback_metrics.get("val/return")
        if trainer.state.fn == "fit" and value is not None and not trainer.sanity_checking:
            self.val.append((trainer.global_step, float(value)))

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._draw(trainer, trainer.log_dir)  # a collective under DDP: every rank asks

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        """A fit stopped by Ctrl-C or SIGTERM draws the curve so far (no collective: the ranks may be gone)."""
        if trainer.state.fn == "fit" and stop_signal(exception) is not None:
            self._draw(trainer, trainer.loggers[0].log_dir if trainer.loggers else trainer.default_root_dir)

    def _draw(self, trainer: L.Trainer, log_dir: str | None) -> None:
        if self.filename and trainer.global_rank == 0 and log_dir is not None and (self.train or self.val):
            path = draw_learning_curve(self.train, self.val, Path(log_dir) / self.filename, self.smooth)
            print(f"learning curve written to {path}")

    def state_dict(self) -> dict[str, Any]:
        return {"train": list(self.train), "val": list(self.val), "seen_episodes": self._seen_episodes}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.train = [tuple(p) for p in state_dict.get("train", [])]  # type: ignore[misc]
        self.val = [tuple(p) for p in state_dict.get("val", [])]  # type: ignore[misc]
        self._seen_episodes = int(state_dict.get("seen_episodes", 0))


def draw_learning_curve(
    train: list[tuple[int, float]], val: list[tuple[int, float]], path: Path, smooth: int = 20, title: str = ""
) -> Path:
    """Plot training returns (points and moving average) and evaluation returns to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    if train:
        steps, returns = np.array(train, dtype=float).T
        ax.scatter(steps, returns, s=6, alpha=0.35, color="tab:blue", label="training episode")
        if len(returns) >= smooth > 1:
            kernel = np.ones(smooth) / smooth
            ax.plot(steps[smooth - 1 :], np.convolve(returns, kernel, mode="valid"), color="tab:blue",
                    label=f"training, mean of {smooth} episodes")
    if val:
        steps, returns = np.array(val, dtype=float).T
        ax.plot(steps, returns, "o-", color="tab:orange", label="evaluation (deterministic)")
    ax.set_xlabel("training steps")
    ax.set_ylabel("episode return")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path
