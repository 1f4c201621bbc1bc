"""One fit per run: a fit notes itself in this machine's register while it trains; a resume of a checkpoint that
another live fit writes or resumed from is one line, exit 2, nothing written; so is a fit into a checkpoint folder
another live fit writes; a note of a process that ended (killed), of another machine, of a reused PID or of this
process is ignored."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from td3_lightning import run_lock
from td3_lightning.cli import main
from td3_lightning.run_lock import RunLock, register, training_note

RUN = [
    "--config", "pendulum.yaml", "--trainer.max_steps", "40", "--trainer.val_check_interval", "20",
    "--data.warmup_steps", "50", "--data.buffer_size", "2000", "--data.eval_episodes", "1",
    "--model.hidden_dims", "[8]", "--data.batch_size", "8",
]
SINCE = time.mktime((2026, 11, 29, 12, 41, 0, 0, 0, -1))


@pytest.fixture
def fits(tmp_path, monkeypatch) -> Path:
    """A register of its own for the test."""
    folder = tmp_path / "fits"
    monkeypatch.setenv(run_lock.REGISTER_ENV, str(folder))
    return folder


@pytest.fixture
def sleeper():
    """A live process of this machine that is not this one (it stands for a fit that is still training)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def _note(pid: int, log_dir: Path, checkpoint_dirs: list[Path], resumed_dir: Path | None = None, **changes) -> Path:
    stat = run_lock._process_stat(pid)
    note = {"pid": pid, "pid_start": stat[1] if stat else None, "host": socket.gethostname(), "started": SINCE,
            "log_dir": str(log_dir.resolve()), "checkpoint_dirs": [str(d.resolve()) for d in checkpoint_dirs],
            "resumed_dir": str(resumed_dir.resolve()) if resumed_dir else None, **changes}
    register().mkdir(parents=True, exist_ok=True)
    path = register() / f"{socket.gethostname()}-{pid}.json"
    path.write_text(json.dumps(note))
    return path


def _refused(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    return err


def test_a_fit_notes_itself_while_it_trains_and_removes_the_note_at_its_end(tmp_path, monkeypatch, fits):
    monkeypatch.chdir(tmp_path)
    seen = []
    teardown = RunLock.teardown

    def look(self, trainer, pl_module, stage):
        seen.append([json.loads(p.read_text()) for p in fits.glob("*.json")])
        teardown(self, trainer, pl_module, stage)

    monkeypatch.setattr(RunLock, "teardown", look)
    main(["fit", *RUN])
    run = (tmp_path / "lightning_logs/version_0").resolve()
    ((note,),) = seen
    assert note["pid"] == os.getpid() and note["host"] == socket.gethostname()
    assert abs(note["started"] - time.time()) < 600
    assert note["log_dir"] == str(run) and note["checkpoint_dirs"] == [str(run / "checkpoints")]
    assert note["resumed_dir"] is None
    assert list(fits.glob("*.json")) == []  # removed when the fit ended
    seen.clear()
    main(["fit", *RUN, "--trainer.max_steps", "60", "--ckpt_path", "last"])  # a resume notes where it came from
    assert seen[0][0]["resumed_dir"] == str(run / "checkpoints")
    assert list(fits.glob("*.json")) == []


def test_a_resume_of_a_run_that_another_fit_still_trains_is_one_line(tmp_path, monkeypatch, capsys, fits, sleeper):
    monkeypatch.chdir(tmp_path)
    main(["fit", *RUN])
    capsys.readouterr()
    logs = tmp_path / "lightning_logs"
    last = logs / "version_0/checkpoints/last.ckpt"
    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(SINCE))
    for log_dir, resumed in [("version_0", None), ("version_1", logs / "version_0/checkpoints")]:
        # the fit that trains version_0 itself, or one that resumed from it and has not written a checkpoint yet
        note = _note(sleeper.pid, logs / log_dir, [logs / log_dir / "checkpoints"], resumed)
        assert _refused(["fit", *RUN, "--trainer.max_steps", "60", "--ckpt_path", "last"], capsys) == (
            f"error: {last.resolve()} belongs to a run that process {sleeper.pid} is still training (into "
            f"{(logs / log_dir).resolve()}, since {since}); a second fit would train that run twice: wait for it to "
            f"end, or stop it (kill -TERM {sleeper.pid}: it writes last.ckpt and prints the command that goes on), "
            f"then resume (if process {sleeper.pid} is not a td3_lightning fit, delete {note})")
        assert [p.name for p in logs.iterdir()] == ["version_0"]  # nothing written
        note.unlink()
    sleeper.kill()
    sleeper.wait()
    note = _note(sleeper.pid, logs / "version_0", [logs / "version_0/checkpoints"])  # a killed fit's: it has ended
    main(["fit", *RUN, "--trainer.max_steps", "60", "--ckpt_path", "last"])
    assert torch.load(logs / "version_1/checkpoints/last.ckpt", weights_only=False)["global_step"] == 60
    assert not note.exists()  # cleared


def test_a_fit_into_the_checkpoint_folder_of_a_fit_that_trains_is_one_line(tmp_path, monkeypatch, capsys, fits,
                                                                            sleeper):
    """Two fits with one --checkpoint.dirpath would write each other's last.ckpt: the second is refused when it
    starts, and leaves no note."""
    monkeypatch.chdir(tmp_path)
    shared = tmp_path / "ckpts"
    note = _note(sleeper.pid, tmp_path / "elsewhere", [shared])
    err = _refused(["fit", *RUN, "--checkpoint.dirpath", str(shared)], capsys)
    assert err == (
        f"error: {shared.resolve()} is the checkpoint folder of a run that process {sleeper.pid} is still training "
        f"(into {(tmp_path / 'elsewhere').resolve()}, since 2026-11-29 12:41); a second fit there would write over its "
        f"checkpoints: give this fit a --checkpoint.dirpath of its own, or wait for that fit to end (if process "
        f"{sleeper.pid} is not a td3_lightning fit, delete {note})")
    assert [p.name for p in fits.iterdir()] == [note.name]
    assert not shared.exists()


def test_a_resume_into_the_checkpoint_folder_of_a_fit_that_trains_names_that_folder(tmp_path, monkeypatch, capsys,
                                                                                     fits, sleeper):
    """A resume of a run nobody trains, into a checkpoint folder another live fit writes: the line names the shared
    folder (what the user must change), not the checkpoint resumed from."""
    monkeypatch.chdir(tmp_path)
    main(["fit", *RUN])
    last = tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt"
    shared = tmp_path / "ckpts"
    _note(sleeper.pid, tmp_path / "elsewhere", [shared])
    err = _refused(["fit", *RUN, "--trainer.max_steps", "60", "--ckpt_path", str(last),
                    "--checkpoint.dirpath", str(shared)], capsys)
    assert err.startswith(f"error: {shared.resolve()} is the checkpoint folder of a run that process {sleeper.pid} "
                          "is still training")
    assert not shared.exists()
    assert torch.load(last, weights_only=False)["global_step"] == 40  # the run resumed from is untouched


def test_a_note_of_another_machine_a_reused_pid_this_process_or_another_run_is_ignored(tmp_path, fits, sleeper):
    checkpoints = tmp_path / "lightning_logs/version_0/checkpoints"
    checkpoints.mkdir(parents=True)
    ckpt = checkpoints / "last.ckpt"
    _note(sleeper.pid, checkpoints.parent, [checkpoints])
    assert training_note(ckpt).pid == sleeper.pid  # the control: this note holds the run
    assert training_note(checkpoints / "best-step20.ckpt").pid == sleeper.pid  # any checkpoint of that run
    _note(sleeper.pid, checkpoints.parent, [checkpoints], host="another-machine")
    assert training_note(ckpt) is None
    _note(sleeper.pid, checkpoints.parent, [checkpoints], pid_start="1")  # the PID names a later process now
    assert training_note(ckpt) is None
    _note(sleeper.pid, checkpoints.parent, [checkpoints], started="noon")  # malformed
    assert training_note(ckpt) is None
    _note(os.getpid(), checkpoints.parent, [checkpoints])  # this process's (a fit here that raised before its end)
    assert training_note(ckpt) is None
    _note(sleeper.pid, tmp_path / "lightning_logs/version_1", [tmp_path / "lightning_logs/version_1/checkpoints"],
          resumed_dir=tmp_path / "lightning_logs/version_2/checkpoints")
    assert training_note(ckpt) is None  # a fit of another run
