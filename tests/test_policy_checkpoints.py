"""TD7's policy checkpoints (``model.policy_checkpoints``): which policy an assessment keeps (hand-computed),
training in whole episodes then catching up, the checkpoint in validation, export and resume, and the refusals."""

from __future__ import annotations

import subprocess
import sys

import lightning as L
import pytest
import torch
from conftest import quiet_trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from td3_lightning import TD3, EnvLoop, ReplayDataModule
from td3_lightning.errors import UserInputError
from td3_lightning.export import export_onnx, export_torchscript
from td3_lightning.extensions.policy_checkpoints import LATE_BAR, PolicyCheckpoint, check_policy_checkpoint_options

ENV = "td3test/ActionReward-v0"  # reward = action: returns differ from episode to episode


def _actor(value: float) -> torch.nn.Linear:
    actor = torch.nn.Linear(1, 1)
    torch.nn.init.constant_(actor.weight, value)
    return actor


def test_an_assessment_keeps_the_policy_whose_worst_episode_is_best():
    checkpoint = PolicyCheckpoint(_actor(0.0), episodes=3, after=10)
    kept = lambda: checkpoint.actor.weight.item()  # noqa: E731

    checkpoint.episode_end(5.0, _actor(1.0), step=0)  # the first assessment always beats -inf
    assert (kept(), checkpoint.best.item(), checkpoint.assessing) == (1.0, 5.0, False)
    checkpoint.episode_end(3.0, _actor(2.0), step=2)  # below 5: no checkpoint
    assert (kept(), checkpoint.best.item()) == (1.0, 5.0)
    checkpoint.episode_end(7.0, _actor(3.0), step=4)
    assert (kept(), checkpoint.best.item(), int(checkpoint.taken)) == (3.0, 7.0, 2)

    # from step 10: three episodes per assessment, and the bar drops once to 0.9 of the best
    checkpoint.episode_end(8.0, _actor(4.0), step=10)
    assert checkpoint.best.item() == pytest.approx(7.0 * LATE_BAR) and checkpoint.assessing and kept() == 3.0
    checkpoint.episode_end(6.0, _actor(4.0), step=10)  # 6 < 6.3: the assessment ends at once, no checkpoint
    assert not checkpoint.assessing and kept() == 3.0
    for episode_return in (9.0, 10.0):
        checkpoint.episode_end(episode_return, _actor(5.0), step=20)
        assert checkpoint.assessing and kept() == 3.0
    checkpoint.episode_end(8.0, _actor(5.0), step=20)  # worst of 9, 10, 8 is 8 >= 6.3
    assert (kept(), checkpoint.best.item(), checkpoint.assessing, int(checkpoint.taken)) == (5.0, 8.0, False, 3)
    assert checkpoint.best.item() == 8.0  # the bar dropped once only


class RecordCollection(Callback):
    """(training steps taken, transitions collected after the warm-up) before every training step."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        loop = next(c for c in trainer.callbacks if isinstance(c, EnvLoop))
        self.seen.append((trainer.global_step, loop.train_transitions))


def _fit(root, max_steps: int, ckpt_path=None, every: int | None = None, steps_per_batch: int = 1, **model_kw):
    L.seed_everything(7)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=16, buffer_size=500, eval_episodes=1,
                          steps_per_batch=steps_per_batch)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], actor_lr=1e-3, critic_lr=1e-3,
                policy_checkpoints=True, exploration_noise=0.5, **model_kw)
    loop, record = EnvLoop(), RecordCollection()
    callbacks: list[Callback] = [loop, record]
    if every is not None:
        callbacks.append(ModelCheckpoint(dirpath=root, every_n_train_steps=every, save_top_k=-1, filename="s{step}",
                                         auto_insert_metric_name=False))
    trainer = quiet_trainer(max_steps=max_steps, callbacks=callbacks, enable_checkpointing=every is not None)
    trainer.fit(model, dm, ckpt_path=ckpt_path)
    return trainer, model, dm, loop, record


def test_training_waits_for_whole_episodes_then_runs_the_updates_they_owe(tmp_path):
    trainer, model, _, loop, record = _fit(tmp_path, 100)
    # 20-step episodes: before training step k, every episode up to the one that covers step k is collected
    assert record.seen == [(k, 20 * (k // 20 + 1)) for k in range(100)]
    assert model.num_critic_updates == 100 and loop.episodes == 6  # the warm-up's episode and 5 assessed
    assert 1 <= int(model.policy_checkpoint.taken) <= 5
    assert model.policy_checkpoint.best.item() >= -20.0


def test_validation_test_and_export_run_the_checkpoint_not_the_actor(tmp_path):
    trainer, model, dm, _, _ = _fit(tmp_path, 100, every=100)
    obs = torch.rand(5, 2) * 2 - 1
    with torch.no_grad():
        kept, latest = model.policy_checkpoint.actor(obs), model.actor(obs)
    assert (kept - latest).abs().max() > 1e-3  # the actor trained on after the checkpoint was taken
    assert model.policy is model.policy_checkpoint.actor
    act = dm.policy()  # what validation and test step the eval env with
    acted = torch.stack([torch.as_tensor(act(o.numpy())) for o in obs])
    assert torch.allclose(acted, kept, atol=1e-6)
    scripted = torch.jit.load(str(export_torchscript(tmp_path / "s100.ckpt", tmp_path / "actor.pt")))
    assert torch.allclose(scripted(obs), kept, atol=1e-6)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(export_onnx(tmp_path / "s100.ckpt", tmp_path / "actor.onnx")),
                                   providers=["CPUExecutionProvider"])
    (action,) = session.run(None, {"observation": obs.numpy()})
    assert torch.allclose(torch.from_numpy(action), kept, atol=1e-5)


def test_a_resume_between_assessments_continues_exactly(tmp_path):
    # at step 50 the assessment of steps 40-59 is collected (60 transitions after the warm-up), 10 updates owed
    _, model_a, dm_a, loop_a, _ = _fit(tmp_path / "a", 100)
    _fit(tmp_path / "b", 50, every=50)
    _, model_b, dm_b, loop_b, record_b = _fit(tmp_path / "b2", 100, ckpt_path=tmp_path / "b" / "s50.ckpt")
    assert record_b.seen[0] == (50, 60)  # nothing was collected again on resuming
    assert (loop_a.env_steps, loop_a.episodes) == (loop_b.env_steps, loop_b.episodes)
    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert any(k.startswith("policy_checkpoint.actor.") for k in state_a)
    for name, tensor in state_a.items():
        assert torch.equal(tensor, state_b[name]), name
    assert torch.equal(dm_a.buffer.reward, dm_b.buffer.reward)


def test_chunks_of_training_steps_train_the_same(tmp_path):
    _, one, _, _, _ = _fit(tmp_path / "a", 100)
    _, chunked, _, _, _ = _fit(tmp_path / "b", 100, steps_per_batch=8)
    for name, tensor in one.state_dict().items():
        assert torch.equal(tensor, chunked.state_dict()[name]), name


def test_from_checkpoint_after_an_assessment_drives_several_episodes(tmp_path):
    _, model, _, _, record = _fit(tmp_path, 120, checkpoint_after=40, checkpoint_episodes=3)
    assert record.seen[:40] == [(k, 20 * (k // 20 + 1)) for k in range(40)]  # one episode each up to step 40
    collected = sorted({t for _, t in record.seen})
    assert all(t % 20 == 0 for t in collected) and all(t > k for k, t in record.seen)
    steps = [b - a for a, b in zip(collected, collected[1:])]
    assert max(steps) > 20  # an assessment of more than one episode (3, or fewer where one fell below the bar)
    assert bool(model.policy_checkpoint.late)


def test_a_fresh_checkpoint_passes_the_finite_check_and_a_reset_keeps_it(tmp_path):
    _, model, _, _, _ = _fit(tmp_path, 40)
    model.check_finite()  # the starting bar is finite: validation before the first checkpoint runs
    fresh = TD3([2], [-1.0], [1.0], hidden_dims=[8], policy_checkpoints=True)
    fresh.check_finite()
    kept = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("policy_checkpoint.")}
    _, reset, _, _, _ = _fit(tmp_path / "reset", 40, reset_steps=[30])  # the same run, reset after step 30
    for name, tensor in kept.items():
        assert torch.equal(tensor, reset.state_dict()[name]), name  # the copy and its bar survive the reset
    assert not torch.equal(model.actor.net[0].weight, reset.actor.net[0].weight)  # the actor was redrawn


def test_off_the_policy_is_the_actor_and_nothing_more_is_saved():
    model = TD3([2], [-1.0], [1.0], hidden_dims=[8])
    assert model.policy is model.actor and model.policy_checkpoint is None
    assert not any(k.startswith("policy_checkpoint") for k in model.state_dict())


@pytest.mark.parametrize(("data", "devices", "message"), [
    ({"num_envs": 4}, 1, r"^model.policy_checkpoints assesses the episodes of one env \(data.num_envs 4\): set "
                         r"data.num_envs 1, or model.policy_checkpoints false$"),
    ({}, 2, r"^model.policy_checkpoints assesses the episodes of one process \(2 devices or nodes\): set "
            r"trainer.devices 1, or model.policy_checkpoints false$"),
])
def test_several_envs_or_processes_are_refused(data, devices, message):
    with pytest.raises(UserInputError, match=message):
        check_policy_checkpoint_options({"policy_checkpoints": True}, data, devices)
    check_policy_checkpoint_options({"policy_checkpoints": False}, data, devices)  # off: nothing to refuse
    resumed = message.replace(r", or model.policy_checkpoints false$", r", as its checkpoint was trained$")
    with pytest.raises(UserInputError, match=resumed):  # a resumed run keeps its model options: one fix is left
        check_policy_checkpoint_options({"policy_checkpoints": True}, data, devices, resumed=True)


def test_the_env_loop_refuses_several_envs_from_python():
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=100, num_envs=2)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8], policy_checkpoints=True)
    with pytest.raises(UserInputError, match=r"^model.policy_checkpoints assesses the episodes of one env"):
        quiet_trainer(max_steps=10, callbacks=[EnvLoop()]).fit(model, dm)


def test_the_command_line_refuses_several_envs_before_writing_anything(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "td3_lightning", "fit", "--config", "pendulum.yaml", "--model.policy_checkpoints",
         "true", "--data.num_envs", "2", "--trainer.default_root_dir", str(tmp_path / "run")],
        capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        "error: model.policy_checkpoints assesses the episodes of one env (data.num_envs 2): set data.num_envs 1, "
        "or model.policy_checkpoints false")
    assert list(tmp_path.iterdir()) == []
