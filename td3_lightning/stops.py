"""A fit stopped by Ctrl-C (SIGINT) or SIGTERM, or ended by a write the machine refused (a full disk, a folder made
read-only): one line saying where it stands and the command that goes on (a stopped validate or test: that it wrote
no results).

Lightning ends a stopped fit with exit status 1 (SIGINT) or 0 (SIGTERM, which a script reads as success).
:class:`StopNotice` notes the stop while Lightning shuts down; the command line then prints
:meth:`Stop.line` and exits with the shell's status for the signal (128 + its number: 130, 143). For a refused
write it notes the run's newest checkpoint (:attr:`StopNotice.standing`), which the command line names after the
refusal's line.

Python drops an exception raised in a finaliser or a weakref callback, and so a Ctrl-C that lands there (encoding a
GIF makes many): :func:`kept_ctrl_c` notes every Ctrl-C, and :class:`StopNotice` raises a dropped one again at the
end of the next batch.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from td3_lightning.checkpointing import is_write_refusal, peek_checkpoint, run_write_refusal
from td3_lightning.errors import MachineRefusal
from td3_lightning.resources import memory_refusal

#: the exit status of a fit stopped by each signal (the shell's 128 + the signal's number)
EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
#: set by Ctrl-C under :func:`kept_ctrl_c`, cleared once a run has stopped on it
_CTRL_C = threading.Event()


def _interrupt(signum: int, frame: Any) -> None:
    _CTRL_C.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def kept_ctrl_c() -> Iterator[None]:
    """While it runs, a Ctrl-C is also noted, so that :class:`StopNotice` raises it again where Python dropped it; a
    SIGINT handler of the program's own (not Python's default) is left alone."""
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.signal(signal.SIGINT, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _CTRL_C.clear()


@dataclass(frozen=True)
class Standing:
    """Where an ended fit stands: the checkpoint to go on from (None: none yet) and its training step."""

    last: Path | None
    last_step: int | None

    def go_on(self, argv: list[str]) -> str:
        """The checkpoint and its step, and the command that goes on (``argv``: the fit's command line, without the
        program); or, with no checkpoint yet, that the same command starts over."""
        if self.last is None:
            return "no checkpoint was written yet: run the same command again to start over"
        return (f"{self.last} is at step {self.last_step}; go on with: "
                f"{shlex.join(['python', '-m', 'td3_lightning', *_with_ckpt_path(argv, str(self.last))])}")


@dataclass(frozen=True, kw_only=True)
class Stop(Standing):
    """A stopped fit: the signal, the training step reached, and where it stands."""

    signal: str
    step: int
    max_steps: int

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.signal]

    def line(self, argv: list[str]) -> str:
        """What the user reads: the step reached, the checkpoint and its step, and the command that goes on
        (``argv``: the fit's command line, without the program)."""
        of = f" of {self.max_steps}" if self.max_steps > 0 else ""
        return f"stopped by {self.signal} at training step {self.step}{of}; {self.go_on(argv)}"


def _with_ckpt_path(argv: list[str], path: str) -> list[str]:
    """``argv`` with ``--ckpt_path path`` in place of any ``--ckpt_path`` it has."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--ckpt_path":
            skip = True
        elif not arg.startswith("--ckpt_path="):
            kept.append(arg)
    return [*kept, "--ckpt_path", path]


def checkpoint_step(path: Path) -> int | None:
    """The training step a checkpoint was written at, or None if it cannot be read (a file being replaced)."""
    step = (peek_checkpoint(path) or {}).get("global_step")
    return int(step) if isinstance(step, int) else None


@dataclass(frozen=True)
class PlayStop:
    """A validate or test stopped by a signal (a test: before its results were written)."""

    signal: str
    stage: str

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.signal]

    def line(self, argv: list[str]) -> str:
        unwritten = ", before its results were written" if self.stage == "test" else ""
        return f"stopped by {self.signal} during {self.stage}{unwritten}: run the same command again"


def stop_signal(exception: BaseException) -> str | None:
    """``SIGINT`` (Ctrl-C) or ``SIGTERM`` when ``exception`` is Lightning's stop by that signal, else None."""
    return ("SIGINT" if isinstance(exception, KeyboardInterrupt)
            else "SIGTERM" if isinstance(exception, SIGTERMException) else None)


class StopNotice(L.Callback):
    """Notes where a fit stopped by SIGINT (Ctrl-C) or SIGTERM, or ended by a refused write or allocation, stands
    (:attr:`standing`): the newest ``last.ckpt`` of the run (or the checkpoint it resumed from, until it writes its
    own); for a stop also the signal and the step reached (:attr:`stop`). At the end of each batch it raises again a
    Ctrl-C that Python dropped (:func:`kept_ctrl_c`)."""

    def __init__(self) -> None:
        self.stop: Stop | PlayStop | None = None
        self.standing: Standing | None = None

    def on_train_batch_end(self, *args: Any) -> None:
        _raise_dropped_ctrl_c()

    def on_validation_batch_end(self, *args: Any) -> None:
        _raise_dropped_ctrl_c()

    def on_test_batch_end(self, *args: Any) -> None:
        _raise_dropped_ctrl_c()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        name = stop_signal(exception)
        if name == "SIGINT":
            _CTRL_C.clear()
        if trainer.state.fn != "fit":
            if name is not None:
                self.stop = PlayStop(name, getattr(trainer.state.fn, "value", str(trainer.state.fn)))
            return
        if name is None and not is_write_refusal(exception) and memory_refusal(exception) is None:
            return  # only the lines that name the checkpoint read it
        written = next((c.last_model_path for c in trainer.callbacks  # by this run: not an older run's file there
                        if isinstance(c, ModelCheckpoint) and c.last_model_path), "")
        last = Path(written) if written and Path(written).is_file() else None
        if last is None and trainer.ckpt_path and Path(trainer.ckpt_path).is_file():
            last = Path(trainer.ckpt_path)  # nothing written yet: the checkpoint it resumed from
        self.standing = Standing(last, checkpoint_step(last) if last is not None else None)
        if name is not None:
            self.stop = Stop(last, self.standing.last_step, signal=name, step=trainer.global_step,
                             max_steps=trainer.max_steps)


def refusal_of(err: BaseException, trainer: Any, fit: bool = True) -> MachineRefusal | None:
    """``err``, raised in a run (a fit, else a validate or test) of ``trainer``, as the one-line refusal of the
    machine: a write it refused (a full disk, a folder) or memory it had not; else None."""
    return run_write_refusal(err, trainer) or memory_refusal(err, fit=fit)


def _raise_dropped_ctrl_c() -> None:
    """A Ctrl-C that Python dropped (raised in a finaliser or a weakref callback), raised again."""
    if _CTRL_C.is_set():
        raise KeyboardInterrupt


def stop_of(callbacks: list[Any]) -> Stop | PlayStop | None:
    """The stop that a :class:`StopNotice` among ``callbacks`` noted, if any."""
    return next((c.stop for c in callbacks if isinstance(c, StopNotice) and c.stop is not None), None)


def standing_of(callbacks: list[Any]) -> Standing | None:
    """Where the fit that a :class:`StopNotice` among ``callbacks`` saw end stands, if it noted one."""
    return next((c.standing for c in callbacks if isinstance(c, StopNotice) and c.standing is not None), None)
