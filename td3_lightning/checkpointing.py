"""Checkpoint files: the td3_lightning format, crash-safe writes, slim export and inspection.

**Format.** A td3_lightning checkpoint is a Lightning checkpoint with one more section,
``checkpoint["td3_lightning"]``: ``format_version`` (:data:`FORMAT_VERSION`), ``algorithm``
(``"TD3"``), the update counters and the target-noise generator's state. Besides Lightning's
own keys (``state_dict``: networks and targets; ``optimizer_states``; ``loops``;
``hyper_parameters``) a full checkpoint holds ``ReplayDataModule`` (replay buffer, sampler
state, batches in flight) and ``callbacks`` (the env loop's counters and random stream): what
an exact resume needs. A *slim* checkpoint (:func:`slim_checkpoint`) keeps :data:`SLIM_KEYS`
only: enough for ``test``, ``validate``, ``export`` and ``TD3.load_from_checkpoint``.
:func:`inspect_checkpoint` reads a file memory-mapped and checks it (its checksums too) before anything
is built.

**Crash safety.**
:class:`AtomicCheckpointIO` writes every checkpoint to a temporary file next to its target,
flushes and fsyncs it, and renames it over the target with ``os.replace`` (then fsyncs the
folder, so that the rename itself survives a power loss). A process killed at any moment,
even in the middle of a write, leaves either the previous complete checkpoint or the new
complete one under the target name, never a truncated file.

The command line uses it by default. With a plain ``Trainer``::

    L.Trainer(plugins=[AtomicCheckpointIO()], ...)

:class:`ModelCheckpoint` is Lightning's, except that ``save_last=True`` refreshes
``last.ckpt`` at every validation (Lightning refreshes it only when a top-k checkpoint was
written at that step), so that a resumed run loses at most one evaluation interval, and at the end of training.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import re
import shutil
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Union

import torch
from fsspec.utils import get_protocol
from lightning.pytorch.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO

from td3_lightning import _lightning
from td3_lightning.errors import (CKPT_PATH_TAKES, MachineRefusal, UserInputError, check_checkpoint_file,
                                  shipped_path)
from td3_lightning.extensions.policy_checkpoints import policy_version
from td3_lightning.replay import LAYOUT_KEYS
from td3_lightning.resources import gigabytes, nearest_existing
from td3_lightning.rules import idle_model_options

_PATH = Union[str, "os.PathLike[str]"]

#: the td3_lightning section of a checkpoint
CHECKPOINT_KEY = "td3_lightning"
#: the version of that section this td3_lightning writes and reads
FORMAT_VERSION = 1
#: what a slim checkpoint keeps
SLIM_KEYS = ("state_dict", "hyper_parameters", "hparams_name", CHECKPOINT_KEY, "pytorch-lightning_version",
             "epoch", "global_step")
#: the command line's name for the best checkpoint by val/return (``checkpoint.filename``)
BEST_FILENAME = "best-step{step}"
#: written beside the checkpoints by ``--selection.episodes``: the kept checkpoint that is ``best``
SELECTION_FILE = "selection.json"
#: the key under which Lightning saves the datamodule's state (its class name)
DATAMODULE_KEY = "ReplayDataModule"

log = logging.getLogger(__name__)

# A write in progress is ``.<target name>.<random>.tmp`` in the target's folder: hidden, and
# without the ``.ckpt`` suffix, so that nothing that looks for checkpoints picks one up (a
# process killed while writing leaves one behind).
TMP_SUFFIX = ".tmp"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give a new file; mkstemp gives 0o600


class AtomicCheckpointIO(TorchCheckpointIO):
    """:class:`~lightning.pytorch.plugins.io.TorchCheckpointIO` with atomic, durable writes.

    ``save_checkpoint`` serialises straight into a temporary file in the target's folder
    (no second copy of the checkpoint in memory), ``flush`` + ``fsync``, ``os.replace``
    over the target and ``fsync`` of the folder. If the write fails (disk full, an
    exception while serialising) the temporary file is removed and the previous checkpoint
    is untouched. Remote paths (``s3://`` and other fsspec URLs) fall back to Lightning's own
    transactional write.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint does not take storage_options")
        if get_protocol(str(path)) != "file":
            super().save_checkpoint(checkpoint, path)
            return
        atomic_torch_save(checkpoint, path)


@contextlib.contextmanager
def atomic_path(path: _PATH, suffix: str = TMP_SUFFIX, replay: bool = False) -> Iterator[Path]:
    """Write a file atomically: the body writes the yielded temporary path (hidden, in the
    target's folder, ending in ``suffix``); on success it is fsynced and renamed over ``path``
    and the folder is fsynced; if the body raises, it is removed and ``path`` is untouched. What the machine
    refuses (:func:`write_refusal`) is a one-line :class:`WriteRefusedError` (``replay``: the file holds a replay
    buffer, whose options a full disk's line names)."""
    target = Path(path).expanduser()
    folder = target.parent.absolute()
    tmp = ""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=folder)
        os.close(fd)
        if hasattr(os, "chmod"):
            os.chmod(tmp, _FILE_MODE)
        yield Path(tmp)
        _fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException as err:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        refusal = write_refusal(err, target, replay=replay, in_the_way=True)
        if refusal is None:
            raise
        raise refusal from None
    _fsync_dir(folder)


def write_refusal(err: BaseException, target: Path, replay: bool = False,
                  in_the_way: bool = False) -> WriteRefusedError | None:
    """``err``, raised writing ``target``, as the one-line refusal of the machine it is: a full disk (``replay``: the
    file holds a replay buffer, whose options the line names), a folder or disk that refuses writes, or with
    ``in_the_way`` a folder or file in the way or a name too long (:data:`IN_THE_WAY`); else None."""
    folder = target.parent.absolute()
    if isinstance(err, WriteRefusedError):
        return err
    if _disk_full(err):
        return DiskFullError(f"writing {target} failed: No space left on device ({_free_in(folder)}); what was there "
                             "before is kept: free some space", replay=replay)
    if not isinstance(err, OSError) or err.errno not in WRITE_REFUSALS + (IN_THE_WAY if in_the_way else ()):
        return None
    if err.errno in WRITE_REFUSALS:
        return WriteRefusedError(f"writing {target} failed: {err.strerror} ({folder}); what was there before is "
                                 "kept: make the folder writable, or write elsewhere")
    fix = ("give a shorter file name" if err.errno == errno.ENAMETOOLONG
           else "move what is in the way, or write elsewhere")
    where = err.filename2 or err.filename or folder  # the path it names, the temporary file's as the target
    where = target if Path(where).name.startswith(f".{target.name}.") else where
    return WriteRefusedError(f"writing {target} failed: {err.strerror} ({where}); what was there before is kept: "
                             f"{fix}")


def _free_in(folder: Path) -> str:
    """The free space on the disk of ``folder`` (or of its nearest existing parent), as text."""
    try:
        return f"{gigabytes(shutil.disk_usage(nearest_existing(folder)).free)} free in {folder}"
    except OSError:
        return f"in {folder}"


#: what the machine answers a write it refuses with (beside a full disk): permissions, a read-only or failing disk
WRITE_REFUSALS = (errno.EACCES, errno.EPERM, errno.EROFS, errno.EIO)
#: what a write into a path finds in its way: a folder or a file, a name longer than the file system takes
IN_THE_WAY = (errno.EISDIR, errno.EEXIST, errno.ENOTDIR, errno.ENAMETOOLONG)
#: the longest file name written atomically: 255 bytes, less what its temporary file's name adds (".", ".XXXXXXXX")
MAX_NAME_BYTES = 255 - 10 - len(TMP_SUFFIX)


def check_checkpoint_filename(template: str | None) -> None:
    """One line where ``checkpoint.filename`` names files too long for an atomic write even with each ``{field}``
    filled in by one character (Lightning fills in ``step=...``, metrics and ``.ckpt``)."""
    if not template:
        return
    shortest = re.sub(r"\{[^}]*\}", "0", template) + ".ckpt"
    length = max(len(os.fsencode(part)) for part in shortest.split("/"))
    if length > MAX_NAME_BYTES:
        raise UserInputError(f"checkpoint.filename is too long for a file name (at least {length} bytes once filled "
                             f"in, with .ckpt; at most {MAX_NAME_BYTES}): give a shorter one")


class WriteRefusedError(MachineRefusal, OSError):
    """The machine refused a file written atomically (the previous file is kept): an ``OSError`` still, told as one
    line."""


class DiskFullError(WriteRefusedError):
    """The disk filled during the write; beside freeing space, a smaller checkpoint helps where it holds a replay
    buffer (``replay``): going on from the fit's checkpoint keeps its buffer's size (``resumable``)."""

    def __init__(self, what: str, go_on: str = "then run the command again", resumable: bool = False,
                 replay: bool = False) -> None:
        relief = "" if not replay else " (or set data.save_replay false)" if resumable else \
            " (or lower data.buffer_size, or set data.save_replay false)"
        super().__init__(f"{what}{relief}", go_on)
        self.what, self.replay = what, replay

    def going_on(self, go_on: str, resumable: bool) -> DiskFullError:
        return type(self)(self.what, go_on, resumable, self.replay)


def is_write_refusal(err: BaseException) -> bool:
    """Whether ``err`` is a write refused by the machine as this package tells it, or the disk running full (a write
    of another library's, a logger's)."""
    return isinstance(err, WriteRefusedError) or _disk_full(err)


def run_write_refusal(err: BaseException, trainer: Any) -> WriteRefusedError | None:
    """``err``, raised in a run of ``trainer``, as the one-line refusal of the machine (:func:`is_write_refusal`;
    else None), naming the file it names or the run's folder, found without a collective (the other ranks may be
    elsewhere: ``Trainer.log_dir`` broadcasts)."""
    if not is_write_refusal(err):
        return None
    named = err.filename if isinstance(getattr(err, "filename", None), str) else None
    logger = trainer.loggers[0] if trainer.loggers else None  # not every logger has a log_dir (Lightning's base)
    folder = (getattr(logger, "log_dir", None) or getattr(logger, "save_dir", None)) if logger else None
    path = str(named or folder or trainer.default_root_dir or ".")
    return write_refusal(err, Path(path) if "://" in path else Path(path).absolute())


def _disk_full(err: BaseException | None) -> bool:
    """Whether ``err`` or an exception it was raised from is the disk (or a quota) running full."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def atomic_torch_save(obj: Any, path: _PATH, replay: bool = True) -> None:
    """``torch.save(obj, path)`` through :func:`atomic_path` (``replay``: ``obj`` may hold a replay buffer)."""
    with atomic_path(path, replay=replay) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)
    log.debug("saved checkpoint %s", path)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class ModelCheckpoint(_lightning.ModelCheckpointHooks):
    """Lightning's ``ModelCheckpoint`` (same options, same state key in checkpoints), except that
    ``save_last=True`` also writes ``last.ckpt`` after a validation that did not improve the monitored metric and at
    the final step (Lightning's does not where it wrote one before), that a run resumed into a folder of its own
    remembers the best checkpoints kept before (``earlier_best_k_models``, never deleted by it):
    ``--selection.episodes`` chooses among both, that ``trainer.fast_dev_run`` leaves no ``last.ckpt``, that the best
    checkpoints by a monitored metric leave the replay buffer to ``last.ckpt`` (they are played and exported;
    ``last.ckpt`` resumes), and that a policy already kept is not kept twice (policy checkpoints: the same frozen
    policy validated again)."""

    def save_checkpoint_file(self, trainer: Any, filepath: str, save: Any) -> None:
        leave_out = getattr(trainer.datamodule, "replay_left_out", None)
        best = self.monitor is not None and not Path(filepath).name.startswith(self.CHECKPOINT_NAME_LAST)
        with leave_out() if best and self.save_last is True and leave_out is not None else contextlib.nullcontext():
            save(trainer, filepath)
        version = policy_version(trainer.lightning_module) if best else None  # last.ckpt holds no kept policy
        if version is not None:
            self.kept_policies[Path(filepath).name] = version

    earlier_best_k_models: dict[str, Any]
    kept_policies: dict[str, int]  # best checkpoint file name -> the policy_version it holds

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.earlier_best_k_models, self.kept_policies = {}, {}

    def check_monitor_top_k(self, trainer: Any, current: Any = None) -> bool:
        """Lightning's choice whether a validation's checkpoint joins the best kept, except that a policy already kept
        (``policy_version``) is not saved again: with policy checkpoints one frozen policy validates alike until the
        next is taken, and its copies would fill the best ``save_top_k`` that ``--selection.episodes`` chooses among."""
        version = policy_version(trainer.lightning_module)
        if version is not None and any(self.kept_policies.get(Path(path).name) == version
                                       for path in self.known_best()):
            return False
        return super().check_monitor_top_k(trainer, current)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        super().on_validation_end(trainer, pl_module)
        if self.save_last is True:
            _lightning.save_last_checkpoint_now(self, trainer)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.fast_dev_run:  # a dry run leaves no checkpoint (Lightning's save_last writes last.ckpt here)
            return
        super().on_train_end(trainer, pl_module)  # writes last.ckpt only where this run wrote no checkpoint yet
        if self.save_last is True:  # the final step's, where it ends after its last validation
            _lightning.save_last_checkpoint_now(self, trainer)

    def state_dict(self) -> dict[str, Any]:
        """Lightning's, plus the earlier runs' best checkpoints, the ``mode`` and the folder the paths are relative
        to (``cwd``), by which ``--ckpt_path best`` finds the run's best in any of its folders."""
        return {**super().state_dict(), "earlier_best_k_models": dict(self.earlier_best_k_models), "mode": self.mode,
                "cwd": os.getcwd(), "kept_policies": dict(self.kept_policies)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        earlier = dict(state_dict.get("earlier_best_k_models") or {})
        if state_dict.get("dirpath", self.dirpath) != self.dirpath:  # its best_k_models stay behind: remember them
            cwd = state_dict.get("cwd") if isinstance(state_dict.get("cwd"), str) else ""
            earlier.update({os.path.join(cwd, str(path)): score
                            for path, score in (state_dict.get("best_k_models") or {}).items()})
        self.earlier_best_k_models = earlier
        self.kept_policies = dict(state_dict.get("kept_policies") or {})

    def known_best(self) -> dict[str, Any]:
        """The best checkpoints (path -> score) of this run and of the runs it resumed."""
        return {**self.earlier_best_k_models, **self.best_k_models}

    def kept_best(self) -> list[Path]:
        """The ``save_top_k`` best checkpoints on disk by the monitored metric, of this run and of the runs it
        resumed (all of them with ``save_top_k -1``), best first."""
        scored = self.known_best()
        on_disk = [(Path(p), float(v)) for p, v in scored.items() if Path(p).is_file()]
        on_disk.sort(key=lambda item: item[1], reverse=self.mode == "max")
        return [p for p, _ in (on_disk if self.save_top_k == -1 else on_disk[: max(self.save_top_k, 0)])]


def with_atomic_checkpoint_io(plugins: Any) -> list[Any]:
    """``plugins`` (None, one plugin or a list) plus an :class:`AtomicCheckpointIO`, unless
    they already hold a ``CheckpointIO`` (the user's choice wins). A wrapping IO without a
    base IO of its own (``AsyncCheckpointIO()``) gets the atomic one as its base."""
    if plugins is None:
        plugins = []
    elif not isinstance(plugins, (list, tuple)):
        plugins = [plugins]
    plugins = list(plugins)
    ios = [p for p in plugins if isinstance(p, CheckpointIO)]
    if not ios:
        plugins.append(AtomicCheckpointIO())
    for io in ios:
        if isinstance(io, AsyncCheckpointIO) and io.checkpoint_io is None:
            io.checkpoint_io = AtomicCheckpointIO()
    return plugins


# ------------------------------------------------------------------------------ the format
def write_td3_section(checkpoint: dict[str, Any], **state: Any) -> None:
    """Add the td3_lightning section (format version, algorithm, and ``state``) to ``checkpoint``."""
    checkpoint[CHECKPOINT_KEY] = {"format_version": FORMAT_VERSION, "algorithm": "TD3", **state}


def check_checkpoint_meta(checkpoint: Any, name: str = "the checkpoint") -> dict[str, Any]:
    """The ``td3_lightning`` section of a loaded checkpoint; :class:`UserInputError` with one
    line if it is not a TD3 checkpoint of the format this version reads."""
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise UserInputError(f"{name} is not a Lightning checkpoint (no 'state_dict')")
    meta = checkpoint.get(CHECKPOINT_KEY)
    if not isinstance(meta, dict):
        raise UserInputError(
            f"{name} was not written by td3_lightning (a Lightning checkpoint without the '{CHECKPOINT_KEY}' section)"
        )
    if meta.get("algorithm") != "TD3":
        raise UserInputError(f"{name} holds a '{meta.get('algorithm')}' model, not TD3")
    if meta.get("format_version") != FORMAT_VERSION:
        raise UserInputError(
            f"{name} has format version {meta.get('format_version')}; this td3_lightning reads version {FORMAT_VERSION}"
        )
    return meta


def options_as_trained(recorded: Mapping[str, Any] | None, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The options of one group (``model``, ``data``) that a checkpoint was trained with: those it records, and for
    each of ``defaults`` that it predates (written before the option existed) the default, which reproduces what ran
    before the option existed (true of every option so far: add one whose default changes training as a new
    :data:`FORMAT_VERSION` instead). ``recorded`` None (the group is not recorded at all): {}, nothing known."""
    if recorded is None:
        return {}
    return {**defaults, **recorded}


def inspect_checkpoint(path: str) -> dict[str, Any]:
    """Read ``path`` (memory-mapped: the tensors are not loaded; then every record's checksum is compared,
    :func:`damaged_record`) and check that it is a readable td3_lightning checkpoint of this format version; return
    the facts the CLI checks against the env. :class:`UserInputError` with one line otherwise."""
    if os.path.getsize(path) == 0:
        raise UserInputError(f"cannot read checkpoint {path}: the file is empty")
    try:
        with warnings.catch_warnings():  # torch warns about odd bytes; the error below says it in one line
            warnings.simplefilter("ignore")
            try:
                ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except Exception:
                if zipfile.is_zipfile(path):
                    raise
                ckpt = torch.load(path, map_location="cpu", weights_only=True)  # the pre-zip torch format
    except Exception as err:
        if not zipfile.is_zipfile(path) and str(path).lower().endswith(".onnx"):
            reason = ("it is an ONNX model (an exported actor?), not a td3_lightning checkpoint: give the .ckpt it "
                      "was exported from")
        elif not zipfile.is_zipfile(path):
            reason = "the file is truncated or corrupt, or not a PyTorch checkpoint"
        elif "TorchScript" in str(err):  # torch.load refuses a torch.jit archive: an export of ours, likely
            reason = ("it is a TorchScript archive (an exported actor?), not a td3_lightning checkpoint: give the "
                      ".ckpt it was exported from")
        elif "Weights only load failed" in str(err):
            reason = "it holds Python objects that do not load safely (weights_only), not a td3_lightning checkpoint"
        else:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            reason = f"the file is corrupt ({type(err).__name__}: {first[:160]})"
        raise UserInputError(f"cannot read checkpoint {path}: {reason}") from None
    check_checkpoint_meta(ckpt, f"checkpoint {path}")
    damaged = damaged_record(path) if zipfile.is_zipfile(path) else None
    if damaged is not None:  # torch.load reads a damaged tensor without a word
        raise UserInputError(f"cannot read checkpoint {path}: the file is corrupt ({damaged})")
    hp = ckpt.get("hyper_parameters") or {}
    low, high = hp.get("action_low"), hp.get("action_high")
    data = ckpt.get(DATAMODULE_KEY) or {}
    replay = data.get("replay") if isinstance(data, dict) else None
    obs_shape = hp.get("obs_shape", data.get("obs_shape") if isinstance(data, dict) else None)
    env = (data.get("env_id"), data.get("env_kwargs")) if isinstance(data, dict) and data else None
    return {
        "path": path,
        "obs_shape": tuple(obs_shape) if obs_shape is not None else None,
        "env": env or tuple(ckpt[CHECKPOINT_KEY].get("env") or (None, None)),  # a slim one keeps it in its section
        "model": dict(hp),
        "global_step": int(ckpt.get("global_step") or 0),
        "privileged": bool(hp.get("critic_obs_shape")) if "critic_obs_shape" in hp else None,  # None: not said
        "critic_obs_shape": tuple(hp["critic_obs_shape"]) if hp.get("critic_obs_shape") is not None else None,
        "action_shape": (len(low),) if low is not None else None,
        "action_bounds": (list(low), list(high)) if low is not None and high is not None else None,
        "replay_capacity": int(replay["capacity"]) if isinstance(replay, dict) and "capacity" in replay else None,
        "replay_size": int(replay["size"]) if isinstance(replay, dict) and "size" in replay else None,
        "replay_layout": {k: replay[k] for k in LAYOUT_KEYS if k in replay} if isinstance(replay, dict) else None,
        "data_options": data.get("options") if isinstance(data, dict) else None,
        "chosen_on": _chosen_on(path, data.get("validated_on") if isinstance(data, dict) and _monitored(ckpt) else
                                None, ckpt[CHECKPOINT_KEY].get("chosen_on")),
        "processes": int(data.get("world_size", 1)) if isinstance(data, dict) and data else None,
        "resumable": all(k in ckpt for k in ("optimizer_states", "loops")),
        "train_seconds": timer_train_seconds(ckpt),
    }


def seeds_overlap(start: int, count: int, other_start: int, other_count: int) -> bool:
    """Whether env seeds ``start`` .. ``start + count - 1`` and ``other_start`` .. share one."""
    return start < other_start + other_count and other_start < start + count


def first_free_seed(count: int, taken: list[tuple[int, int]], candidates: Iterable[int]) -> int | None:
    """The first of ``candidates`` whose ``count`` env seeds share none of the ``taken`` ranges (first seed, count)."""
    return next((s for s in candidates if not any(seeds_overlap(s, count, start, n) for start, n in taken)), None)


def choosing_episodes_tested(test_seed: int, test_episodes: int, chosen_on: list[tuple[str, int, int]]) -> str | None:
    """A warning line when the test episodes (``test_seed``, ``test_episodes``) share env seeds with episodes on which
    the tested checkpoint's run chose its checkpoints (``chosen_on``: what, first seed, count), else None."""
    shared = [(what, start, n) for what, start, n in chosen_on if seeds_overlap(test_seed, test_episodes, start, n)]
    if not shared:
        return None
    taken = [(start, n) for _, start, n in chosen_on]
    free = first_free_seed(test_episodes, taken, (0, *(start + n for start, n in taken)))  # past the last: always free
    where = " and ".join(f"its {what} episodes (seeds {start}-{start + n - 1})" for what, start, n in shared)
    return (f"the test episodes (data.test_seed {test_seed}: seeds {test_seed}-{test_seed + test_episodes - 1}) share "
            f"env seeds with {where}, on which the run chose its checkpoints: the test return is not an unbiased "
            f"estimate; test on seeds of their own, e.g. --data.test_seed {free}")


def _monitored(ckpt: dict[str, Any]) -> bool:
    """Whether the run that wrote ``ckpt`` kept best checkpoints by a validation metric (``checkpoint.monitor`` not
    null), as its checkpoint callback's state says (none recorded: assumed so)."""
    states = [state for key, state in (ckpt.get("callbacks") or {}).items()
              if str(key).startswith("ModelCheckpoint") and isinstance(state, dict) and "monitor" in state]
    return not states or any(state["monitor"] is not None for state in states)


def _chosen_on(path: str, validated_on: Any, exported: Any = None) -> list[tuple[str, int, int]]:
    """The episodes (what, first env seed, count) on which the run of the checkpoint at ``path`` chose among its
    checkpoints: its validation (``validated_on``, recorded in the checkpoint) and, where a ``selection.json``
    beside it played this checkpoint, the selection's; for an exported one, those of its source (``exported``)."""
    if isinstance(exported, list):
        return [(str(what), int(start), int(n)) for what, start, n in exported]
    chosen: list[tuple[str, int, int]] = []
    if isinstance(validated_on, (list, tuple)) and len(validated_on) == 2 and all(
            isinstance(v, int) for v in validated_on):
        chosen.append(("validation", *validated_on))
    folder = Path(path).parent
    try:
        selection = json.loads((folder / SELECTION_FILE).read_text())
        if Path(path).resolve() in {(folder / name).resolve() for name in selection["candidates"]}:
            chosen.append(("selection", int(selection["seed"]), int(selection["episodes"])))
    except (OSError, ValueError, KeyError, TypeError):  # no selection here, or not one of ours: nothing to add
        pass
    return chosen


def timer_train_seconds(ckpt: dict[str, Any]) -> float | None:
    """The training time that Lightning's ``Timer`` (the callback of ``trainer.max_time``) had counted when the
    checkpoint was written (a resumed run's timer goes on from it), or None for a run without ``max_time``."""
    state = (ckpt.get("callbacks") or {}).get("Timer")  # Timer.state_key
    elapsed = state.get("time_elapsed") if isinstance(state, dict) else None
    train = elapsed.get("train") if isinstance(elapsed, dict) else None
    return float(train) if isinstance(train, (int, float)) else None


def damaged_record(path: str | Path) -> str | None:
    """What is wrong with the first record of the checkpoint archive ``path`` whose data fails its CRC-32 (torch
    writes one for each; records written without one are not checked) or cannot be read, or None. Every byte is
    read, once per file version and process; the other local ranks of a distributed run leave it to rank 0."""
    if int(os.environ.get("LOCAL_RANK", "0") or 0) != 0:
        return None
    stat = os.stat(path)
    return _damaged_record(os.path.abspath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _damaged_record(path: str, mtime_ns: int, size: int) -> str | None:
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.CRC == 0:  # none written (torch.serialization.set_crc32_options(False)), or no data
                continue
            try:
                with archive.open(info) as stream:
                    while stream.read(1 << 24):  # the CRC is compared at the end of the record
                        pass
            except zipfile.BadZipFile:
                return f"its record {info.filename} fails its checksum"
            except (OSError, EOFError, NotImplementedError, zlib.error) as err:  # a failing disk, a damaged header
                return f"its record {info.filename} cannot be read: {err}"
    return None


def is_training_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a checkpoint a run can resume from (it holds ``optimizer_states`` or ``loops``), of any
    Lightning model: read memory-mapped; a file whose objects do not load safely is looked into as a zip archive."""
    keys = ("optimizer_states", "loops")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception:  # noqa: BLE001 - not loadable as plain data: the pickled key names tell
        if not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as archive:
            pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
            return any(k.encode() in archive.read(n) for n in pickles for k in keys)
    return isinstance(ckpt, dict) and any(k in ckpt for k in keys)


#: what ``--ckpt_path`` takes, said after a checkpoint it cannot use


def check_checkpoint(path: str | Path, option: str = "--ckpt_path", takes: str = CKPT_PATH_TAKES) -> dict[str, Any]:
    """:func:`inspect_checkpoint` of the file that ``option`` names; one-line :class:`UserInputError` naming the
    option unless it is a readable td3_lightning checkpoint of this format version (``takes``: what the option
    takes, said after the problem)."""
    check_checkpoint_file(path, option, takes)
    try:
        return inspect_checkpoint(str(path))
    except UserInputError as err:
        raise UserInputError(f"{err}; {takes}") from None


def slim_checkpoint(src: str | Path, out: str | Path) -> Path:
    """Write the weights-only checkpoint of ``src`` (:data:`SLIM_KEYS`) to ``out``."""
    chosen_on = check_checkpoint(src)["chosen_on"]
    ckpt = torch.load(src, map_location="cpu", weights_only=True)
    slim = {k: ckpt[k] for k in SLIM_KEYS if k in ckpt}
    slim[CHECKPOINT_KEY] = {**ckpt[CHECKPOINT_KEY], "noise_rng": None, "chosen_on": [list(c) for c in chosen_on]}
    data = ckpt.get(DATAMODULE_KEY)
    if isinstance(data, dict) and data.get("env_kwargs") is not None:  # the env it was trained on, told back
        slim[CHECKPOINT_KEY]["env"] = [data.get("env_id"), data["env_kwargs"]]
    out = Path(out)
    atomic_torch_save(slim, out, replay=False)
    return out


# ------------------------------------------------------------------------------ finding a run's checkpoints
def find_run_checkpoint(config: Any, kind: str, selected: bool = True, run_options: bool = True,
                        fit: bool = False, model_options: Mapping[str, Any] | None = None,
                        default_options: Mapping[str, Any] | None = None) -> Path:
    """The newest ``last.ckpt`` (``kind`` ``last``) or the newest run's best checkpoint by ``val/return``
    (``kind`` ``best``: named by ``checkpoint.filename``, ``best-step*.ckpt`` by default) that a
    run with this configuration writes: under ``checkpoint.dirpath`` if set, else
    ``<logger save_dir>/<name>/*/checkpoints/`` (by default ``lightning_logs/version_*/checkpoints/``
    in the current folder). Where the newest best checkpoint's folder has a ``selection.json``
    (``--selection.episodes``), ``best`` is the checkpoint it chose, else :func:`best_of_run`; with ``selected`` False,
    the newest best checkpoint file itself. Where none matches, the error says where another run's checkpoints are,
    and the options that find them if ``run_options`` (a command with ``--config`` and ``--checkpoint.dirpath``;
    export has neither), and for a ``fit`` that a new run starts without ``--ckpt_path``. Of the config's env, the
    runs most like the config are taken: trained with its ``data.env_kwargs``, then with ``model_options`` (the
    model options it sets away from their defaults), then with most of ``default_options`` (those it sets back to
    their defaults: ``--model.critic_bins 0`` over a config's 101)."""
    trainer = config.get("trainer") or {}
    root = Path(trainer.get("default_root_dir") or os.getcwd())
    checkpoint = config.get("checkpoint") or {}
    if kind == "last":
        name_glob = "last*.ckpt"
    else:
        filename = checkpoint.get("filename") or BEST_FILENAME
        name_glob = filename.split("{", 1)[0] + "*.ckpt"
    dirpath = checkpoint.get("dirpath")
    if dirpath:
        where, pattern = Path(dirpath), name_glob
    else:
        logger = trainer.get("logger")
        if isinstance(logger, list):
            logger = logger[0] if logger else False
        if logger is False:
            where, pattern = root, f"checkpoints/{name_glob}"
        else:
            init = (logger.get("init_args") or {}) if hasattr(logger, "get") else {}
            save_dir = Path(init.get("save_dir") or root)
            name = init.get("name", "lightning_logs")
            where, pattern = (save_dir / name if name else save_dir), f"*/checkpoints/{name_glob}"
    candidates = list(where.glob(pattern))
    described = f"{where}/{pattern}"
    candidates = [p for p in candidates if p.is_file()]
    if kind == "best":
        candidates = [p for p in candidates if not p.name.startswith("last")]
    if not candidates:
        other = ""
        others = [p for p in where.glob(pattern[: -len(name_glob)] + "*.ckpt")  # none is a last.ckpt for kind last
                  if p.is_file() and not p.name.startswith("last")]
        if kind == "best" and others:  # a fit given another checkpoint.filename than this command
            newest_other = _newest(others)
            run_config = newest_other.parent.parent / "config.yaml"
            other = (f"; the newest checkpoint there is {newest_other}, named by another checkpoint.filename: "
                     "pass it to --ckpt_path" + (f", or give --config {run_config} (that run's options)"
                                                 if run_config.is_file() and run_options else ""))
        elif fit and others:  # a run with checkpoint.save_last false: its best checkpoints hold the replay buffer
            other = (f"; the runs there kept no last.ckpt (checkpoint.save_last false), and the newest "
                     f"checkpoint, {_newest(others)}, holds what a resume needs: pass it to --ckpt_path")
        if not other and not dirpath:  # a fit that kept its checkpoints in a checkpoint.dirpath of its own
            other = _dirpath_hint(where, name_glob, kind, run_options)
        fallback = "; pass a checkpoint file to --ckpt_path" + (", or leave --ckpt_path out to start a new run"
                                                                 if fit else "")
        raise UserInputError(f"--ckpt_path {kind}: no checkpoint matches {described}{other or fallback}")
    data = config.get("data") or {}
    candidates = _of_the_run(candidates, data.get("env_id"), data.get("env_kwargs") or {}, model_options or {},
                             default_options or {}, kind, described, fit)
    newest = _newest(candidates)
    if kind != "best" or not selected:
        return newest
    return selected_checkpoint(newest) or best_of_run(newest)


def peek_checkpoint(path: str | Path) -> dict[str, Any] | None:
    """A checkpoint's plain data, read memory-mapped (tensors stay on disk), or None if it cannot be read safely
    (the checks of a file that is then used say why)."""
    try:
        with warnings.catch_warnings():  # torch warns about odd bytes
            warnings.simplefilter("ignore")
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except Exception:  # noqa: BLE001 - not readable as plain data
        return None
    return ckpt if isinstance(ckpt, dict) else None


def _trained_run(path: Path, ckpt: Mapping[str, Any] | None = None
                 ) -> tuple[str | None, dict[str, Any] | None, dict[str, Any]]:
    """The env id, ``data.env_kwargs`` and model hyperparameters a checkpoint was trained with (None, None, {} where
    it does not say or cannot be read); ``ckpt``: its content, where already read."""
    ckpt = (peek_checkpoint(path) if ckpt is None else ckpt) or {}
    data = ckpt.get(DATAMODULE_KEY) if isinstance(ckpt.get(DATAMODULE_KEY), dict) else {}
    if data.get("env_id"):
        env, kwargs = data.get("env_id"), data.get("env_kwargs")
    else:  # a slim checkpoint keeps [env_id, env_kwargs] in its own section
        env, kwargs = (*((ckpt.get(CHECKPOINT_KEY) or {}).get("env") or ()), None, None)[:2]
    hp = ckpt.get("hyper_parameters")
    return ((env if isinstance(env, str) else None), (kwargs if isinstance(kwargs, dict) else None),
            (dict(hp) if isinstance(hp, Mapping) else {}))


def _of_the_run(candidates: list[Path], env_id: str | None, env_kwargs: Mapping[str, Any],
                model_options: Mapping[str, Any], default_options: Mapping[str, Any], kind: str, described: str,
                fit: bool) -> list[Path]:
    """The ``candidates`` of runs on ``env_id`` (all without one: export names no env; a file that does not say its
    env is kept), and of those the runs most like the config: trained with its ``env_kwargs``, then with its
    ``model_options`` (two configs of one env in one folder each take their own run's; where none is, the env's),
    then with most of its ``default_options``. None of the env: one line naming the newest checkpoint there and its
    env."""
    if not env_id:
        return candidates
    runs = {p: _trained_run(p) for p in candidates}
    matching = [p for p in candidates if runs[p][0] in (None, env_id)]
    if not matching:
        other = _newest(candidates)
        raise UserInputError(
            f"--ckpt_path {kind}: no checkpoint that matches {described} is of {env_id} (the newest, {other}, is of "
            f"{runs[other][0]}): pass a checkpoint of {env_id} to --ckpt_path, or give the "
            "--trainer.default_root_dir its run was trained in" + (
                ", or leave --ckpt_path out to start a new run" if fit else ""))
    given = _as_json(dict(env_kwargs))

    def alike(hp: Mapping[str, Any], options: Mapping[str, Any], predating: bool = False) -> list[str]:
        """The ``options`` ``hp`` has alike; with ``predating``, also those it predates (trained at their default)."""
        return [key for key, value in options.items()
                if (key in hp and same_option(key, hp[key], value)) or (predating and hp and key not in hp)]

    def likeness(path: Path) -> tuple[bool, bool, int]:
        trained_id, trained_kwargs, hp = runs[path]
        same_env = trained_id == env_id and trained_kwargs is not None and _as_json(trained_kwargs) == given
        same_model = bool(hp) and len(alike(hp, model_options)) == len(model_options)
        return same_env, same_model, len(alike(hp, default_options, predating=True))

    likenesses = {p: likeness(p) for p in matching}
    best = max(likenesses.values())
    chosen = [p for p in matching if likenesses[p] == best]
    if model_options and not best[1] and not fit:  # a fit's resume refuses the options it does not have, one line
        hp = runs[_newest(chosen)][2]
        differ = ", ".join(f"model.{key} {_as_json(hp[key]) if key in hp else '(not recorded)'} (asked: "
                           f"{_as_json(value)})" for key, value in model_options.items()
                           if key not in alike(hp, model_options))
        warnings.warn(f"--ckpt_path {kind}: no {env_id} run in {described} was trained with the model options asked "
                      f"for; the newest of the {env_id} runs most like them is played, with its own: {differ}",
                      UserWarning, stacklevel=2)
    return chosen


#: the env's facts that the datamodule gives the model
LINKED_FROM_DATA = ("obs_shape", "critic_obs_shape", "action_low", "action_high")

#: model options that say how this process computes, not what is trained: a played or resumed run takes its own
HOW_IT_RUNS = ("compile_mode", "flush_denormal")
#: model options a resumed run takes from the command line over its checkpoint's: those of :data:`HOW_IT_RUNS`, when
#: the networks start over and how long the schedules run (handled in the CLI's read_checkpoint_hparams)
RESUME_MAY_CHANGE = ("reset_steps", "schedule_steps", *HOW_IT_RUNS)


def options_of_the_run(model: Mapping[str, Any], defaults: Mapping[str, Any]
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model options of ``model`` that tell a config's runs from others of the same env (``--ckpt_path last``
    and ``best``; ``export --config``): those set away from ``defaults`` (TD3's), and those at their defaults; not
    those a resume may change, the env's facts, nor those idle given the others (``critic_range`` without bins)."""
    idle = idle_model_options(model)
    compared = {key: value for key, value in dict(model).items()
                if key in defaults and key not in RESUME_MAY_CHANGE + LINKED_FROM_DATA and key not in idle}
    away = {key: value for key, value in compared.items() if not same_option(key, defaults[key], value)}
    return away, {key: value for key, value in compared.items() if key not in away}


def same_option(key: str, saved: Any, given: Any) -> bool:
    """Whether two values of a model option are the same: equal, or equal as data (a list and a tuple), or for
    ``teacher`` the same file however named."""
    if key == "teacher" and isinstance(saved, str) and isinstance(given, str):
        return os.path.realpath(shipped_path(saved)) == os.path.realpath(shipped_path(given))
    return saved == given or _as_json(saved) == _as_json(given)


def _as_json(value: Any) -> str:
    """``value`` as canonical JSON text: equal for equal dicts, whatever their key order or list types."""
    return json.dumps(value, sort_keys=True, default=str)


def _dirpath_hint(where: Path, name_glob: str, kind: str, run_options: bool) -> str:
    """``; the run of <config.yaml> keeps its checkpoints in <dirpath> ...`` for the newest run under ``where``
    whose config names a ``checkpoint.dirpath`` holding a ``kind`` checkpoint; empty if none does."""
    import yaml

    for config_file in sorted(where.glob("*/config.yaml"), key=lambda p: p.stat().st_mtime_ns, reverse=True):
        try:
            dirpath = ((yaml.safe_load(config_file.read_text()) or {}).get("checkpoint") or {}).get("dirpath")
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        found = [p for p in Path(dirpath).glob(name_glob) if p.is_file()] if isinstance(dirpath, str) else []
        if kind == "best":
            found = [p for p in found if not p.name.startswith("last")]
        if found:
            option = f"add --checkpoint.dirpath {dirpath}, or " if run_options else ""
            return (f"; the run of {config_file} keeps its checkpoints in {dirpath} (its checkpoint.dirpath): "
                    f"{option}pass {_newest(found)} to --ckpt_path")
    return ""


def _newest(paths: list[Path]) -> Path:
    """The most recently written of ``paths`` (ties by name)."""
    return max(paths, key=lambda p: (p.stat().st_mtime_ns, str(p)))


def best_of_run(newest: Path) -> Path:
    """Of the best checkpoints kept on disk by ``newest``'s run and by the runs it resumed (each resume writes into a
    folder of its own) on the same env and ``env_kwargs``, the one with the best monitored score, newest first among
    equals: what an uninterrupted run keeps as its best. ``newest`` itself where its record cannot be read."""
    ckpt = peek_checkpoint(newest) or {}
    callbacks = ckpt.get("callbacks")
    here = Path(os.path.realpath(newest))
    for key, state in (callbacks.items() if isinstance(callbacks, Mapping) else ()):
        scored = _kept_scores(state, here)
        if here not in scored:  # another callback's record, or not of the folder newest lies in
            continue
        mode = state.get("mode") or _lightning.checkpoint_state_mode(str(key))
        if mode not in ("min", "max"):
            return newest
        env = _trained_run(newest, ckpt)[:2]
        alike = [p for p in scored if p == here or _trained_run(p)[:2] == env]
        sign = -1.0 if mode == "min" else 1.0
        best = max(alike, key=lambda p: (sign * scored[p], p.stat().st_mtime_ns, str(p)))
        return newest if best == here else best
    return newest


def _kept_scores(state: Any, here: Path) -> dict[Path, float]:
    """The best checkpoints (real path -> score) that a ``ModelCheckpoint`` state found in the checkpoint ``here``
    records (its own and ``earlier_best_k_models``) and that are on disk; {} for a state of another kind. The paths
    are recorded as the fits were given them: found relative to the recorded ``dirpath``, from where ``here`` is."""
    if not (isinstance(state, Mapping) and state.get("monitor") and isinstance(state.get("best_k_models"), Mapping)
            and isinstance(state.get("dirpath"), str)):
        return {}
    cwd = state.get("cwd") if isinstance(state.get("cwd"), str) else ""  # older checkpoints: one folder for both
    recorded_dir = os.path.join(cwd, state["dirpath"])
    scored: dict[Path, float] = {}
    for recorded, score in {**(state.get("earlier_best_k_models") or {}), **state["best_k_models"]}.items():
        try:
            path = Path(os.path.normpath(here.parent / os.path.relpath(os.path.join(cwd, str(recorded)),
                                                                       recorded_dir)))
            value = float(score)
        except (TypeError, ValueError):
            continue
        if value == value and path.is_file():  # NaN never counts as best
            scored[path] = value
    return scored


def selected_checkpoint(newest: Path) -> Path | None:
    """The checkpoint that ``--selection.episodes`` chose (the ``selection.json`` beside ``newest``, the newest best
    checkpoint), or None: also when the selection is older than ``newest`` (a later run wrote best checkpoints
    there and selected nothing)."""
    folder = newest.parent
    path = folder / SELECTION_FILE
    if not path.is_file() or path.stat().st_mtime_ns < newest.stat().st_mtime_ns:
        return None
    try:
        selection = json.loads(path.read_text())
        name, candidates = selection["chosen"], selection["candidates"]
        chosen = Path(os.path.normpath(folder / name))
        if not isinstance(candidates, (dict, list)):
            raise TypeError(f"its candidates are {type(candidates).__name__}, not checkpoint names")
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserInputError(f"{path} is not a selection this package wrote ({type(err).__name__}: {err}); "
                             "delete it or pass a checkpoint file to --ckpt_path") from None
    if name not in candidates or chosen.name.startswith("last") or chosen.suffix != ".ckpt" or not chosen.is_file():
        raise UserInputError(f"{path} names {chosen}, which is not one of its candidate checkpoints on disk; delete "
                             f"{path.name} or pass a checkpoint file to --ckpt_path")
    return chosen
