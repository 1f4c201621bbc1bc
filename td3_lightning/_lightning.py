"""Every use of a Lightning private attribute or method, in one place.

Lightning's public API does not (yet) offer these; each function names what it reaches and
why, and ``tests/test_lightning_compat.py`` has a test per function that fails loudly if a
Lightning release changes it. ``constraints.txt`` pins the Lightning version CI tests and
``pyproject.toml`` accepts only that minor release.
"""

from __future__ import annotations

import ast
from typing import Any

import lightning as L


# ---------------------------------------------------------------- the update around Lightning's hooks
def lightning_optimizers(trainer: L.Trainer) -> list[Any]:
    """The strategy's ``LightningOptimizer`` wrappers (``Strategy._lightning_optimizers``): the
    objects whose step hooks count ``global_step`` in manual optimization."""
    return list(trainer.strategy._lightning_optimizers)


def step_counting_hooks_exist(trainer: L.Trainer) -> bool:
    """Whether every ``LightningOptimizer`` has the ``_on_before_step`` / ``_on_after_step`` hooks
    that the manual-optimization loop sets to count optimizer steps (what :func:`count_optimizer_step`
    calls)."""
    return all(hasattr(opt, "_on_before_step") and hasattr(opt, "_on_after_step")
               for opt in lightning_optimizers(trainer))


def count_optimizer_step(optimizer: Any) -> None:
    """Count one optimizer step as ``LightningOptimizer.step`` would (``_on_before_step`` and
    ``_on_after_step``: ``global_step`` + 1, the profiler's ``optimizer_step``), for a step taken on
    the wrapped torch optimizer directly."""
    optimizer._on_before_step()
    optimizer._on_after_step()


def runs_under_fabric(module: L.LightningModule) -> bool:
    """Whether the module is driven by Lightning Fabric (``LightningModule._fabric``), where the
    Trainer's hooks do not apply."""
    return getattr(module, "_fabric", None) is not None


# ---------------------------------------------------------------- checkpoints
def save_last_checkpoint_now(callback: Any, trainer: L.Trainer) -> None:
    """Write ``last.ckpt`` through ``callback`` (a ``ModelCheckpoint``) now (at the end of a validation, or of
    training) unless it already saved at this step or saves at epoch ends (``_should_skip_saving_checkpoint``,
    ``_should_save_on_train_epoch_end``, ``_save_last_checkpoint``, ``_monitor_candidates``):
    Lightning refreshes ``last.ckpt`` only when a top-k checkpoint was written."""
    if callback._should_skip_saving_checkpoint(trainer) or callback._should_save_on_train_epoch_end(trainer):
        return
    callback._save_last_checkpoint(trainer, callback._monitor_candidates(trainer))


def checkpoint_state_mode(state_key: str) -> str | None:
    """The ``mode`` in the key a ``ModelCheckpoint`` files its state under in a checkpoint's ``callbacks``
    (``Callback.state_key``: the class name and a dict of its arguments, ``ModelCheckpoint{'monitor': ..., 'mode':
    'max', ...}``), or None: for a checkpoint that does not record the mode in the state itself."""
    try:
        mode = ast.literal_eval(state_key[state_key.index("{"):]).get("mode")
    except (ValueError, SyntaxError, AttributeError, TypeError):
        return None
    return mode if mode in ("min", "max") else None


from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402


class ModelCheckpointHooks(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` whose private ``_save_checkpoint`` (every file it writes) calls
    :meth:`save_checkpoint_file`, for subclasses to override."""

    def save_checkpoint_file(self, trainer: L.Trainer, filepath: str, save: Any) -> None:
        """``save(trainer, filepath)`` is Lightning's step that writes the file."""
        save(trainer, filepath)

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        self.save_checkpoint_file(trainer, filepath, super()._save_checkpoint)


# ---------------------------------------------------------------- the command line
from lightning.pytorch.cli import LightningCLI  # noqa: E402


class LightningCLIHooks(LightningCLI):
    """``LightningCLI`` whose private steps call methods with public names, for subclasses to
    override: ``_parse_ckpt_path`` (the checkpoint's hyperparameters into the config) calls
    :meth:`read_checkpoint_hparams`, ``_set_seed`` calls :meth:`set_seed`, and
    ``_instantiate_trainer`` passes its callbacks through :meth:`trainer_callbacks`, and ``_run_subcommand`` calls
    :meth:`run_subcommand`."""

    def read_checkpoint_hparams(self, read: Any) -> None:
        """Runs before anything is instantiated; ``read()`` is LightningCLI's own step."""
        read()

    def set_seed(self, seed: Any) -> None:
        """``seed()`` is LightningCLI's ``seed_everything`` step."""
        seed()

    def trainer_callbacks(self, config: dict[str, Any], callbacks: list[Any]) -> list[Any]:
        """The callbacks the Trainer is built with (``config``: the Trainer's arguments)."""
        return callbacks

    def run_subcommand(self, subcommand: str, run: Any) -> None:
        """``run(subcommand)`` is LightningCLI's step that calls the Trainer's method (fit, validate, test)."""
        run(subcommand)

    def read_checkpoint_hparams_now(self) -> None:
        """LightningCLI's checkpoint step (:meth:`read_checkpoint_hparams`) run now, e.g. inside
        :meth:`parse_arguments` before ``--print_config`` prints."""
        self._parse_ckpt_path()

    def _run_subcommand(self, subcommand: str) -> None:
        self.run_subcommand(subcommand, super()._run_subcommand)

    def _parse_ckpt_path(self) -> None:
        self.read_checkpoint_hparams(super()._parse_ckpt_path)

    def _set_seed(self) -> None:
        self.set_seed(super()._set_seed)

    def _instantiate_trainer(self, config: dict[str, Any], callbacks: list[Any]) -> Any:
        return super()._instantiate_trainer(config, self.trainer_callbacks(config, callbacks))


def cli_config_value(cli: LightningCLI, config: Any, key: str, default: Any = None) -> Any:
    """``key`` of ``config`` (a parsed or instantiated config), read inside the running subcommand's
    section when there is one (``LightningCLI._get``)."""
    return cli._get(config, key, default=default)


def _option_actions(cli: LightningCLI, args: Any) -> dict[str, Any]:
    """``--option`` -> its argparse action, of the subcommand named in ``args`` (LightningCLI's
    ``_subcommand_parsers``, argparse's ``_option_string_actions``)."""
    parser = cli.parser
    subparsers = getattr(cli, "_subcommand_parsers", {})
    for arg in args or []:
        if isinstance(arg, str) and arg in subparsers:
            parser = subparsers[arg]
            break
    return {o: a for o, a in getattr(parser, "_option_string_actions", {}).items() if o.startswith("--")}


def cli_option_names(cli: LightningCLI, args: Any) -> list[str]:
    """Every ``--option`` of the subcommand named in ``args``, for "did you mean"."""
    return list(_option_actions(cli, args))


def cli_option_types(cli: LightningCLI, args: Any) -> dict[str, tuple[Any, str]]:
    """Every ``--option`` of the subcommand named in ``args`` -> its type hint (jsonargparse's
    ``ActionTypeHint._typehint``; None for options without one, e.g. ``--config``) and its help text,
    for tests that walk the options."""
    return {o: (getattr(a, "_typehint", None), a.help or "") for o, a in _option_actions(cli, args).items()}


# ---------------------------------------------------------------- the training loop's batch counters
def count_extra_batches(trainer: L.Trainer, extra: int) -> None:
    """Count ``extra`` more training batches in the fit loop (``epoch_loop.batch_progress`` and
    ``epoch_loop._batches_that_stepped``), so that a Lightning batch of several training steps
    counts as that many batches: validation intervals, ``batch_idx`` and the logging step then
    count training steps."""
    loop = trainer.fit_loop.epoch_loop
    loop.batch_progress.increment_by(extra, is_last_batch=loop.batch_progress.is_last_batch)
    loop._batches_that_stepped += extra


def align_batch_count(trainer: L.Trainer) -> None:
    """Raise the fit loop's batch count to ``global_step`` if it lags behind (a checkpoint that
    counted a batch of several training steps as one batch)."""
    progress = trainer.fit_loop.epoch_loop.batch_progress
    behind = trainer.global_step - progress.total.ready  # ready: completed lags by one if saved mid-batch
    if behind > 0:
        progress.increment_by(behind, is_last_batch=progress.is_last_batch)


def val_check_is_a_time(trainer: L.Trainer) -> bool:
    """Whether ``val_check_interval`` was given as a time (``Trainer._val_check_time_interval``)."""
    return trainer._val_check_time_interval is not None


def every_n_train_steps(callback: Any) -> int:
    """A ``ModelCheckpoint``'s step interval (``_every_n_train_steps``; 0 when it has none)."""
    return int(getattr(callback, "_every_n_train_steps", 0) or 0)


# ---------------------------------------------------------------- TensorBoard
def tensorboard_file_writer(experiment: Any) -> Any:
    """The event-file writer of a ``SummaryWriter`` (``_get_file_writer``), which takes a
    hand-built ``Summary`` (an animated GIF) where the public ``add_*`` methods take frames only
    as still images or as video that TensorBoard shows only with moviepy."""
    return experiment._get_file_writer()
