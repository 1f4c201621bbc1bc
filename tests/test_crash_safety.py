"""Crash safety: atomic checkpoint writes (also under SIGKILL), and the non-finite guard."""

from __future__ import annotations

import json
import os
import re
import shlex
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from conftest import quiet_trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import AsyncCheckpointIO, TorchCheckpointIO

import td3_lightning.checkpointing as checkpointing
import td3_lightning.stepping as stepping
from td3_lightning import TD3, EnvLoop, ReplayDataModule
from td3_lightning.checkpointing import AtomicCheckpointIO, with_atomic_checkpoint_io
from td3_lightning.cli import TD3CLI, TRAINER_DEFAULTS, main
from td3_lightning.user_input import CONFIG_DIR
from td3_lightning.module import NonFiniteError
from td3_lightning.run_lock import register

ENV = "td3test/ConstantReward-v0"


def small(dm: ReplayDataModule, **kw) -> TD3:
    return TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], **kw)


# ---------------------------------------------------------------------------- atomic writes
def test_interrupted_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    target = tmp_path / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.arange(1000)}, target)
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask())  # not mkstemp's 0o600
    real_save = torch.save

    def save_half_then_crash(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        f.truncate(f.tell() // 2)  # a half-written file on disk ...
        f.flush()
        raise OSError(28, "No space left on device")  # ... and the write fails

    monkeypatch.setattr(checkpointing.torch, "save", save_half_then_crash)
    with pytest.raises(OSError, match="No space left"):
        io.save_checkpoint({"step": 2, "w": torch.arange(1000)}, target)
    monkeypatch.undo()

    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no stray temporary file
    previous = torch.load(target, weights_only=True)
    assert previous["step"] == 1 and torch.equal(previous["w"], torch.arange(1000))

    io.save_checkpoint({"step": 3}, target)  # and the next write replaces it
    assert torch.load(target, weights_only=True)["step"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_temporary_file_is_not_a_checkpoint_name(tmp_path, monkeypatch):
    """A process killed mid-write leaves its temporary file behind: hidden, not ``*.ckpt``."""
    seen: list[str] = []
    real_save = torch.save

    def spy(obj, f, *args, **kwargs):
        seen.extend(os.listdir(tmp_path / "sub"))  # what a kill at this moment would leave
        real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpointing.torch, "save", spy)
    AtomicCheckpointIO().save_checkpoint({"x": 1}, tmp_path / "sub" / "best-step10.ckpt")
    (name,) = seen
    assert name.startswith(".best-step10.ckpt.") and name.endswith(".tmp")
    assert list((tmp_path / "sub").glob("*.ckpt")) == [tmp_path / "sub" / "best-step10.ckpt"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_plugins_merge_keeps_the_users_checkpoint_io():
    (io,) = with_atomic_checkpoint_io(None)
    assert isinstance(io, AtomicCheckpointIO)
    assert [type(p) for p in with_atomic_checkpoint_io("bf16-mixed")] == [str, AtomicCheckpointIO]
    mine = TorchCheckpointIO()
    assert with_atomic_checkpoint_io([mine]) == [mine]
    wrapper = AsyncCheckpointIO()
    assert with_atomic_checkpoint_io([wrapper]) == [wrapper]
    assert isinstance(wrapper.checkpoint_io, AtomicCheckpointIO)  # the async writes are atomic too


def _cli_trainer(args: list[str]) -> L.Trainer:
    cli = TD3CLI(
        TD3, ReplayDataModule, args=["--config", str(CONFIG_DIR / "pendulum.yaml"), *args], run=False,
        trainer_defaults=TRAINER_DEFAULTS, auto_configure_optimizers=False, parser_kwargs={"exit_on_error": False},
    )
    return cli.trainer


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_cli_writes_checkpoints_atomically_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert isinstance(_cli_trainer([]).strategy.checkpoint_io, AtomicCheckpointIO)
    user = _cli_trainer(["--trainer.plugins", "lightning.pytorch.plugins.io.TorchCheckpointIO"])
    assert type(user.strategy.checkpoint_io) is TorchCheckpointIO


# ---------------------------------------------------------------------------- SIGKILL at random moments
WARMUP, MAX_STEPS = 60_000, 1200
KILL_ARGS = [
    "fit", "--config", "pendulum.yaml", "--seed_everything", "0",
    "--model.hidden_dims", "[32, 32]", "--data.batch_size", "64",
    "--data.warmup_steps", str(WARMUP), "--data.buffer_size", str(WARMUP + MAX_STEPS),
    "--data.eval_episodes", "1", "--trainer.max_steps", str(MAX_STEPS), "--trainer.val_check_interval", "50",
    "--checkpoint.every_n_train_steps", "10", "--trainer.log_every_n_steps", "50",
    "--progress_bar.log_seconds", "1000",
]


def _checkpoints(root: Path) -> set[Path]:
    return set(root.glob("lightning_logs/*/checkpoints/*.ckpt"))


def _check_counters(ckpt: dict, steps: int | None = None) -> int:
    step = ckpt["global_step"]
    if steps is not None:
        assert step == steps
    meta = ckpt["td3_lightning"]
    assert meta["num_critic_updates"] == step and meta["num_actor_updates"] == step // 2
    replay = ckpt["ReplayDataModule"]["replay"]  # None in a best checkpoint: its run's last.ckpt holds it
    assert replay["size"] == WARMUP + step if replay is not None else ckpt["ReplayDataModule"]["replay_left_out"]
    assert ckpt["callbacks"]["EnvLoop"]["env_steps"] == WARMUP + step
    critic_state, actor_state = (s["state"] for s in ckpt["optimizer_states"])
    assert all(int(s["step"]) == step for s in critic_state.values())
    assert all(int(s["step"]) == step // 2 for s in actor_state.values())
    assert all(torch.isfinite(t).all() for t in ckpt["state_dict"].values() if t.is_floating_point())
    return step


def test_sigkill_at_random_moments_never_corrupts_checkpoints(tmp_path, cli_env):
    """Kill a real training with SIGKILL at seeded random moments (half of them while a
    checkpoint is being written), check every checkpoint file, resume with ``--ckpt_path last``;
    the final run reaches max_steps with consistent counters."""
    rng = random.Random(1234)
    env = {**cli_env, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    kills, mid_write, steps_seen = 0, 0, []
    resume: list[str] = []
    while kills < 4 or (mid_write == 0 and kills < 8):
        before = _checkpoints(tmp_path)
        log = open(tmp_path / f"round{kills}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "td3_lightning", *KILL_ARGS, *resume], cwd=tmp_path, env=env, stdout=log, stderr=log
        )
        try:
            deadline = time.monotonic() + 60
            while not any(p.name == "last.ckpt" for p in _checkpoints(tmp_path) - before):  # progress in this round
                assert proc.poll() is None, (tmp_path / f"round{kills}.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "no checkpoint within 60 s"
                time.sleep(0.01)
            folder = next(p.parent for p in _checkpoints(tmp_path) - before)
            time.sleep(rng.uniform(0.0, 0.4))
            if kills % 2 == 1:  # aim at a write (about 10 ms): kill 0-12 ms after a temporary file shows up
                deadline = time.monotonic() + 10
                while not any(n.endswith(".tmp") for n in os.listdir(folder)) and time.monotonic() < deadline:
                    time.sleep(0.0002)
                time.sleep(rng.uniform(0.0, 0.012))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()
        assert proc.returncode == -signal.SIGKILL, "the run ended before it was killed"
        kills += 1
        leftovers = [p for p in folder.iterdir() if p.name.endswith(".tmp")]
        mid_write += bool(leftovers)
        assert all(p.name.startswith(".") for p in leftovers)  # never mistaken for a checkpoint
        for path in _checkpoints(tmp_path):  # every checkpoint on disk is complete
            steps_seen.append(_check_counters(torch.load(path, weights_only=True, map_location="cpu")))
        resume = ["--ckpt_path", "last"]

    final = subprocess.run(
        [sys.executable, "-m", "td3_lightning", *KILL_ARGS, *resume], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120,
    )
    assert final.returncode == 0, final.stderr[-3000:]
    newest = max((p for p in _checkpoints(tmp_path) if p.name == "last.ckpt"), key=lambda p: p.stat().st_mtime_ns)
    _check_counters(torch.load(newest, weights_only=True), steps=MAX_STEPS)
    assert torch.load(newest, weights_only=True)["ReplayDataModule"]["replay"] is not None  # last.ckpt resumes
    assert mid_write >= 1, "no kill landed during a checkpoint write"
    assert 0 < max(steps_seen) < MAX_STEPS


# ---------------------------------------------------------------------------- the non-finite guard
TINY = [
    "--config", "pendulum.yaml", "--trainer.max_steps", "100", "--trainer.val_check_interval", "20",
    "--data.warmup_steps", "50", "--data.eval_episodes", "1", "--model.hidden_dims", "[16, 16]",
    "--data.batch_size", "16",
]


def _fit_cli_error(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *TINY, *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: "), err
    return err


def _last_good_checkpoint(root: Path) -> dict:
    (last,) = root.glob("lightning_logs/version_0/checkpoints/last.ckpt")
    ckpt = torch.load(last, weights_only=True)
    assert all(torch.isfinite(t).all() for t in ckpt["state_dict"].values() if t.is_floating_point())
    return ckpt


def test_nan_reward_from_the_env_stops_training(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _fit_cli_error(["--data.env_id", "td3test/NonFinite-v0", "--data.env_kwargs", "{bad_at: 95}"], capsys)
    assert err == (
        "error: non-finite reward (nan) from the environment td3test/NonFinite-v0 at env step 95 (training step 45)"
    )
    assert _last_good_checkpoint(tmp_path)["global_step"] == 40  # the checkpoint before it stays


def test_infinite_observation_during_warmup_stops_before_the_buffer(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _fit_cli_error(
        ["--data.env_id", "td3test/NonFinite-v0", "--data.env_kwargs", "{bad_at: 30, field: obs, value: .inf}"], capsys
    )
    assert err == (
        "error: non-finite observation (inf at index 1) from the environment td3test/NonFinite-v0 "
        "at env step 30 (warm-up)"
    )


def test_nan_reset_observation_stops_before_the_env_is_stepped(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _fit_cli_error(
        ["--data.env_id", "td3test/NonFinite-v0", "--data.env_kwargs", "{bad_at: 4, field: reset}"], capsys
    )
    # 20-step episodes: the 4th reset starts env step 61
    assert err.startswith("error: non-finite reset observation (nan at index 0) from the environment "
                          "td3test/NonFinite-v0 at env step 61 "), err


def test_diverging_critic_stops_with_the_step(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _fit_cli_error(["--model.critic_lr", "1e30", "--model.actor_lr", "1e30"], capsys)
    assert err.startswith("error: non-finite critic loss (") and "at training step 2;" in err
    assert "model.critic_lr" in err
    assert not list(tmp_path.glob("lightning_logs/*/checkpoints/*.ckpt"))  # nothing written after step 1


@pytest.mark.parametrize(
    "every_step, log_every, found",
    [
        (True, 50, ";"),  # CPU: stops at once, before the NaN reaches the weights
        (False, 50, "; stopped at env step 57 (training step 37)"),  # when the poisoned actor acts
        (False, 5, ";"),  # at the next log step (global_step 35, during step 36)
    ],
    ids=["checked-every-step", "deferred-found-before-acting", "deferred-found-at-log-step"],
)
def test_nan_loss_never_reaches_a_checkpoint(every_step, log_every, found, tmp_path, monkeypatch):
    """The critic loss turns NaN at step 35; checkpoints every 10 steps. Checked every step
    (CPU), training stops at step 35; deferred (accelerators), it stops at the next log step
    or before the env is stepped with a non-finite action, and no checkpoint is written in
    between. Either way last.ckpt stays the good one of step 30."""
    monkeypatch.setattr(stepping, "checks_each_loss", lambda device: every_step)
    real_loss = TD3.critic_loss

    def poisoned(self, batch, noise=None, terms=None):
        loss, q, priority = real_loss(self, batch, noise, terms)
        return (loss * float("nan") if self.global_step + 1 == 35 else loss), q, priority

    monkeypatch.setattr(TD3, "critic_loss", poisoned)
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=500)
    ckpt = ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=10, save_last=True, filename="s{step}", save_top_k=-1,
        auto_insert_metric_name=False,
    )
    trainer = quiet_trainer(
        max_steps=100, callbacks=[EnvLoop(), ckpt], enable_checkpointing=True, plugins=[AtomicCheckpointIO()],
        log_every_n_steps=log_every,
    )
    with pytest.raises(NonFiniteError) as info:
        trainer.fit(small(dm), dm)
    message = str(info.value)
    assert message.startswith("non-finite critic loss (nan) at training step 35" + found), message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt", "s10.ckpt", "s20.ckpt", "s30.ckpt"]
    last = torch.load(tmp_path / "last.ckpt", weights_only=True)
    assert last["global_step"] == 30
    assert all(torch.isfinite(t).all() for t in last["state_dict"].values() if t.is_floating_point())


def test_checkpoint_with_non_finite_weights_is_refused(tmp_path):
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=500)
    model = small(dm)
    trainer = quiet_trainer(max_steps=5, callbacks=[EnvLoop()], plugins=[AtomicCheckpointIO()])
    trainer.fit(model, dm)
    trainer.save_checkpoint(tmp_path / "good.ckpt")
    with torch.no_grad():
        model.critic_target.weights[0][0, 0, 0] = float("inf")
    with pytest.raises(NonFiniteError, match=r"non-finite weights in critic_target\.weights\.0 at training step 5; "
                                             r"the checkpoint at step 5 was not written"):
        trainer.save_checkpoint(tmp_path / "good.ckpt")
    kept = torch.load(tmp_path / "good.ckpt", weights_only=True)["state_dict"]["critic_target.weights.0"]
    assert torch.isfinite(kept).all()



@pytest.mark.parametrize("stage, sig, code", [("test", signal.SIGINT, 130), ("test", signal.SIGTERM, 143),
                                              ("validate", signal.SIGTERM, 143)])
def test_a_stopped_test_says_it_wrote_no_results_and_exits_with_the_signals_status(stage, sig, code, tmp_path, cli_env,
                                                                                    monkeypatch):
    """A test (or validate) stopped mid-way: one line, no results file, the signal's exit status (Lightning's own: 1
    and 0)."""
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "pendulum.yaml", "--trainer.max_steps", "20", "--trainer.val_check_interval", "20",
          "--data.warmup_steps", "50", "--model.hidden_dims", "[8]", "--data.eval_episodes", "1"])
    episodes = "--data.test_episodes" if stage == "test" else "--data.eval_episodes"
    proc = subprocess.Popen([sys.executable, "-m", "td3_lightning", stage, "--config", "pendulum.yaml",
                             episodes, "100000", "--ckpt_path", "last"], cwd=tmp_path, env=cli_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_signals_as_at_a_terminal)
    played = tmp_path / "lightning_logs/version_1"
    deadline = time.monotonic() + 120
    while not (played / "config.yaml").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(2.0)  # into its episodes
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    unwritten = ", before its results were written" if stage == "test" else ""
    assert proc.returncode == code and err.strip().splitlines()[-1] == (
        f"stopped by {sig.name} during {stage}{unwritten}: run the same command again"), (proc.returncode, err[-2000:])
    assert not (played / "test_results.json").exists()


def test_a_ctrl_c_that_python_drops_still_stops_the_fit_at_the_next_batch(tmp_path, monkeypatch, capsys):
    """A Ctrl-C raised in a finaliser or a weakref callback (as encoding a GIF runs many) is dropped by Python; the
    fit stops on it at the end of the batch all the same (before: it trained on, and the next Ctrl-C was needed)."""
    real_step, pressed = TD3.training_step, []

    def dropped_ctrl_c_at_step_60(self, *args, **kwargs):
        if self.trainer.global_step >= 60 and not pressed:
            pressed.append(self.trainer.global_step)
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1.0)  # the handler runs here
            except KeyboardInterrupt:
                pass  # what Python does with it in a weakref callback
        return real_step(self, *args, **kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(TD3, "training_step", dropped_ctrl_c_at_step_60)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", "--trainer.max_steps", "200", "--trainer.val_check_interval", "40",
              "--data.warmup_steps", "50", "--model.hidden_dims", "[8]", "--data.eval_episodes", "1"])
    assert exit_info.value.code == 130
    assert pressed == [64] and capsys.readouterr().err.strip().splitlines()[-1].startswith(
        "stopped by SIGINT at training step 72 of 200; ")  # the end of the batch of steps 64-71 (8 a batch)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the command's own handler is gone


# ---------------------------------------------------------------------------- resume without the replay buffer
def test_resume_without_saved_replay_refills_with_the_warmup(tmp_path):
    """data.save_replay false: the checkpoint has no buffer; on resume a warning says so and
    EnvLoop refills the buffer with the warm-up before the first training step."""
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=30, batch_size=8, buffer_size=500, save_replay=False)
    trainer = quiet_trainer(max_steps=40, callbacks=[EnvLoop()], plugins=[AtomicCheckpointIO()])
    trainer.fit(small(dm), dm)
    trainer.save_checkpoint(tmp_path / "no_replay.ckpt")
    ckpt = torch.load(tmp_path / "no_replay.ckpt", weights_only=True)
    assert ckpt["ReplayDataModule"]["replay"] is None and ckpt["callbacks"]["EnvLoop"]["env_steps"] == 70

    dm2 = ReplayDataModule(ENV, warmup_steps=30, batch_size=8, buffer_size=500, save_replay=False)
    loop = EnvLoop()
    trainer2 = quiet_trainer(max_steps=60, callbacks=[loop])
    with pytest.warns(UserWarning) as record:
        trainer2.fit(small(dm2), dm2, ckpt_path=tmp_path / "no_replay.ckpt")
    messages = [str(w.message) for w in record]
    assert (
        "the checkpoint has no replay buffer (data.save_replay was off): the buffer is refilled from scratch with "
        "30 warm-up steps"
    ) in messages, messages
    assert trainer2.global_step == 60
    assert len(dm2.buffer) == 30 + 20  # the refill, then one transition per training step
    assert loop.env_steps == 70 + 30 + 20  # env steps keep counting, the refill included


def _signals_as_at_a_terminal() -> None:
    """Ctrl-C's default handling in the fit's process: a suite started in the background without job control (`cmd &`
    in a script) hands its children SIGINT ignored, and Python then installs no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stopped_fit_says_where_it_stands_and_the_command_that_goes_on(sig, code, tmp_path, cli_env):
    """Ctrl-C (SIGINT) or a scheduler's SIGTERM mid-run: the learning curve is written, one line names the step
    reached, last.ckpt and its step and the command that goes on; the exit status is the signal's (never 0)."""
    args = ["fit", "--config", "pendulum.yaml", "--trainer.val_check_interval", "100", "--data.warmup_steps", "100",
            "--model.hidden_dims", "[16]", "--data.eval_episodes", "1", "--progress_bar.log_seconds", "0"]
    proc = subprocess.Popen([sys.executable, "-m", "td3_lightning", *args], cwd=tmp_path, env=cli_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_signals_as_at_a_terminal)
    last = tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt"
    deadline = time.monotonic() + 120
    while not last.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    line = err.strip().splitlines()[-1]
    step, last_step = torch.load(last, weights_only=False)["global_step"], None
    found = re.fullmatch(rf"stopped by {sig.name} at training step (\d+) of 15000; {last} is at step (\d+); go on "
                         r"with: python -m td3_lightning (.*)", line)
    assert proc.returncode == code and found, (proc.returncode, err[-2000:])
    reached, last_step = int(found.group(1)), int(found.group(2))
    assert last_step == step and 100 <= step <= reached < 15000 and step % 100 == 0
    assert (tmp_path / "lightning_logs/version_0/learning_curve.png").stat().st_size > 1000
    notes = [json.loads(p.read_text())["pid"] for p in register().glob("*.json")]
    assert proc.pid not in notes  # the fit's note in the register of fits (run_lock.py) is gone with it
    go_on = shlex.split(found.group(3))
    assert go_on[-2:] == ["--ckpt_path", str(last)] and go_on[:-2] == [
        *args[:2], str(CONFIG_DIR / "pendulum.yaml"), *args[3:]]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:  # the command goes on from last.ckpt
        main([*go_on[:-2], "--trainer.max_steps", str(step + 50), *go_on[-2:]])
    finally:
        os.chdir(cwd)
    assert torch.load(tmp_path / "lightning_logs/version_1/checkpoints/last.ckpt",
                      weights_only=False)["global_step"] == step + 50
