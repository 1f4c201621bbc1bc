"""The command line: ``python -m td3_lightning fit|validate|test --config <yaml>``.

A LightningCLI with the TD3 module and the replay datamodule, the env's observation shape
and action bounds linked into the model, RL-friendly trainer defaults, atomic checkpoint
writes, ``--ckpt_path last`` across runs, and errors from bad input (options, config files,
checkpoints) printed as one line.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import logging
import os
import random
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import yaml
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch import __version__ as lightning_version
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from td3_lightning import commands
from td3_lightning._lightning import LightningCLIHooks, cli_config_value, cli_option_names
from td3_lightning.callbacks import TEST_RESULTS, RLProgressBar, TestReport, check_progress_bar_options
from td3_lightning.captured import check_capture_options
from td3_lightning.envloop import EnvLoop
from td3_lightning.checkpointing import (
    BEST_FILENAME,
    HOW_IT_RUNS,
    LINKED_FROM_DATA,
    RESUME_MAY_CHANGE,
    SELECTION_FILE,
    ModelCheckpoint,
    atomic_path,
    best_of_run,
    check_checkpoint,
    check_checkpoint_filename,
    find_run_checkpoint,
    is_write_refusal,
    options_as_trained,
    options_of_the_run,
    same_option,
    selected_checkpoint,
    with_atomic_checkpoint_io,
)
from td3_lightning.data import ReplayDataModule, check_buffer_device, check_data_options
from td3_lightning.declarations import signature_defaults
from td3_lightning.errors import UserInputError, package_file, shipped_path, warning_lines
from td3_lightning.hp_metric import HpMetric
from td3_lightning.hparams import check_model_files, check_model_options
from td3_lightning.module import TD3
from td3_lightning.plots import LearningCurve, check_learning_curve_options
from td3_lightning.run_lock import RunLock, refuse_if_training
from td3_lightning.selection import CheckpointSelection, check_seed_ranges, check_selection_options
from td3_lightning.stops import StopNotice, kept_ctrl_c, refusal_of, standing_of, stop_of
from td3_lightning.trainer_options import (
    SEED_RANGE,
    check_seed,
    check_trainer_options,
    lightning_refusal,
    max_time_seconds,
)
from td3_lightning.user_input import one_line_parse_error, resolve_config_args, shown
from td3_lightning.validation import checkpoint_of_another_env, validate_run

TRAINER_DEFAULTS: dict[str, Any] = {
    "max_steps": 100_000,  # training steps = env steps after the warm-up
    "val_check_interval": 5_000,  # evaluate every 5000 env steps
    "check_val_every_n_epoch": None,  # the replay stream is one endless epoch
    "num_sanity_val_steps": 0,
    "log_every_n_steps": 500,
    "enable_model_summary": False,  # the progress line is the output; --trainer.enable_model_summary true shows it
}

# The default checkpointing: last.ckpt plus the best checkpoint by val/return.
CHECKPOINT_DEFAULTS: dict[str, Any] = {
    "checkpoint.monitor": "val/return",
    "checkpoint.mode": "max",
    "checkpoint.save_last": True,
    "checkpoint.save_top_k": 1,
    "checkpoint.filename": BEST_FILENAME,
    "checkpoint.auto_insert_metric_name": False,
}


#: Warnings that say nothing a user can act on, hidden by the command line (importing the package
#: changes no warning filter): the target networks stay in eval mode; the endless replay stream
#: reports a length so that Lightning samples each batch right before it is used; checkpoints hold
#: the state after the step's optimizer updates, which is what resuming needs; a deprecation inside
#: Lightning's own code; the resolved arguments are passed to LightningCLI explicitly (they are
#: sys.argv's, not a second set); every run (a resume, a test) writes into a run folder of its own,
#: so the checkpoint callback's folder always differs from the one a checkpoint was saved in; a run's
#: time limit (Lightning's Timer) is not needed to test its checkpoint or to resume it without one; 16-mixed
#: runs as bf16-mixed on a CPU, as --help says, and 16 is 16-mixed.
EXPECTED_WARNINGS = (
    r"Found \d+ module\(s\) in eval mode",
    r"Your `IterableDataset` has `__len__` defined",
    r".*isinstance\(treespec, LeafSpec\)",
    r"Using ModelCheckpoint with manual optimization",
    r"LightningCLI's args parameter is intended",
    r"The dirpath has changed from",
    r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided during "
    r"`Trainer` instantiation\. Please add the following callbacks: \['Timer'\]",
    r"You passed `Trainer\(accelerator='cpu', precision='16-mixed'\)` but AMP with fp16 is not supported on CPU",
    r"`precision=16` is supported for historical reasons",
)

#: Lightning's warning that a checkpoint's callbacks (another checkpoint.monitor's, a Timer) are not in this run
PLAYED_CHECKPOINT_CALLBACKS = r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint"

#: Lightning's info lines that say nothing a user can act on: advertisements of services, accelerators
#: that this machine does not have, and the checkpoint path said before the line that says it was loaded.
UNASKED_LINES = ("💡 Tip:", "GPU available: False", "TPU available: False", "HPU available: False",
                 "Restoring states from the checkpoint path at")

# the loggers of Lightning's rank_zero_info (the fabric's and the trainer's)
RANK_ZERO_LOGS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


def _said_unasked(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(UNASKED_LINES)


def ignore_expected_warnings() -> None:
    """Hide :data:`EXPECTED_WARNINGS` and :data:`UNASKED_LINES` in this process (what every subcommand
    does first)."""
    for message in EXPECTED_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    for name in RANK_ZERO_LOGS:
        logger = logging.getLogger(name)
        if _said_unasked not in logger.filters:
            logger.addFilter(_said_unasked)


_SEED_LOG = logging.getLogger("lightning.fabric.utilities.seed")

# --ckpt_path values that Lightning resolves itself (besides "last" and "best", which the CLI resolves)
_LIGHTNING_CKPT_NAMES = ("hpc", "registry")


def _launched_apart(trainer: Any) -> bool:
    """Whether this run's processes were started apart from each other (each parses the command line itself)."""
    world = max(int(os.environ.get(k, "1") or 1) for k in ("WORLD_SIZE", "SLURM_NTASKS"))
    return world > 1 or int(trainer.get("num_nodes") or 1) > 1


class SaveRunConfig(SaveConfigCallback):
    """Lightning's ``config.yaml`` of a run, written neither over a ``--config`` file nor into another run's folder."""

    def __init__(self, parser: LightningArgumentParser, config: Any, **kwargs: Any) -> None:
        self.resumed_from = config.get("ckpt_path")
        super().__init__(parser, config, **kwargs)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if trainer.logger is None and stage in ("validate", "test"):
            return  # no folder of its own: the config.yaml of default_root_dir (a fit's, or yours) stays as it is
        save = self.parser.save

        def atomic_save(config: Any, path: str, **kwargs: Any) -> None:  # a full disk leaves no half-written file
            if "://" in str(path):  # a remote folder: jsonargparse writes it
                save(config, path, **kwargs)
                return
            with atomic_path(path, suffix=".tmp.yaml") as tmp:
                save(config, str(tmp), **{**kwargs, "overwrite": True})  # over the temporary file

        with mock.patch.object(self.parser, "save", atomic_save):
            super().setup(trainer, pl_module, stage)

    def check_run_folder(self, trainer: Trainer, config_files: list[str], subcommand: str | None) -> None:
        """Nothing is written over a ``--config`` file (a run without a logger writes into default_root_dir), nor a
        test without a logger over a ``test_results.json``; a new fit refuses a TensorBoard or CSV log folder that
        holds another run (a logger version given twice), or without a logger a folder that holds a run's files; a
        resumed fit, or a requeued SLURM job, continues there. ``subcommand`` is None for tune's builds of a
        trial's trainer, which check like a fit but name no job folder."""
        log_dir = trainer.log_dir
        if log_dir is None:
            return
        if trainer.logger is None and subcommand in ("validate", "test"):  # into default_root_dir, no config.yaml
            if subcommand == "test" and Path(log_dir, TEST_RESULTS).exists():
                raise UserInputError(f"{log_dir} already holds {TEST_RESULTS}, which test without a logger writes "
                                     "there; move it away, or keep a logger (each test then writes into a folder "
                                     "of its own)")
            return
        target = Path(log_dir, self.config_filename)
        if target.is_file() and target.resolve() in {Path(f).resolve() for f in config_files}:
            raise UserInputError(f"the run would write its {self.config_filename} over --config {target}; give "
                                 "another --trainer.default_root_dir, or keep your config file elsewhere")
        job = SLURMEnvironment.job_id()
        fit = subcommand in ("fit", None)
        if not fit and isinstance(trainer.logger, (TensorBoardLogger, CSVLogger)) and target.is_file() and (
                there := [name for name in ("checkpoints", TEST_RESULTS) if Path(log_dir, name).exists()]):
            raise UserInputError(f"{log_dir} already holds a run ({', '.join(there)}), whose {self.config_filename} "
                                 f"{subcommand} would write over; give another --trainer.logger.init_args.version "
                                 "(or none: a new version_N)")
        if not fit or self.resumed_from or (job is not None and _requeued(Path(trainer.default_root_dir))):
            return  # a requeued SLURM job goes on in its folder (from its hpc_ckpt, if it wrote one)
        if trainer.logger is None:  # no log folder of its own: the run writes into default_root_dir itself
            there = _run_files(trainer, Path(log_dir))
            if there:
                raise UserInputError(
                    f"{log_dir} already holds {', '.join(there)}, which a run without a logger writes there; give a "
                    "new --trainer.default_root_dir (or keep a logger), or continue that run with --ckpt_path")
            return
        if not isinstance(trainer.logger, (TensorBoardLogger, CSVLogger)) or not target.is_file():
            return
        if job is not None:  # the folder is named after the job: a second fit of the job would write into the first's
            if int(os.environ.get("SLURM_NTASKS") or 1) > 1 or subcommand is None:  # the tasks of one step: rank 0 may
                return  # have written it now; tune: its trials have folders of their own, its dry builds write none
            raise UserInputError(
                f"{log_dir} already holds a run of SLURM job {job} ({self.config_filename}); a second fit in one job "
                "needs a folder of its own: give it another --trainer.default_root_dir, or continue that run with "
                "--ckpt_path")
        raise UserInputError(
            f"{log_dir} already holds a run ({self.config_filename}); give another "
            "--trainer.logger.init_args.version (or none: a new version_N), or continue that run with --ckpt_path")


def _job_play_version(logs: Path, name: str) -> str:
    """``name``, or ``name_2``, ``name_3``, ... : the first that ``logs`` does not hold yet."""
    version, n = name, 1
    while (logs / version).exists():
        n += 1
        version = f"{name}_{n}"
    return version


def _requeued(folder: Path) -> bool:
    """Whether this SLURM job is a requeued one (SLURM counts its restarts), or left its hpc_ckpt in ``folder``."""
    return int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0 or any(folder.glob("hpc_ckpt_*.ckpt"))


def _run_files(trainer: Trainer, folder: Path) -> list[str]:
    """What of a run's own files (config, learning curve, test results, checkpoints) ``folder`` already holds."""
    names = ["config.yaml", TEST_RESULTS,
             *(c.filename for c in trainer.callbacks if isinstance(c, LearningCurve) and c.filename)]
    found = [name for name in names if (folder / name).exists()]
    checkpoints = next((c.dirpath for c in trainer.callbacks if isinstance(c, ModelCheckpoint) and c.dirpath), None)
    checkpoints = Path(checkpoints) if checkpoints else folder / "checkpoints"
    if checkpoints.is_dir() and any(checkpoints.glob("*.ckpt")):
        found.append(f"checkpoints ({checkpoints})")
    return found


class TD3CLI(LightningCLIHooks):
    """LightningCLI for TD3: the module, the replay datamodule and a default checkpoint callback.

    On top of LightningCLI: checkpoints are written atomically (:class:`AtomicCheckpointIO`
    unless the user passes a ``CheckpointIO`` plugin); ``--ckpt_path last`` means the newest
    ``last.ckpt`` of earlier runs, ``--ckpt_path best`` the newest run's best checkpoint by
    ``val/return`` (over the runs it resumed too) or the one ``--selection.episodes`` chose (what
    ``validate`` and ``test`` take without ``--ckpt_path``); a checkpoint is read and checked (readable, TD3,
    format version, env shapes, buffer size) before anything is built or written; parse errors are
    raised as :class:`UserInputError` with one line.
    """

    _ckpt_facts: dict[str, Any] | None = None
    _notes: tuple[str, ...] = ()  # said once the input has passed every check
    _given_model_options: tuple[str, ...] = ()  # the --model.* options on the command line
    _printing = False  # --print_config: the options are resolved and checked, then printed
    _print_as_given = False  # --print_config found no checkpoint to read: jsonargparse prints the options as given
    _argv: list[str] = []  # the command line parsed (for the command that goes on after a stop)
    _ckpt_on_command_line = False  # --ckpt_path given on the command line (not only in a --config file)
    _checkpoint_line: str = ""  # which file --ckpt_path last|best chose
    _warnings: tuple[str, ...] = ()  # warned of once the input has passed every check
    _said_by_search: frozenset[str] = frozenset()  # model options --ckpt_path last|best's search warned of
    _seeded = False  # set_seed ran ("Seed set to N" is said when the Trainer is built)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        given = kwargs.get("args") or []
        if given and isinstance(given[0], str) and given[0] in commands.TRAINER_SUBCOMMANDS:
            # LightningCLI builds a parser for each of subcommands(), a third of the start-up each: only the named
            only = {given[0]: self.subcommands()[given[0]]}
            self.subcommands = lambda: only  # type: ignore[method-assign]
        super().__init__(*args, **kwargs)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """LightningCLI's subcommands less ``predict`` (a policy is evaluated by validate and test)."""
        return {name: skip for name, skip in LightningCLI.subcommands().items() if name in commands.TRAINER_SUBCOMMANDS}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(RLProgressBar, "progress_bar")
        parser.add_lightning_class_args(TestReport, "test_report")
        parser.add_lightning_class_args(LearningCurve, "learning_curve")
        parser.add_lightning_class_args(CheckpointSelection, "selection")  # last: after every hook of the others
        parser.set_defaults(CHECKPOINT_DEFAULTS)
        for name in LINKED_FROM_DATA:
            parser.link_arguments(f"data.{name}", f"model.{name}", apply_on="instantiate")

    # ------------------------------------------------------------- parsing
    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse; the options are checked once the checkpoint is resolved (:meth:`read_checkpoint_hparams`). With
        ``--print_config`` they are resolved and checked first: a run that plays or resumes a checkpoint prints the
        configuration it runs with, the checkpoint's model options and file included (jsonargparse's own print
        knows neither); without a checkpoint to read (none yet: a config template) jsonargparse prints them as
        given."""
        argv = self._argv = list(args) if isinstance(args, (list, tuple)) else sys.argv[1:] if args is None else []
        printing = [a for a in argv if a == "--print_config" or a.startswith("--print_config=")]
        if printing:  # jsonargparse prints and exits while parsing, before any check
            self._printing = True
            self.parse_arguments(parser, [a for a in argv if a not in printing])
            self.read_checkpoint_hparams_now()
            subcommand = self.config.get("subcommand")
            if subcommand and self.config[subcommand].get("ckpt_path") is not None and not self._print_as_given:
                section = yaml.safe_load(parser.dump(self.config, skip_none="skip_null" in printing[-1],
                                                     format="yaml"))[subcommand]
                sys.stdout.write(f"# lightning.pytorch=={lightning_version}\n"
                                 + yaml.safe_dump(section, sort_keys=False))
                raise SystemExit(0)
        try:
            super().parse_arguments(parser, args)
        except argparse.ArgumentError as err:
            raise UserInputError(one_line_parse_error(str(err), cli_option_names(self, args),
                                                      whole_number_hint=True)) from None
        self._given_model_options = given_model_options(argv)
        self._ckpt_on_command_line = any(a == "--ckpt_path" or a.startswith("--ckpt_path=") for a in argv)

    # ------------------------------------------------------------- the checkpoint, before anything is built
    def read_checkpoint_hparams(self, read: Any) -> None:
        """Resolve and read the checkpoint (``read()``: its model options replace the configured ones), then check
        every option once (:func:`check_options`): the options as given, but for a resume's model options, which
        are its checkpoint's (a given one that differs is refused first). Nothing is built or written yet."""
        subcommand = self.config.get("subcommand")
        try:
            ckpt = self._resolve_checkpoint(subcommand) if subcommand else None
        except UserInputError:
            named = self.config[subcommand].get("ckpt_path") not in (None, "last", "best", *_LIGHTNING_CKPT_NAMES)
            if not self._printing or named:  # a file given: refused as the run would refuse it
                raise
            ckpt, self._print_as_given = None, True  # --print_config of a config template: printed as given
        typed = (self.config[subcommand] if subcommand else self.config).clone()
        # the checkpoint's hyperparameters replace the configured ones, except resets asked for now (resuming a
        # stuck run with --model.reset_steps is what the option is for) and how this run computes the update
        model = self.config[subcommand]["model"] if subcommand else {}
        resets = list(model.get("reset_steps") or [])
        # how this run computes the update (configured), and the schedules' length where given now (a resume that
        # moves trainer.max_steps would move schedules over the run's length)
        kept = {key: model.get(key) for key in HOW_IT_RUNS if model.get(key) is not None}
        if "schedule_steps" in self._given_model_options:
            kept["schedule_steps"] = model.get("schedule_steps")
        may_change = RESUME_MAY_CHANGE if subcommand == "fit" else HOW_IT_RUNS  # a played policy: how it computes only
        given = {key: model.get(key) for key in self._given_model_options
                 if key not in may_change} if subcommand and ckpt is not None else {}
        try:
            if not self._print_as_given:  # a checkpoint that could not be resolved is not read
                read()  # the checkpoint's model hyperparameters into the config
        except argparse.ArgumentError as err:
            raise UserInputError(
                f"checkpoint {ckpt}: its model hyperparameters do not fit TD3 ({one_line_parse_error(str(err))})"
            ) from None
        if self._ckpt_facts is not None and self._ckpt_facts["model"]:  # options it predates: their defaults
            self._set_predated_model_options(self.config[subcommand]["model"], self._ckpt_facts["model"])
        if given:
            self._refuse_replaced_options(subcommand, ckpt, given)
        saved_schedule = self.config[subcommand]["model"].get("schedule_steps") if subcommand else None
        for key, value in kept.items():
            self.config[subcommand]["model"][key] = value
        if ckpt is not None and "schedule_steps" in kept and kept["schedule_steps"] != saved_schedule:
            steps = kept["schedule_steps"]
            at = "trainer.max_steps" if steps is None else f"training step {steps}"
            self._notes += (f"model.schedule_steps {shown(steps)} (given) replaces the checkpoint's "
                            f"{shown(saved_schedule)}: the schedules reach their final values at {at}",)
        if subcommand == "fit" and ckpt is None:
            self._record_teacher_where_found(self.config[subcommand]["model"])
        max_steps = (self.config[subcommand].get("trainer") or {}).get("max_steps") if subcommand == "fit" else None
        done = (self._ckpt_facts or {}).get("global_step", 0)
        if max_steps is not None and max_steps != -1 and done >= max_steps:
            self._warnings += (f"the checkpoint ({ckpt}) is at training step {done}, at or past trainer.max_steps "
                               f"{max_steps}: nothing is left to train; raise --trainer.max_steps to train on",)
        max_time = (self.config[subcommand].get("trainer") or {}).get("max_time") if subcommand == "fit" else None
        limit, spent = max_time_seconds(max_time), (self._ckpt_facts or {}).get("train_seconds")
        if limit is not None and spent is not None and spent >= limit:
            self._warnings += (f"the checkpoint ({ckpt}) has trained for {datetime.timedelta(seconds=round(spent))}, "
                               f"at or past trainer.max_time {max_time} (a resumed run's clock goes on): nothing is "
                               "left to train; raise --trainer.max_time to train on",)
        saved = list(self.config[subcommand]["model"].get("reset_steps") or []) if subcommand else []
        asked = resets or "reset_steps" in self._given_model_options  # [] on the command line: no reset
        if asked and saved != resets:
            self.config[subcommand]["model"]["reset_steps"] = resets
            then = (f"the networks start over after training step{'s' if len(resets) > 1 else ''} "
                    f"{', '.join(map(str, resets))} (any the checkpoint has passed are skipped)" if resets
                    else "no network reset")
            self._notes += f"model.reset_steps {resets} (configured) replaces the checkpoint's {saved}: {then}",
        if subcommand == "fit" and ckpt is not None:  # a resume trains its checkpoint's model (given ones refused)
            typed["model"] = self.config[subcommand]["model"].clone()
        check_options(typed, subcommand or "fit")

    def _resolve_checkpoint(self, subcommand: str) -> str | None:
        """The file ``--ckpt_path`` names (``last``, ``best``, ``hpc``, a shipped driver's path; ``best`` by default
        for validate and test) written into the config, its facts read and checked (:func:`check_checkpoint`)."""
        config = self.config[subcommand]
        given = ckpt = config.get("ckpt_path")
        if ckpt is None and subcommand in ("validate", "test"):
            ckpt = "best"  # what the newest run found best, not untrained weights
        if isinstance(ckpt, str) and (ckpt == "hpc" or ckpt.startswith("file://")):  # a file here: checked as one
            ckpt = _hpc_checkpoint(config) if ckpt == "hpc" else ckpt[len("file://"):]
            self.config[f"{subcommand}.ckpt_path"] = ckpt
        if isinstance(ckpt, str) and ckpt not in ("last", "best") and not _lightning_resolves(ckpt):
            ckpt = shipped_path(ckpt)  # a shipped driver's path works from any folder
            self.config[f"{subcommand}.ckpt_path"] = ckpt
        if ckpt in ("last", "best"):
            away, at_defaults = _options_of_the_run(config.get("model") or {})
            given_back = {key: value for key, value in at_defaults.items() if key in self._given_model_options}
            with warnings.catch_warnings(record=True) as told:  # said once the input has passed every check
                warnings.simplefilter("always", UserWarning)
                newest = find_run_checkpoint(config, ckpt, selected=False, fit=subcommand == "fit",
                                             model_options=away, default_options=given_back)
            said = tuple(str(w.message) for w in told if issubclass(w.category, UserWarning))
            self._warnings += said
            if said:  # it named the options asked for that the played run differs in
                self._said_by_search = frozenset(away)
            chosen = selected_checkpoint(newest) if ckpt == "best" else None
            ckpt = str(chosen or (best_of_run(newest) if ckpt == "best" else newest))
            self.config[f"{subcommand}.ckpt_path"] = ckpt  # `config` is that section: its ckpt_path is the file now
            which = given or f"best, the default of {subcommand}"
            which += f", chosen in {SELECTION_FILE}" if chosen else ""
            self._checkpoint_line = f"checkpoint: {ckpt} (--ckpt_path {which})"  # said once the input passed
        elif ckpt is not None and subcommand in ("validate", "test") and not self._ckpt_on_command_line:
            # from a config file: a fit's config.yaml names the checkpoint that fit resumed from
            self._checkpoint_line = (f"checkpoint: {ckpt} (the ckpt_path of the --config file; give --ckpt_path "
                                     "best, last or a file to play another)")
        if ckpt is not None and not _lightning_resolves(ckpt):
            self._ckpt_facts = check_checkpoint(ckpt)
            if subcommand == "fit" and not self._printing:  # every rank: each refuses and ends, none waits
                refuse_if_training(ckpt)  # a fit still training that run: not a second one beside it
        return ckpt

    @staticmethod
    def _record_teacher_where_found(model: Any) -> None:
        """A new run's ``model.teacher`` given relative to this folder is recorded as an absolute path, so that the
        run resumes from any folder (a shipped teacher's ``td3_lightning/...`` path stays as given)."""
        teacher = model.get("teacher")
        if isinstance(teacher, str) and teacher and not os.path.isabs(teacher) and os.path.isfile(teacher):
            shipped = package_file(teacher)
            if shipped is None or not os.path.samefile(shipped, teacher):
                model["teacher"] = os.path.abspath(teacher)

    @staticmethod
    def _set_predated_model_options(model: Any, recorded: dict[str, Any]) -> None:
        """Model options that a checkpoint does not record (it predates them) are set to what it was trained with:
        Lightning reads only what it records over the configured values. Not the env's facts (linked from the data
        options) nor what a resume may change."""
        trained = options_as_trained(recorded, {key: value for key, value in signature_defaults(TD3).items()
                                                if key not in RESUME_MAY_CHANGE and key not in LINKED_FROM_DATA})
        for key in trained.keys() - recorded.keys():
            model[key] = trained[key]

    def _refuse_replaced_options(self, subcommand: str, ckpt: str, given: dict[str, Any]) -> None:
        """Model options given on the command line that the checkpoint's own replace: refused by fit (the resumed run
        keeps its model), said by validate and test (they play the checkpoint's policy)."""
        saved = self.config[subcommand]["model"]
        replaced = {key: value for key, value in given.items() if key in saved and key not in self._said_by_search
                    and not same_option(key, saved.get(key), value)}
        if not replaced:
            return
        listing = ", ".join(f"--model.{key} {shown(value)} (the checkpoint's: {shown(saved.get(key))})"
                            for key, value in replaced.items())
        if subcommand == "fit":
            raise UserInputError(
                f"a resumed run keeps the model options of its checkpoint ({ckpt}): {listing}; drop "
                f"{'them' if len(replaced) > 1 else 'it'}, or train a new run (without --ckpt_path)")
        self._warnings += (f"{subcommand} plays the checkpoint's model ({ckpt}), as it was trained: {listing} "
                           f"{'are' if len(replaced) > 1 else 'is'} not used",)

    def before_instantiate_classes(self) -> None:
        """What ``model.compile_mode cudagraphs`` needs, checked for ``fit`` (and tune's trials) before any env is made
        or anything is written."""
        if self.subcommand in ("fit", None):  # None: tune's trials (run=False)
            model = cli_config_value(self, self.config, "model", default={}) or {}
            check_capture_options(model, cli_config_value(self, self.config, "trainer", default={}) or {})

    def instantiate_classes(self) -> None:
        """A Trainer or callback argument that Lightning refuses while they are built (nothing is
        written yet) is bad input: one line."""
        try:
            super().instantiate_classes()
        except MisconfigurationException as err:
            checkpoint = _as_dict(cli_config_value(self, self.config, "checkpoint", default={}) or {})
            raise lightning_refusal(err, "checkpoint", checkpoint, kind="callback") from None
        except UserInputError:
            if self.subcommand:  # a checkpoint of another env: say that, not what follows from it
                checkpoint_of_another_env(self._ckpt_facts, _as_dict(self.config[self.subcommand].get("data") or {}))
            raise

    def set_seed(self, seed: Any) -> None:
        # seed_everything true: a seed drawn here (Lightning's own draw is always 0), recorded in the saved config;
        # a DDP rank that rank 0 started (LOCAL_RANK set) takes rank 0's from the environment
        config = self.config[self.subcommand] if self.subcommand else self.config
        if config.get("seed_everything") is True:
            inherited = os.environ.get("PL_GLOBAL_SEED") if os.environ.get("LOCAL_RANK") else None
            if not inherited and _launched_apart(config.get("trainer") or {}):
                raise UserInputError("seed_everything true would draw a seed in each process of this run (launched "
                                     "by torchrun, SLURM or on several nodes); give a number, e.g. --seed_everything 7")
            config["seed_everything"] = int(inherited) if inherited else random.SystemRandom().randint(*SEED_RANGE)
        # "Seed set to N" is said once the input has passed every check (instantiate_trainer),
        # so that bad input prints its error line alone
        level = _SEED_LOG.level
        _SEED_LOG.setLevel(logging.WARNING)
        try:
            seed()
        finally:
            _SEED_LOG.setLevel(level)
        self._seeded = True

    # ------------------------------------------------------------- the trainer
    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """Atomic checkpoint writes by default; a ``CheckpointIO`` in ``--trainer.plugins`` wins. The built run is
        validated (:func:`validate_run`) before it writes a folder or starts a process."""
        config = cli_config_value(self, self.config_init, "trainer", default={})
        kwargs.setdefault("plugins", with_atomic_checkpoint_io(config.get("plugins")))
        if config.get("logger") in (None, True):  # Lightning's default logger, without the -1 hp_metric placeholder
            # a SLURM job's fit is in version_<job id>, where a requeued job goes on; its validate and test in
            # <subcommand>_<job id> (a version_N would be the folder of a later job's fit)
            save_dir, job = config.get("default_root_dir") or os.getcwd(), SLURMEnvironment.job_id()
            version = job if self.subcommand in ("fit", None) or job is None else _job_play_version(
                Path(save_dir) / "lightning_logs", f"{self.subcommand}_{job}")
            kwargs["logger"] = TensorBoardLogger(save_dir=save_dir, version=version, default_hp_metric=False)
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except (MisconfigurationException, ValueError, ImportError) as err:  # the Trainer's checks of its arguments
            raise lightning_refusal(err, "trainer", _as_dict(config)) from None
        self._warnings += validate_run(trainer, self.model, self.datamodule, self.subcommand or "fit",
                                       self._ckpt_facts, new_run=self._ckpt_facts is None)
        for callback in trainer.callbacks:
            if isinstance(callback, SaveRunConfig):
                section = self.config[self.subcommand] if self.subcommand else self.config
                files = [str(f) for f in section.get("config") or [] if f is not None]
                callback.check_run_folder(trainer, files, self.subcommand)
        if self._checkpoint_line:
            rank_zero_info(self._checkpoint_line)
        for warning in self._warnings:
            rank_zero_warn(warning)
        for note in self._notes if self.subcommand in ("fit", None) else ():  # what this training does otherwise
            rank_zero_info(note)
        seed = cli_config_value(self, self.config, "seed_everything")
        if self._seeded and seed is not False and seed is not None:
            _SEED_LOG.info(f"Seed set to {seed}")
        return trainer

    def trainer_callbacks(self, config: dict[str, Any], callbacks: list[Any]) -> list[Any]:
        """Leave out the CLI's own checkpoint callback or progress bar when the user turned
        checkpointing or the progress bar off (Lightning refuses the combination)."""
        if config.get("enable_checkpointing") is False:
            callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
        if config.get("enable_progress_bar") is False:
            callbacks = [c for c in callbacks if not isinstance(c, RLProgressBar)]
        given = [*(config.get("callbacks") or []), *callbacks]
        # the env loop feeds the replay; hp_metric for TensorBoard; StopNotice the line of a stopped fit; RunLock
        # notes a training fit in this machine's register of fits
        for default in (EnvLoop, HpMetric, RunLock):
            if not any(isinstance(c, default) for c in given):
                callbacks = [*callbacks, default()]
        # first, so it notes where a fit stands before another callback's on_exception can raise (a full disk)
        return callbacks if any(isinstance(c, StopNotice) for c in given) else [StopNotice(), *callbacks]

    def run_subcommand(self, subcommand: str, run: Any) -> None:
        """A fit stopped by Ctrl-C or SIGTERM (Lightning exits 1 or 0) ends with one line saying where it stands and
        how to go on (a validate or test: that it wrote no results), and the signal's exit status (130, 143); a SLURM
        job's SIGTERM is left to Lightning (requeue).
        A fit that fills the disk or runs out of memory names its checkpoint and the command that goes on after the
        refusal's line."""
        if subcommand in ("validate", "test"):  # the callbacks that wrote a played checkpoint do not matter
            warnings.filterwarnings("ignore", message=PLAYED_CHECKPOINT_CALLBACKS)
        try:
            run(subcommand)
        except (SystemExit, KeyboardInterrupt):
            stop = stop_of(self._callbacks())
            if stop is None or (stop.signal == "SIGTERM" and SLURMEnvironment.detect()):
                raise
            print(stop.line(self._argv), file=sys.stderr)
            sys.exit(stop.exit_code)
        except Exception as err:  # a full disk (Lightning's own writes too), a folder that refuses writes, no memory
            refusal = refusal_of(err, self.trainer, fit=subcommand == "fit")
            if refusal is None:
                raise
            standing = standing_of(self._callbacks())
            if standing is None:
                raise refusal from None
            raise refusal.going_on(standing.go_on(self._argv), standing.last is not None) from None

    def _callbacks(self) -> list[Any]:
        """The trainer's callbacks; none before the trainer exists."""
        return self.trainer.callbacks if getattr(self, "trainer", None) is not None else []


#: option group -> the check of its options (their arguments by name), run on the parsed config
OPTION_CHECKS = {"model": functools.partial(check_model_options, declared=TD3), "data": check_data_options,
                 "progress_bar": check_progress_bar_options, "learning_curve": check_learning_curve_options}


def _as_dict(options: Any) -> dict[str, Any]:
    return options.as_dict() if hasattr(options, "as_dict") else dict(options)


def check_options(config: Any, subcommand: str = "fit") -> None:
    """Every option of a parsed ``fit``, ``validate`` or ``test`` config (the subcommand's section) that can be
    checked without an env: the option groups' own checks (:data:`OPTION_CHECKS`), the Trainer and checkpoint
    options (:func:`check_trainer_options`), ``seed_everything``, for ``validate`` and ``test`` that their stage
    plays an episode, and for ``fit`` whether a selection has checkpoints to choose among; one-line
    :class:`UserInputError`."""
    fit = subcommand == "fit"
    for group, check in OPTION_CHECKS.items():
        if config.get(group) is not None:
            check(_as_dict(config[group]))
    if fit and config.get("data") is not None:  # what only training builds
        check_buffer_device(_as_dict(config["data"]))
    if fit and config.get("model") is not None:  # the files training reads (a teacher); a played policy needs none
        check_model_files(_as_dict(config["model"]))
    trainer, checkpoint = _as_dict(config.get("trainer") or {}), _as_dict(config.get("checkpoint") or {})
    check_trainer_options(trainer, checkpoint)
    if fit and trainer.get("enable_checkpointing") is not False:  # the checkpoints only a fit writes
        check_checkpoint_filename(checkpoint.get("filename"))
    stage_limit = {"validate": ("limit_val_batches", "eval_episodes"), "test": ("limit_test_batches", "test_episodes")}
    if subcommand in stage_limit and trainer.get(stage_limit[subcommand][0]) in (0, 0.0):
        name, episodes = stage_limit[subcommand]
        raise UserInputError(f"trainer.{name} 0 leaves {subcommand} no episode to play; leave it unset and give "
                             f"the number of episodes with --data.{episodes} (a batch is one episode)")
    if config.get("selection") is not None:  # fit: also whether there are checkpoints to choose among
        check_selection_options(_as_dict(config["selection"]), checkpoint if fit else None,
                                trainer.get("enable_checkpointing"))
    check_seed(config.get("seed_everything"))
    if fit and config.get("data") is not None:  # the episodes training chooses checkpoints on, apart from test's
        check_seed_ranges({group: _as_dict(config[group]) for group in ("data", "selection")
                           if config.get(group) is not None})


def _hpc_checkpoint(config: Any) -> str:
    """``--ckpt_path hpc``: the newest ``hpc_ckpt_<N>.ckpt`` in ``trainer.default_root_dir``, as Lightning picks it."""
    folder = Path((config.get("trainer") or {}).get("default_root_dir") or os.getcwd())
    found = {int(m.group(1)): p for p in folder.glob("hpc_ckpt_*.ckpt")
             if (m := re.fullmatch(r"hpc_ckpt_(\d+)\.ckpt", p.name))}
    if not found:
        raise UserInputError(f"--ckpt_path hpc: {folder} holds no hpc_ckpt_<N>.ckpt (what Lightning saves when a SLURM "
                             "job is requeued); pass a checkpoint file, last or best")
    return str(found[max(found)])


def _lightning_resolves(ckpt: str) -> bool:
    return ckpt in _LIGHTNING_CKPT_NAMES or ckpt.startswith("registry:") or "://" in ckpt


DESCRIPTION = (
    "TD3 reinforcement learning as a PyTorch Lightning trainer: fit, validate and test take a config "
    f"(e.g. --config car.yaml) and any override. `{commands.PROG} export --help` exports a checkpoint's "
    f"policy (slim checkpoint, TorchScript or ONNX); `{commands.PROG} tune --help` searches hyperparameters."
)


def cli_kwargs() -> dict[str, Any]:
    """What :func:`main` gives :class:`TD3CLI` besides the arguments (``tune`` builds its trials with it)."""
    return {
        "trainer_defaults": dict(TRAINER_DEFAULTS),
        "seed_everything_default": 0,  # a run without a seed is seed 0 (true draws one)
        "save_config_callback": SaveRunConfig,
        "save_config_kwargs": {"overwrite": True},
        "auto_configure_optimizers": False,
        # parse errors are raised, and printed as one line by main, instead of a usage dump
        "parser_kwargs": {"prog": commands.PROG, "exit_on_error": False, "description": DESCRIPTION,
                          "allow_abbrev": False},  # --trainer.max_step is a typo, not --trainer.max_steps
    }


class _ParsersBuilt(Exception):
    """Carries the command line object out of its constructor once its parsers are set up."""


class _ParsersOnly(TD3CLI):
    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        raise _ParsersBuilt(self)


def parser_only_cli(subcommand: str | None = None) -> TD3CLI:
    """The command line with its parsers set up and nothing parsed, seeded or built (for ``--help`` texts and
    tests): with ``subcommand`` the parsers of the Trainer subcommands, without it the one parser of ``run=False``."""
    try:
        _ParsersOnly(TD3, ReplayDataModule, args=[subcommand] if subcommand else [], run=subcommand is not None,
                     **cli_kwargs())
    except _ParsersBuilt as built:
        return built.args[0]
    raise AssertionError("TD3CLI parsed its arguments without calling parse_arguments")


def _end_process_group() -> None:
    """Destroy a DDP process group before the interpreter exits: left to interpreter shutdown, its
    communication threads can abort the process after a finished run (std::terminate)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def main(args: list[str] | None = None) -> None:
    """The command line for ``fit``, ``validate``, ``test`` and ``export`` (``python -m td3_lightning``,
    i.e. :func:`td3_lightning.__main__.main`, adds ``tune``)."""
    with warning_lines():
        _main(args)


def _main(args: list[str] | None) -> None:
    ignore_expected_warnings()
    argv = commands.answer_early(sys.argv[1:] if args is None else list(args))
    if argv[0] == "export":  # not a Trainer entry point: its own small parser
        from td3_lightning.export import main as export_main

        export_main(argv[1:])
        return
    if argv[0] == "tune":  # it drives this command line, so it runs above it
        print(f"error: tune is dispatched by td3_lightning.__main__.main ({commands.PROG} tune ...)",
              file=sys.stderr)
        sys.exit(2)
    try:
        with quiet_tensorboard_refusals(), kept_ctrl_c():
            argv = resolve_config_args(argv)
            TD3CLI(TD3, ReplayDataModule, args=argv, **cli_kwargs())
            _end_process_group()
    except UserInputError as err:
        message = str(err)
        bad = re.search(r"subcommand.*invalid choice: '([^']*)'", message)  # after top-level options
        if bad:
            message = commands.unknown_subcommand(bad.group(1))
        elif 'expected "subcommand"' in message:  # top-level options alone, e.g. `--config x.yaml`
            message = commands.no_subcommand()
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    except argparse.ArgumentError as err:  # a parse error outside parse_arguments (e.g. while instantiating)
        print(f"error: {one_line_parse_error(str(err))}", file=sys.stderr)
        sys.exit(2)


@contextlib.contextmanager
def quiet_tensorboard_refusals() -> Iterator[None]:
    """While it runs, TensorBoard's writer thread ends without its traceback where the machine refuses its write
    (:func:`_thread_exception`)."""
    thread_hook = threading.excepthook
    threading.excepthook = functools.partial(_thread_exception, thread_hook)
    try:
        yield
    finally:
        threading.excepthook = thread_hook


def _thread_exception(hook: Callable[[Any], None], args: Any) -> None:
    """TensorBoard's writer thread that the machine refuses a write (a full disk) ends without its traceback: the
    writer hands the error on to the command, whose own line says it; any other thread's exception goes to
    ``hook``."""
    if not (type(args.thread).__module__.startswith("tensorboard.") and is_write_refusal(args.exc_value)):
        hook(args)


def _options_of_the_run(model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model options of ``model`` that tell this config's runs from others of its env, away from TD3's defaults
    and at them (:func:`options_of_the_run`)."""
    return options_of_the_run(model, signature_defaults(TD3))


def given_model_options(argv: list[str]) -> tuple[str, ...]:
    """The model options ``argv`` sets, in order: ``--model.KEY VALUE``, ``--model.KEY=VALUE``, ``--model.KEY+=VALUE``,
    and the keys of a whole ``--model VALUE`` (a YAML mapping or a file holding one)."""
    keys: list[str] = []
    for i, arg in enumerate(map(str, argv)):
        if arg.startswith("--model."):
            keys.append(arg[len("--model."):].split("=", 1)[0].split(".", 1)[0].rstrip("+"))
        elif arg == "--model" or arg.startswith("--model="):
            value = arg.split("=", 1)[1] if "=" in arg else (str(argv[i + 1]) if i + 1 < len(argv) else "")
            keys.extend(_mapping_keys(value))
    return tuple(dict.fromkeys(keys))


def _mapping_keys(value: str) -> list[str]:
    """The top-level keys of ``value``, a YAML mapping or the path of a file holding one (none otherwise)."""
    try:
        text = Path(value).read_text() if os.path.isfile(value) else value
        loaded = yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return []
    return [str(k) for k in loaded] if isinstance(loaded, dict) else []


