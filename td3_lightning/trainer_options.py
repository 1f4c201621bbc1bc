"""The checks of the Trainer and checkpoint options that Lightning checks late or not at all.

Lightning checks some of them only once a run has started (``val_check_interval 0`` divides by
zero after the first step, ``checkpoint.monitor`` of a metric nobody logs fails at the first
validation, ``checkpoint.dirpath`` naming a file fails at the first checkpoint), some with a
traceback (``max_steps -5``, ``devices abc``, ``seed_everything -1``) and some not at all
(``max_steps 0`` makes an empty run folder): the command line calls :func:`check_trainer_options`
on the parsed config, before any env is made or anything is written. What Lightning itself refuses
while the Trainer is built (nothing is written yet) is said in one line by :func:`lightning_refusal`.
"""

from __future__ import annotations

import datetime
import errno
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from td3_lightning.errors import UserInputError

#: what every validation logs (``checkpoint.monitor`` takes these)
VALIDATION_METRICS = ("val/return", "val/episode_length", "val/terminated")
#: the checkpoint.mode that keeps a metric's worst checkpoints, and what they are (val/episode_length: either mode)
WORST_MODE = {"val/return": ("min", "return least"), "val/terminated": ("max", "end the most episodes early")}

#: how a time is written for ``trainer.val_check_interval`` and ``trainer.max_time`` (Lightning's format)
TIME_FORMAT = '"DD:HH:MM:SS", e.g. "00:01:00:00"'
#: the keys of a ``trainer.max_time`` mapping (``datetime.timedelta``'s)
TIME_UNITS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")
#: the seeds numpy (and so ``seed_everything``) takes
SEED_RANGE = (0, 2**32 - 1)
_DEVICES = ('trainer.devices must be a number of devices >= 1, -1 (all of them), auto, or device indices such as '
            '[0, 1] or "0,1"')


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_time(text: str) -> bool:
    """Whether ``text`` is a duration above zero written as DD:HH:MM:SS."""
    parts = text.strip().split(":")
    return len(parts) == 4 and all(p.isdigit() for p in parts) and any(int(p) for p in parts)


def max_time_seconds(max_time: Any) -> float | None:
    """``trainer.max_time`` (DD:HH:MM:SS, a mapping of ``datetime.timedelta``'s keywords, or a timedelta) in
    seconds; None when it is not set or not one of these."""
    if isinstance(max_time, datetime.timedelta):
        return max_time.total_seconds()
    if isinstance(max_time, str) and _is_time(max_time):
        days, hours, minutes, seconds = (int(p) for p in max_time.strip().split(":"))
        return datetime.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds).total_seconds()
    if isinstance(max_time, Mapping) and _is_time_mapping(max_time):
        return datetime.timedelta(**max_time).total_seconds()
    return None


def _is_time_mapping(mapping: Mapping[str, Any]) -> bool:
    """Whether ``mapping`` is a duration above zero as ``datetime.timedelta``'s keyword arguments (Lightning's form)."""
    if not mapping or any(k not in TIME_UNITS for k in mapping):
        return False
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in mapping.values()):
        return False
    try:
        return datetime.timedelta(**mapping) > datetime.timedelta(0)
    except OverflowError:  # beyond timedelta's range
        return False


def _devices_ok(devices: Any) -> bool:
    if devices is None or devices == "auto":
        return True
    if _is_int(devices):
        return devices >= 1 or devices == -1
    if isinstance(devices, (list, tuple)):
        return bool(devices) and all(_is_int(d) and d >= 0 for d in devices)
    if isinstance(devices, str):
        text = devices.strip()
        if re.fullmatch(r"-?\d+", text):
            return int(text) >= 1 or int(text) == -1
        return re.fullmatch(r"\d+(\s*,\s*\d+)*\s*,?", text) is not None  # device indices
    return False


def check_folder_option(option: str, path: Any) -> None:
    """One-line :class:`UserInputError` unless ``path`` can be a folder to write into: an existing folder, or a
    path that can be created (no file on the way). Remote URLs (``s3://``) are left to Lightning."""
    if path is None or "://" in str(path):
        return
    if str(path) == "":
        raise UserInputError(f"{option} must be a folder, got ''; leave it unset for its default")
    target = Path(path).expanduser()
    missing = None  # the first folder on the way that does not exist yet
    for folder in (target, *target.parents):
        try:
            exists = folder.exists()
        except OSError as err:  # a name longer than the file system takes, a folder on the way that cannot be read
            fix = "give a shorter path" if err.errno == errno.ENAMETOOLONG else "give a folder you can write to"
            raise UserInputError(f"{option} {path} cannot be a folder ({err.strerror}); {fix}") from None
        if exists:
            if not folder.is_dir():
                where = "is a file" if folder == target else f"lies inside {folder}, which is a file"
                raise UserInputError(f"{option} {path} {where}; it must be a folder (an existing one or one to create)")
            break
        missing = folder
    if missing is None:  # it exists: can files be made in it? (a folder made and removed again: nothing is left)
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".td3_write_check_", dir=target))
        except OSError as err:
            raise UserInputError(f"{option} {path}: no file can be created in this folder ({err.strerror}); give a "
                                 "folder you can write to") from None
    if missing is not None:  # can it be created? (made and removed again: nothing is left)
        try:
            missing.mkdir()
        except FileExistsError:  # another process of this run made it just now
            return
        except OSError as err:
            raise UserInputError(f"{option} {path} cannot be created ({err.strerror}: {missing}); give a folder "
                                 "you can write to") from None
        try:
            missing.rmdir()
        except OSError:  # another process of this run writes into it already
            pass


def check_seed(seed: Any) -> None:
    """``seed_everything``: true (a random seed), false / null (none), or a seed numpy takes."""
    if _is_int(seed) and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise UserInputError(f"seed_everything must be an int in [{SEED_RANGE[0]}, {SEED_RANGE[1]}], true (a random "
                             f"seed) or false; got {seed}")


#: the trainer.precision values TD3 runs with (Lightning's names and their short forms)
TRAINING_PRECISIONS = ("32", "32-true", "16", "16-mixed", "bf16", "bf16-mixed")
#: what trainer.precision takes, as its refusals say it
PRECISIONS_TAKEN = ("32-true, bf16-mixed or 16-mixed (the env loop and the replay buffer hold float32, which the "
                    "networks take)")


def check_trainer_options(trainer: Mapping[str, Any], checkpoint: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`UserInputError` naming the first Trainer or checkpoint option out of range."""
    checkpoint = checkpoint or {}
    max_steps = trainer.get("max_steps")
    if max_steps is not None and (not _is_int(max_steps) or (max_steps < 1 and max_steps != -1)):
        raise UserInputError(f"trainer.max_steps must be at least 1 training step, or -1 for no limit; got {max_steps}")
    interval = trainer.get("val_check_interval")
    if interval is not None and not isinstance(interval, Mapping) and not (
        (_is_int(interval) and interval >= 1) or (isinstance(interval, str) and _is_time(interval))
    ):
        raise UserInputError(
            f"trainer.val_check_interval must be a number of training steps >= 1 or a time ({TIME_FORMAT}); "
            f"got {interval}"
        )
    log_every = trainer.get("log_every_n_steps")
    if log_every is not None and log_every < 0:
        raise UserInputError(
            f"trainer.log_every_n_steps must be >= 0 training steps (0: no step logging); got {log_every}"
        )
    sanity = trainer.get("num_sanity_val_steps")
    if sanity is not None and sanity < -1:
        raise UserInputError(f"trainer.num_sanity_val_steps must be >= 0 validation episodes, or -1 for all of them; "
                             f"got {sanity}")
    min_steps = trainer.get("min_steps")
    if min_steps is not None and min_steps < 0:
        raise UserInputError(f"trainer.min_steps must be >= 0 training steps (or null: none); got {min_steps}")
    endless = "the replay stream is one endless epoch: trainer.max_steps and trainer.val_check_interval count the steps"
    max_epochs = trainer.get("max_epochs")
    if max_epochs is not None and max_epochs != -1:
        raise UserInputError(f"trainer.max_epochs must be null or -1 ({endless}); got {max_epochs}: give "
                             "--trainer.max_steps instead")
    for name, none in (("overfit_batches", 0), ("limit_train_batches", 1)):
        value = trainer.get(name)
        if value is not None and value != none:
            raise UserInputError(f"trainer.{name} must be left unset ({endless}, each batch sampled from the "
                                 f"replay buffer); got {value}: give --trainer.max_steps instead")
    precision = trainer.get("precision")
    if precision is not None and str(precision) not in TRAINING_PRECISIONS:
        raise UserInputError(f"trainer.precision must be {PRECISIONS_TAKEN}; got {precision}")
    every_epochs = trainer.get("check_val_every_n_epoch")
    if every_epochs is not None and every_epochs < 1:
        raise UserInputError(
            f"trainer.check_val_every_n_epoch must be >= 1 or null (the replay stream is one endless epoch: "
            f"trainer.val_check_interval counts the steps); got {every_epochs}"
        )
    max_time = trainer.get("max_time")
    if (isinstance(max_time, str) and not _is_time(max_time)) or (isinstance(max_time, Mapping)
                                                                  and not _is_time_mapping(max_time)):
        raise UserInputError(f"trainer.max_time must be a duration above zero, {TIME_FORMAT}, or a mapping of "
                             f"{', '.join(TIME_UNITS)} to whole numbers, such as {{hours: 12}}; got {max_time!r}")
    if not _devices_ok(trainer.get("devices")):
        raise UserInputError(f"{_DEVICES}; got {trainer.get('devices')!r}")
    accumulate = trainer.get("accumulate_grad_batches")
    if accumulate is not None and accumulate != 1:
        raise UserInputError(f"trainer.accumulate_grad_batches must be 1: TD3 steps its optimizers itself "
                             f"(manual optimization); got {accumulate}")
    clip = trainer.get("gradient_clip_val")
    if clip not in (None, 0):
        raise UserInputError(f"trainer.gradient_clip_val must be null: TD3 steps its optimizers itself (manual "
                             f"optimization), so Lightning cannot clip its gradients; got {clip}")
    root = trainer.get("default_root_dir")  # unset: the current folder, where the run folders go
    runs_in = os.getcwd() if root is None else root
    check_folder_option("trainer.default_root_dir" if root is not None else
                        "the current folder (trainer.default_root_dir)", runs_in)
    if trainer.get("logger") in (None, True) and "://" not in str(root):  # the default logger's folder of runs
        check_folder_option("the folder of runs (trainer.default_root_dir/lightning_logs)",
                            Path(runs_in, "lightning_logs"))
    loggers = trainer.get("logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:  # a logger given as class_path/init_args
        init_args = logger.get("init_args") if isinstance(logger, Mapping) else None
        if isinstance(init_args, Mapping) and init_args.get("save_dir"):
            check_folder_option("trainer.logger.init_args.save_dir", init_args["save_dir"])
    every = checkpoint.get("every_n_train_steps")
    if every is not None and every < 0:
        raise UserInputError(
            f"checkpoint.every_n_train_steps must be >= 0 training steps (0 or null: off); got {every}"
        )
    monitor = checkpoint.get("monitor")
    if monitor is not None and monitor not in VALIDATION_METRICS:
        raise UserInputError(f"checkpoint.monitor must be one of {', '.join(VALIDATION_METRICS)} (what every "
                             f"validation logs) or null (no best checkpoint); got {monitor!r}")
    mode, (wrong, kept) = checkpoint.get("mode", "max"), WORST_MODE.get(monitor, (None, None))
    if mode == wrong:
        raise UserInputError(f"checkpoint.monitor {monitor} with checkpoint.mode {mode} keeps the checkpoints that "
                             f"{kept}; set --checkpoint.mode {'min' if mode == 'max' else 'max'}")
    check_folder_option("checkpoint.dirpath", checkpoint.get("dirpath"))


def lightning_refusal(err: Exception, group: str, options: Mapping[str, Any], kind: str = "") -> UserInputError:
    """Lightning's refusal of a ``group`` option (``trainer``, ``checkpoint``) as one line that names the option:
    the one Lightning's message shows as ``name=...``, else the longest option name it mentions (none: "a
    ``kind`` option")."""
    text = " ".join(str(err).split())
    named = [k for k in options if re.search(rf"(?<![\w.]){re.escape(k)}=", text)]
    if not named and "Timer(duration=" in text:
        named = ["max_time"]
    named = named or sorted((k for k in options if re.search(rf"(?<![\w.]){re.escape(k)}(?!\w)", text)), key=len)[-1:]
    named = named or [k for k, v in options.items() if isinstance(v, str) and len(v) > 2 and v != "auto"  # its value
                      and re.search(rf"(?<![a-z]){re.escape(v.lower())}", text.lower())][:1]  # (a missing package)
    xla = "torch_xla" in text and str(options.get("accelerator")).lower() in ("tpu", "xla")  # not installed
    no_backend = "No supported gpu backend found" in text or xla  # messages that name no option
    if no_backend and "accelerator" in options:
        named = ["accelerator"]
    what = f"{group}.{named[0]} {options[named[0]]!r}" if named else f"a {kind or group} option"
    if named == ["accelerator"] and (no_backend or "is not available" in text):
        use = "use --trainer.accelerator cpu (or auto, which picks what it has)"
        fix = (f"; a TPU runs with torch_xla installed: on a machine without one {use}" if xla
               else f"; this machine has no such device: {use}")
        return UserInputError(f"Lightning refuses {what}: {text.split(' HINT:')[0].rstrip('.!')}{fix}")
    return UserInputError(f"Lightning refuses {what}: {text}")
