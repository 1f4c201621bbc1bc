"""The command line: ``python -m td3_lightning fit|validate|test --config <yaml>``.

A LightningCLI with the TD3 module and the replay datamodule, the env's observation shape
and action bounds linked into the model, RL-friendly trainer defaults, and errors from
bad input printed as one line.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from td3_lightning.callbacks import RLProgressBar, TestReport
from td3_lightning.data import ReplayDataModule
from td3_lightning.errors import UserInputError
from td3_lightning.module import TD3

CONFIG_DIR = Path(__file__).parent / "configs"

TRAINER_DEFAULTS: dict[str, Any] = {
    "max_steps": 100_000,  # training steps = env steps after the warm-up
    "val_check_interval": 5_000,  # evaluate every 5000 env steps
    "check_val_every_n_epoch": None,  # the replay stream is one endless epoch
    "num_sanity_val_steps": 0,
    "log_every_n_steps": 500,
}

# The default checkpointing: last.ckpt plus the best checkpoint by val/return.
CHECKPOINT_DEFAULTS: dict[str, Any] = {
    "checkpoint.monitor": "val/return",
    "checkpoint.mode": "max",
    "checkpoint.save_last": True,
    "checkpoint.save_top_k": 1,
    "checkpoint.filename": "best-step{step}",
    "checkpoint.auto_insert_metric_name": False,
}


class TD3CLI(LightningCLI):
    """LightningCLI for TD3: the module, the replay datamodule and a default checkpoint callback."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(RLProgressBar, "progress_bar")
        parser.add_lightning_class_args(TestReport, "test_report")
        parser.set_defaults(CHECKPOINT_DEFAULTS)
        for name in ("obs_shape", "action_low", "action_high"):
            parser.link_arguments(f"data.{name}", f"model.{name}", apply_on="instantiate")

    def _check_ckpt_path(self) -> None:
        config = self.config.get(str(self.subcommand), self.config)
        ckpt = config.get("ckpt_path")
        if ckpt is None or ckpt in ("last", "best", "hpc", "registry"):
            return
        if not os.path.isfile(ckpt):
            raise UserInputError(f"checkpoint file not found: {ckpt}; pass an existing .ckpt file to --ckpt_path")

    def before_fit(self) -> None:
        self._check_ckpt_path()

    def before_validate(self) -> None:
        self._check_ckpt_path()

    def before_test(self) -> None:
        self._check_ckpt_path()


def resolve_config_args(args: list[str]) -> list[str]:
    """Let ``--config car.yaml`` (or ``configs/car.yaml``) name a bundled config when no
    such file exists relative to the current folder."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--config" and i + 1 < len(out):
            out[i + 1] = _bundled(out[i + 1])
        elif arg.startswith("--config="):
            out[i] = "--config=" + _bundled(arg.split("=", 1)[1])
    return out


def _bundled(path: str) -> str:
    if os.path.exists(path) or not path.endswith((".yaml", ".yml")):
        return path
    candidate = CONFIG_DIR / Path(path).name
    if candidate.is_file():
        return str(candidate)
    if not os.path.exists(path):
        bundled = ", ".join(sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
        raise UserInputError(f"config file not found: {path}; give a path to a YAML file or a bundled config ({bundled})")
    return path


def main(args: list[str] | None = None) -> None:
    """Entry point of ``python -m td3_lightning`` and the ``td3-lightning`` script."""
    # the resolved arguments are passed explicitly; they are sys.argv's, not a second set
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    try:
        argv = resolve_config_args(sys.argv[1:] if args is None else args)
        TD3CLI(
            TD3,
            ReplayDataModule,
            args=argv,
            trainer_defaults=TRAINER_DEFAULTS,
            save_config_kwargs={"overwrite": True},
            auto_configure_optimizers=False,
            parser_kwargs={"prog": "python -m td3_lightning"},
        )
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
