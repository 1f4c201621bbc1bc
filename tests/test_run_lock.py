"""One fit per run: a fit notes itself in its folder (``fit.pid``) while it trains; a resume of a run that another
fit on this machine still trains is one line, exit 2, nothing written; a note of a process that ended (killed), of
another machine or of a reused PID is ignored."""

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
from td3_lightning.run_lock import LOCK_NAME, RunLock, training_holder

RUN = [
    "--config", "pendulum.yaml", "--trainer.max_steps", "40", "--trainer.val_check_interval", "20",
    "--data.warmup_steps", "50", "--data.buffer_size", "2000", "--data.eval_episodes", "1",
    "--model.hidden_dims", "[8]", "--data.batch_size", "8",
]


@pytest.fixture
def sleeper():
    """A live process of this machine that is not this one (it stands for a fit that is still training)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def _note(folder: Path, pid: int, resumed_from: Path | None = None, **changes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    note = {"pid": pid, "pid_start": run_lock._process_start(pid), "host": socket.gethostname(),
            "started": time.mktime((2026, 11, 29, 12, 41, 0, 0, 0, -1)),
            "resumed_from": str(resumed_from.resolve()) if resumed_from else None, **changes}
    (folder / LOCK_NAME).write_text(json.dumps(note))
    return folder / LOCK_NAME


def test_a_fit_notes_itself_while_it_trains_and_removes_the_note_at_its_end(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = []
    teardown = RunLock.teardown

    def look(self, trainer, pl_module, stage):
        note = Path(trainer.log_dir, LOCK_NAME)
        seen.append((stage, json.loads(note.read_text()) if note.exists() else None))
        teardown(self, trainer, pl_module, stage)

    monkeypatch.setattr(RunLock, "teardown", look)
    main(["fit", *RUN])
    ((stage, note),) = seen
    assert stage == "fit" and note["pid"] == os.getpid() and note["host"] == socket.gethostname()
    assert note["resumed_from"] is None and abs(note["started"] - time.time()) < 600
    assert not list(tmp_path.rglob(LOCK_NAME))  # removed when the fit ended
    seen.clear()
    main(["fit", *RUN, "--trainer.max_steps", "60", "--ckpt_path", "last"])  # a resume notes where it came from
    assert seen[0][1]["resumed_from"] == str((tmp_path / "lightning_logs/version_0").resolve())
    assert not list(tmp_path.rglob(LOCK_NAME))


def test_a_resume_of_a_run_that_another_fit_still_trains_is_one_line(tmp_path, monkeypatch, capsys, sleeper):
    monkeypatch.chdir(tmp_path)
    main(["fit", *RUN])
    capsys.readouterr()
    logs = tmp_path / "lightning_logs"
    last = (logs / "version_0/checkpoints/last.ckpt").resolve()
    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(time.mktime((2026, 11, 29, 12, 41, 0, 0, 0, -1))))
    for where, resumed in [("version_0", None), ("version_1", logs / "version_0")]:
        # the fit that trains version_0 itself, or one that resumed from it and has not written a checkpoint yet
        note = _note(logs / where, sleeper.pid, resumed)
        with pytest.raises(SystemExit) as exit_info:
            main(["fit", *RUN, "--trainer.max_steps", "60", "--ckpt_path", "last"])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.strip() == (
            f"error: {last} belongs to a run that process {sleeper.pid} is still training (into {logs / where}, since "
            f"{since}); a second fit would train that run twice: wait for it to end, or stop it (kill -TERM "
            f"{sleeper.pid}: it writes last.ckpt and prints the command that goes on), then resume")
        assert sorted(p.name for p in logs.iterdir()) == ["version_0", *(["version_1"] if resumed else [])]
        if resumed:  # nothing written beside the note
            assert [p.name for p in (logs / where).iterdir()] == [LOCK_NAME]
        note.unlink()
        if resumed:
            (logs / where).rmdir()  # made here for the note
    sleeper.kill()
    sleeper.wait()
    _note(logs / "version_0", sleeper.pid)  # left by a fit that was killed: its process has ended
    main(["fit", *RUN, "--trainer.max_steps", "60", "--ckpt_path", "last"])
    assert torch.load(logs / "version_1/checkpoints/last.ckpt", weights_only=False)["global_step"] == 60


def test_a_note_of_another_machine_a_reused_pid_or_another_run_is_ignored(tmp_path, sleeper):
    run = tmp_path / "lightning_logs/version_0"
    (run / "checkpoints").mkdir(parents=True)
    ckpt = run / "checkpoints/last.ckpt"
    _note(run, sleeper.pid)
    assert training_holder(ckpt).pid == sleeper.pid  # the control: this note holds the run
    assert training_holder(run / "checkpoints/epoch=0-step=5.ckpt").folder == run  # any checkpoint of that run
    _note(run, sleeper.pid, host="another-machine")
    assert training_holder(ckpt) is None
    _note(run, sleeper.pid, pid_start="1")  # the PID now names a process that started later than the fit
    assert training_holder(ckpt) is None
    _note(run, os.getpid())  # this process (a fit in this process that raised before removing its note)
    assert training_holder(ckpt) is None
    (run / LOCK_NAME).unlink()
    _note(tmp_path / "lightning_logs/version_1", sleeper.pid, resumed_from=tmp_path / "lightning_logs/version_2")
    assert training_holder(ckpt) is None  # a fit of another run in the same folder
