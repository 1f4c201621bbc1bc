"""Callbacks for the command line: the progress line and the test report."""

from __future__ import annotations

import builtins
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ProgressBar

from td3_lightning.declarations import check_declared
from td3_lightning.checkpointing import atomic_path
from td3_lightning.envloop import EnvLoop


def time_left(step: int, max_steps: int | None, rate: float) -> str:
    """``", 12 min left"``: the training steps still to go at the rate so far (evaluations
    included in that rate); empty without a step budget or a rate yet."""
    if not max_steps or max_steps <= 0 or rate <= 0 or step >= max_steps:
        return ""
    minutes = (max_steps - step) / rate / 60
    return f", {minutes:.0f} min left" if minutes >= 1 else ", <1 min left"


def check_progress_bar_options(options: Mapping[str, Any]) -> None:
    """One clear line for a :class:`RLProgressBar` option out of its declared range (``options``: its arguments by
    name)."""
    check_declared("progress_bar", RLProgressBar, options)


class RLProgressBar(ProgressBar):
    """One status line for the whole run: training steps of ``max_steps``, steps/s, last
    episode return, last evaluation return, time so far and the time left.

    On a terminal the line is redrawn in place at most every ``refresh_seconds``; when the
    output is not a terminal (CI logs, files) a new line is printed every ``log_seconds``
    and after every evaluation, so logs stay short.

    Args:
        refresh_seconds: minimum time between redraws on a terminal (>= 0).
        log_seconds: time between lines when the output is not a terminal (>= 0; 0 = every step).
    """

    def __init__(self, refresh_seconds: float = 0.5, log_seconds: float = 30.0) -> None:
        super().__init__()
        check_progress_bar_options(locals())
        self.refresh_seconds = refresh_seconds
        self.log_seconds = log_seconds
        self._enabled = True
        self._last_draw = 0.0
        self._start: tuple[float, int] = (0.0, 0)
        self._tty = sys.stdout.isatty()
        self._drawn_step: int | None = None  # the step of the last line drawn
        self._line_open = False  # on a terminal: the last line drawn has no newline yet

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def print(self, *args: Any, sep: str | None = " ", end: str | None = "\n", file: Any = None,
              flush: bool = False) -> None:
        """``LightningModule.print``: the builtin print; on a terminal, the status line is cleared
        first, and the next status update draws it again below the printed line."""
        out = sys.stdout if file is None else file
        if out is sys.stdout and self._tty:
            out.write("\r\033[K")
            self._line_open = False
        builtins.print(*args, sep=sep, end=end, file=out, flush=True)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = (time.perf_counter(), trainer.global_step)

    def _line(self, trainer: L.Trainer) -> str:
        elapsed = time.perf_counter() - self._start[0]
        done = trainer.global_step - self._start[1]
        rate = done / elapsed if elapsed > 0 else 0.0
        total = f"/{trainer.max_steps}" if trainer.max_steps and trainer.max_steps > 0 else ""
        parts = [f"step {trainer.global_step}{total}", f"{rate:.0f} steps/s"]
        loop = next((c for c in trainer.callbacks if isinstance(c, EnvLoop)), None)
        if loop is not None and loop.last_episode_return is not None:
            parts.append(f"episodes {loop.episodes}, last return {loop.last_episode_return:.1f}")
        val = trainer.callback_metrics.get("val/return")
        if val is not None:
            parts.append(f"val/return {float(val):.1f}")
        parts.append(f"{elapsed / 60:.1f} min" + time_left(trainer.global_step, trainer.max_steps, rate))
        return " | ".join(parts)

    def _draw(self, trainer: L.Trainer, force: bool = False) -> None:
        if not self._enabled or trainer.global_rank != 0:
            return
        now = time.perf_counter()
        if not force and now - self._last_draw < (self.refresh_seconds if self._tty else self.log_seconds):
            return
        self._last_draw, self._drawn_step = now, trainer.global_step
        if self._tty:
            sys.stdout.write("\r\033[K" + self._line(trainer))
            self._line_open = True
        else:
            sys.stdout.write(self._line(trainer) + "\n")
        sys.stdout.flush()

    def _end_line(self, trainer: L.Trainer) -> None:
        if self._line_open and self._enabled and trainer.global_rank == 0:
            sys.stdout.write("\n")
            self._line_open = False

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any) -> None:
        self._draw(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":
            self._draw(trainer, force=True)
            self._end_line(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_line(trainer)  # before Lightning's "`Trainer.fit` stopped: `max_steps=N` reached."

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_line(trainer)

    def _last_line(self, trainer: L.Trainer) -> None:
        """The line of the step reached, once: a validation at that step, or the epoch's end, has drawn it already."""
        if self._drawn_step != trainer.global_step or self._line_open:
            self._draw(trainer, force=True)
        self._end_line(trainer)


#: the file ``test`` writes into its run folder
TEST_RESULTS = "test_results.json"


class TestReport(L.Callback):
    """After ``test``: prints one summary line and writes ``test_results.json`` into the run
    folder, for scripts: every ``test/*`` metric, and each episode's return, length and whether the env ended it
    (``episode_returns``, ``episode_lengths``, ``episode_terminated``; with one process, in the order the episodes
    finished, under DDP rank by rank). When the env reports gymnasium's ``info["is_success"]``
    (CarRacing: the lap was closed), also ``test/success_rate`` and ``episode_successes``."""

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_dir = trainer.log_dir  # a collective under DDP: every rank asks
        if trainer.global_rank != 0:
            return
        m = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}
        if "test/return" not in m:
            return
        print(
            f"test: {int(m['test/episodes'])} episode{'s' * (int(m['test/episodes']) != 1)}, "
            f"return {m['test/return']:.1f} ± {m['test/return_std']:.1f} "
            f"(min {m['test/return_min']:.1f}, max {m['test/return_max']:.1f}), "
            f"{round(m['test/terminated'] * m['test/episodes'])} ended by the env before its time limit, "
            + (f"{round(m['test/success_rate'] * m['test/episodes'])} successful (info['is_success']), "
               if "test/success_rate" in m else "")
            + f"{m['test/seconds_per_episode']:.2f} s per episode"
        )
        if log_dir is not None:
            path = Path(log_dir) / TEST_RESULTS
            results = {**m, **getattr(pl_module, "test_episodes", {})}
            with atomic_path(path) as tmp:
                tmp.write_text(json.dumps(results, indent=2) + "\n")
            print(f"test results written to {path}")


class ReportValReturn(L.Callback):
    """Reports ``val/return`` to an Optuna trial at each validation (step = the training step)
    and, when the pruner says so, stops training the way Lightning stops any run
    (``trainer.should_stop``): the run's checkpoints and logs are written completely, and
    :func:`td3_lightning.tune.run_trial` raises ``optuna.TrialPruned`` once ``fit`` has returned."""

    def __init__(self, trial: Any) -> None:  # an optuna.Trial
        self.trial, self.metric = trial, "val/return"
        self.last_value: float | None = None
        self.pruned_at: int | None = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or self.metric not in trainer.callback_metrics:
            return
        value = float(trainer.callback_metrics[self.metric])
        self.last_value = value
        self.trial.report(value, step=trainer.global_step)
        if self.trial.should_prune():
            self.pruned_at = trainer.global_step
            trainer.should_stop = True
