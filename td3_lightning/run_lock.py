"""One fit per run: while a fit trains, a note in this machine's register of fits names its process and its folders;
a resume of a checkpoint that another live fit writes or resumed from, or a fit into a checkpoint folder that another
live fit writes, is one line (it would train the same run twice, each process writing its own ``last.ckpt``).

The register is a folder (``$TD3_LIGHTNING_FITS``, else ``$XDG_CACHE_HOME/td3_lightning/fits``, else
``~/.cache/td3_lightning/fits``) with a file per fit: its PID, machine and start (the process's start time where the
system tells it, so that a reused PID is not taken for it), its log and checkpoint folders, and the folder of the
checkpoint it resumed from. A fit removes its note however it ends; a note of a process that no longer runs (killed)
is ignored and cleared. Fits on other machines are not seen; on Windows nothing is checked.
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
from lightning.pytorch.callbacks import ModelCheckpoint

from td3_lightning.errors import UserInputError

#: overrides where the register of this machine's fits lives
REGISTER_ENV = "TD3_LIGHTNING_FITS"


def register() -> Path:
    """The folder of this machine's fit notes."""
    if os.environ.get(REGISTER_ENV):
        return Path(os.environ[REGISTER_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "td3_lightning" / "fits"


def _process_stat(pid: int) -> tuple[str, str] | None:
    """Process ``pid``'s state and start time (Linux's ``/proc``), or None where they cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except (OSError, IndexError):
        return None
    return (fields[0], fields[19]) if len(fields) > 19 else None  # fields 3 and 22, counted after the name


def _running(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` runs on this machine and is the one that started at ``start``."""
    try:
        os.kill(pid, 0)  # (POSIX: a check, no signal sent)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it runs
    except OSError:
        return False
    stat = _process_stat(pid)
    if stat is None:
        return True
    state, now = stat
    return state != "Z" and (start is None or now == start)


@dataclass(frozen=True)
class Note:
    """A fit that trains: its process (and when it started, where known), since when, and its folders (resolved)."""

    path: Path
    pid: int
    pid_start: str | None
    started: float
    log_dir: Path
    checkpoint_dirs: tuple[Path, ...]
    resumed_dir: Path | None

    def claims(self) -> set[Path]:
        """The checkpoint folders a second fit must not take: those it writes and the one it resumed from."""
        return {*self.checkpoint_dirs, *([self.resumed_dir] if self.resumed_dir else [])}

    def line(self, what: str, folder: bool = False) -> str:
        """The refusal: of a resume of ``what`` (a checkpoint of this fit's run), or with ``folder`` of a fit that
        would write its checkpoints into ``what``, this fit's checkpoint folder."""
        since = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.started))
        training = f"process {self.pid} is still training (into {self.log_dir}, since {since})"
        if folder:
            fix = (f"{what} is the checkpoint folder of a run that {training}; a second fit there would write over "
                   "its checkpoints: give this fit a --checkpoint.dirpath of its own, or wait for that fit to end")
        else:
            fix = (f"{what} belongs to a run that {training}; a second fit would train that run twice: wait for it "
                   f"to end, or stop it (kill -TERM {self.pid}: it writes last.ckpt and prints the command that goes "
                   "on), then resume")
        return f"{fix} (if process {self.pid} is not a td3_lightning fit, delete {self.path})"


def _note(path: Path) -> Note | None:
    """The note at ``path`` if it is one of this machine's, else None (unreadable, malformed, another machine's)."""
    try:
        data: Any = json.loads(path.read_text())
        if data.get("host") != socket.gethostname() or not isinstance(data["checkpoint_dirs"], list):
            return None
        start = data.get("pid_start")
        return Note(path, int(data["pid"]), str(start) if start is not None else None, float(data["started"]),
                    Path(data["log_dir"]), tuple(Path(p) for p in data["checkpoint_dirs"]),
                    Path(data["resumed_dir"]) if data.get("resumed_dir") else None)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def live_notes() -> list[Note]:
    """The notes of the fits that train on this machine, other than this process's; notes of ended ones cleared."""
    if os.name == "nt":
        return []
    notes = []
    for path in sorted(register().glob("*.json")):
        note = _note(path)
        if note is None or note.pid == os.getpid():
            continue
        if _running(note.pid, note.pid_start):
            notes.append(note)
        else:
            path.unlink(missing_ok=True)
    return notes


def training_note(checkpoint: str | Path) -> Note | None:
    """The note of the live fit on this machine, other than this process, that writes ``checkpoint``'s folder or
    resumed from it."""
    folder = Path(checkpoint).resolve().parent
    return next((note for note in live_notes() if folder in note.claims()), None)


def refuse_if_training(checkpoint: str | Path) -> None:
    """One line (:class:`UserInputError`) when a live fit trains the run of the checkpoint a resume would take."""
    note = training_note(checkpoint)
    if note is not None:
        raise UserInputError(note.line(str(checkpoint)))


def _checkpoint_dirs(trainer: L.Trainer) -> tuple[Path, ...]:
    return tuple(Path(c.dirpath).resolve() for c in trainer.callbacks if isinstance(c, ModelCheckpoint) and c.dirpath)


class RunLock(L.Callback):
    """Notes the fit in the register when it starts (rank 0) and removes the note when the fit ends; refuses a fit
    whose checkpoint folders, or the one it resumed from, another live fit took first."""

    def __init__(self) -> None:
        self._path: Path | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        log_dir = trainer.log_dir  # on every rank: the logger's folder is broadcast
        if not trainer.is_global_zero or os.name == "nt":
            return
        ckpt = Path(trainer.ckpt_path) if trainer.ckpt_path else None
        resumed = ckpt.resolve().parent if ckpt is not None and ckpt.is_file() else None
        dirs = _checkpoint_dirs(trainer)
        pid = os.getpid()
        stat = _process_stat(pid)
        note = {"pid": pid, "pid_start": stat[1] if stat else None, "host": socket.gethostname(),
                "started": time.time(), "log_dir": str(Path(log_dir or trainer.default_root_dir).resolve()),
                "checkpoint_dirs": [str(d) for d in dirs], "resumed_dir": str(resumed) if resumed else None}
        folder = register()
        path = folder / f"{socket.gethostname()}-{pid}.json"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            temporary = folder / f".{path.name}.tmp"
            temporary.write_text(json.dumps(note))
            os.replace(temporary, path)
        except OSError:
            return  # no register to write (a read-only home): the fit goes on unguarded
        self._path = path
        mine = {*dirs, *([resumed] if resumed else [])}
        other = next((n for n in live_notes() if n.claims() & mine), None)  # one that started at the same time
        if other is not None:
            self.release()
            shared = other.claims() & mine
            if resumed in shared:  # two resumes of one run started together
                raise UserInputError(other.line(str(ckpt)))
            raise UserInputError(other.line(str(sorted(shared)[0]), folder=True))

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.release()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.release()

    def release(self) -> None:
        """Remove this fit's note."""
        path, self._path = self._path, None
        if path is not None:
            path.unlink(missing_ok=True)
