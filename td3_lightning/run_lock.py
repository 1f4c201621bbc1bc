"""One fit per run: a fit notes itself in its log folder (``fit.pid``) while it trains, and a resume refuses a
checkpoint that a fit on this machine is still training from or into, which would otherwise train the same run
twice, each process writing its own ``last.ckpt``.

The note names the process (its PID, the machine, the process's start time, so that a reused PID is not taken for
it), the folder the fit writes into and the run folder of the checkpoint it resumed from. It is removed when the fit
ends, however it ends; one left by a killed process names a process that no longer runs and is ignored.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L

from td3_lightning.errors import UserInputError

#: the note's file name inside the fit's log folder
LOCK_NAME = "fit.pid"


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started, in the kernel's clock ticks (Linux), or None where that cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]  # field 22, counted after the command's name


def _running(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` runs on this machine and is the one that started at ``start``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it runs
    now = _process_start(pid)
    return start is None or now is None or now == start


def run_folder(checkpoint: Path) -> Path:
    """The run (log) folder a checkpoint belongs to: the folder above ``checkpoints/``, else its own folder."""
    folder = checkpoint.resolve().parent
    return folder.parent if folder.name == "checkpoints" else folder


@dataclass(frozen=True)
class Holder:
    """A fit that is training: its process, since when, and the folders it writes into and resumed from."""

    pid: int
    started: float
    folder: Path
    resumed_from: Path | None

    def line(self, checkpoint: Path) -> str:
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started))
        return (f"{checkpoint} belongs to a run that process {self.pid} is still training (into {self.folder}, since "
                f"{since}); a second fit would train that run twice: wait for it to end, or stop it (kill -TERM "
                f"{self.pid}: it writes last.ckpt and prints the command that goes on), then resume")


def _read(note: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(note.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def training_holder(checkpoint: str | Path) -> Holder | None:
    """The fit on this machine, other than this process, still training from or into ``checkpoint``'s run."""
    run = run_folder(Path(checkpoint))
    host, me = socket.gethostname(), os.getpid()
    for note in run.parent.glob(f"*/{LOCK_NAME}"):
        data = _read(note)
        if data is None or data.get("host") != host or not isinstance(data.get("pid"), int) or data["pid"] == me:
            continue
        resumed = Path(data["resumed_from"]) if data.get("resumed_from") else None
        if run not in (note.parent.resolve(), resumed) or not _running(data["pid"], data.get("pid_start")):
            continue
        return Holder(data["pid"], float(data.get("started", 0.0)), note.parent, resumed)
    return None


def refuse_if_training(checkpoint: str | Path) -> None:
    """One line (:class:`UserInputError`) when a fit still trains the run of the checkpoint a resume would take."""
    holder = training_holder(checkpoint)
    if holder is not None:
        raise UserInputError(holder.line(Path(checkpoint)))


class RunLock(L.Callback):
    """Writes ``fit.pid`` into the fit's log folder when it starts (rank 0) and removes it when the fit ends."""

    def __init__(self) -> None:
        self._note: Path | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero or trainer.log_dir is None:
            return
        folder = Path(trainer.log_dir)
        folder.mkdir(parents=True, exist_ok=True)
        ckpt = Path(trainer.ckpt_path) if trainer.ckpt_path else None
        resumed = run_folder(ckpt) if ckpt is not None and ckpt.is_file() else None
        pid = os.getpid()
        note = {"pid": pid, "pid_start": _process_start(pid), "host": socket.gethostname(), "started": time.time(),
                "resumed_from": str(resumed) if resumed is not None else None}
        path = folder / LOCK_NAME
        temporary = folder / f".{LOCK_NAME}.{pid}"
        temporary.write_text(json.dumps(note))
        os.replace(temporary, path)
        self._note = path

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.release()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.release()

    def release(self) -> None:
        """Remove this fit's note (if it is still this process's)."""
        note, self._note = self._note, None
        if note is not None and (_read(note) or {}).get("pid") == os.getpid():
            note.unlink(missing_ok=True)
