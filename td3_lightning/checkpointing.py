"""Crash-safe checkpoint files.

:class:`AtomicCheckpointIO` writes every checkpoint to a temporary file next to its target,
flushes and fsyncs it, and renames it over the target with ``os.replace`` (then fsyncs the
folder, so that the rename itself survives a power loss). A process killed at any moment,
even in the middle of a write, leaves either the previous complete checkpoint or the new
complete one under the target name, never a truncated file.

The command line uses it by default. With a plain ``Trainer``::

    L.Trainer(plugins=[AtomicCheckpointIO()], ...)

:class:`ModelCheckpoint` is Lightning's, except that ``save_last=True`` refreshes
``last.ckpt`` at every validation (Lightning refreshes it only when a top-k checkpoint was
written at that step), so that a resumed run loses at most one evaluation interval.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.callbacks import ModelCheckpoint as _LightningModelCheckpoint
from lightning.pytorch.plugins.io import CheckpointIO, TorchCheckpointIO
from lightning.pytorch.plugins.io.wrapper import _WrappingCheckpointIO

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
        if not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path)
            return
        atomic_torch_save(checkpoint, path)


@contextlib.contextmanager
def atomic_path(path: _PATH, suffix: str = TMP_SUFFIX) -> Iterator[Path]:
    """Write a file atomically: the body writes the yielded temporary path (hidden, in the
    target's folder, ending in ``suffix``); on success it is fsynced and renamed over ``path``
    and the folder is fsynced; if the body raises, it is removed and ``path`` is untouched."""
    target = Path(path).expanduser()
    folder = target.parent.absolute()
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=folder)
    os.close(fd)
    try:
        if hasattr(os, "chmod"):
            os.chmod(tmp, _FILE_MODE)
        yield Path(tmp)
        _fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)


def atomic_torch_save(obj: Any, path: _PATH) -> None:
    """``torch.save(obj, path)`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
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


class ModelCheckpoint(_LightningModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` (same options, same state key in checkpoints), except that
    ``save_last=True`` also writes ``last.ckpt`` after a validation that did not improve the
    monitored metric."""

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        super().on_validation_end(trainer, pl_module)
        if (
            self.save_last is True
            and not self._should_skip_saving_checkpoint(trainer)  # also: already saved at this step
            and not self._should_save_on_train_epoch_end(trainer)
        ):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))


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
        if isinstance(io, _WrappingCheckpointIO) and io.checkpoint_io is None:
            io.checkpoint_io = AtomicCheckpointIO()
    return plugins
