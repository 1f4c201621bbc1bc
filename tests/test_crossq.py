"""CrossQ's recipe: ``model.batch_renorm`` (batch renormalisation in the actor and the critics) and
``model.target_networks false`` (the critics read s and s' in one batch), against hand-computed answers, a known
Q value and an exact resume."""

from __future__ import annotations

import copy
import functools

import lightning as L
import pytest
import torch
from conftest import fit_checkpointed, quiet_trainer, small_batch, straight_and_resumed

from td3_lightning import TD3, EnvLoop, ReplayDataModule
from td3_lightning.batch_renorm import D_MAX, EPS, MOMENTUM, R_MAX, WARMUP_STEPS, BatchRenorm, training_pass
from td3_lightning.module import smoothed_next_action

ENV = "td3test/ConstantReward-v0"


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1)) * 3 + 2


def test_a_training_pass_before_the_warm_up_ends_is_batch_normalisation_and_moves_the_running_statistics():
    norm = BatchRenorm(4)
    with torch.no_grad():
        norm.scale.copy_(torch.tensor([1.0, 2.0, 0.5, 1.0]))
        norm.offset.copy_(torch.tensor([0.0, 1.0, -1.0, 3.0]))
    x = _x(32, 4)
    with training_pass():
        y = norm(x)
    mean, var = x.mean(0), x.var(0, unbiased=False)
    torch.testing.assert_close(y, (x - mean) / torch.sqrt(var + EPS) * norm.scale + norm.offset)
    torch.testing.assert_close(norm.mean, MOMENTUM * mean)
    torch.testing.assert_close(norm.var, (1 - MOMENTUM) + MOMENTUM * var)
    assert norm.steps.item() == 1
    y.sum().backward()
    assert norm.scale.grad is not None and norm.offset.grad is not None


def test_after_the_warm_up_the_batch_statistics_are_corrected_towards_the_running_ones_within_bounds():
    norm = BatchRenorm(3)
    with torch.no_grad():
        norm.mean.copy_(torch.tensor([1.0, 2.0, -30.0]))
        norm.var.copy_(torch.tensor([4.0, 0.01, 1.0]))
        norm.steps.fill_(WARMUP_STEPS)
    x = _x(64, 3)
    mean, var = x.mean(0), x.var(0, unbiased=False)
    run_mean, run_std = norm.mean.clone(), torch.sqrt(norm.var + EPS)
    with training_pass():
        y = norm(x)
    r = (torch.sqrt(var + EPS) / run_std).clamp(1 / R_MAX, R_MAX)
    d = ((mean - run_mean) / run_std).clamp(-D_MAX, D_MAX)
    assert r[1].item() == R_MAX and d[2].item() == D_MAX  # the bounds bite: std far above, mean far below
    assert 1 / R_MAX < r[0].item() < R_MAX and -D_MAX < d[0].item() < D_MAX
    torch.testing.assert_close(y, (x - mean) / torch.sqrt(var + EPS) * r + d)


def test_a_shorter_warm_up_starts_the_corrections_after_its_own_number_of_training_passes():
    norm = BatchRenorm(3, warmup=2)
    x = _x(64, 3)
    mean, std = x.mean(0), torch.sqrt(x.var(0, unbiased=False) + EPS)
    with training_pass():
        for _ in range(2):  # plain batch normalisation: the batch's own statistics
            torch.testing.assert_close(norm(x), (x - mean) / std)
        run_mean, run_std = norm.mean.clone(), torch.sqrt(norm.var + EPS)
        y = norm(x)  # the third: corrected towards the running statistics, as past CrossQ's 100,000
    r = (std / run_std).clamp(1 / R_MAX, R_MAX)
    d = ((mean - run_mean) / run_std).clamp(-D_MAX, D_MAX)
    assert (d.abs() > 0.5).all()  # two passes at momentum 0.01 leave the running mean far from the batch's
    torch.testing.assert_close(y, (x - mean) / std * r + d)
    assert norm.steps.item() == 3


def test_the_modules_warm_up_reaches_every_layer_of_the_networks_and_their_targets():
    m = _module(batch_renorm_warmup=7)
    nets = (m.actor, m.critic, m.actor_target, m.critic_target)
    assert [layer.warmup for net in nets for layer in net.modules() if isinstance(layer, BatchRenorm)] == [7] * 12
    assert {layer.warmup for layer in _module().critic.renorms} == {WARMUP_STEPS} == {100_000}  # CrossQ's


def test_acting_evaluating_and_the_critics_in_the_actors_loss_read_the_running_statistics():
    norm = BatchRenorm(2)
    with torch.no_grad():
        norm.mean.copy_(torch.tensor([1.0, -1.0]))
        norm.var.copy_(torch.tensor([4.0, 9.0]))
    x = _x(5, 2)
    expected = (x - norm.mean) / torch.sqrt(norm.var + EPS)
    torch.testing.assert_close(norm(x), expected)  # outside the update: a network called directly
    with training_pass():
        with torch.no_grad():  # acting, the target's next action
            torch.testing.assert_close(norm(x), expected)
        torch.testing.assert_close(norm.eval()(x), expected)  # validation, test, export
        norm.train()
        frozen = norm(x.requires_grad_(True), frozen=True)  # the critics in the actor's loss: dQ/da only
    torch.testing.assert_close(frozen, expected)
    frozen.sum().backward()
    assert x.grad is not None and norm.scale.grad is None
    assert norm.steps.item() == 0 and norm.mean.tolist() == [1.0, -1.0]  # nothing moved


def test_each_critic_of_an_ensemble_keeps_its_own_statistics():
    norm = BatchRenorm(3, (2,))
    x = torch.stack([_x(16, 3), _x(16, 3) * 10])
    with training_pass():
        norm(x)
    torch.testing.assert_close(norm.mean, MOMENTUM * x.mean(1, keepdim=True))
    assert norm.mean.shape == (2, 1, 3)
    with torch.no_grad():
        torch.testing.assert_close(norm(x[1], member=1), norm(x)[1])  # a member alone reads its own statistics


def _module(**kw) -> TD3:
    torch.manual_seed(0)
    return TD3([3], [-1.0], [1.0], hidden_dims=[16, 16], batch_renorm=True, **kw)


def test_the_networks_renormalise_their_input_and_every_hidden_layer():
    m = _module()
    renorms = [layer for layer in m.actor.net if isinstance(layer, BatchRenorm)]
    assert [r.scale.shape[-1] for r in renorms] == [3, 16, 16]
    assert [tuple(r.mean.shape) for r in m.critic.renorms] == [(2, 1, 4), (2, 1, 16), (2, 1, 16)]
    b = small_batch()
    with torch.no_grad():  # the first critic alone reads its own statistics, as the ensemble does
        torch.testing.assert_close(m.critic.q1(b["obs"], b["action"]), m.critic(b["obs"], b["action"])[0])


def test_without_target_networks_the_critics_read_s_and_s_prime_in_onesmall_batch():
    m = _module(target_networks=False)
    assert m.actor_target is None and m.critic_target is None
    assert not any("target" in k for k in m.state_dict())
    b, noise = small_batch(), torch.randn(6, 1, generator=torch.Generator().manual_seed(4))
    ref = copy.deepcopy(m)
    with training_pass():
        loss, q, _ = m.critic_loss(b, noise)
        with torch.no_grad():
            next_action = smoothed_next_action(ref.actor, b, noise, ref.hparams)  # the actor's running statistics
        both = ref.critic(torch.cat([b["obs"], b["next_obs"]]), torch.cat([b["action"], next_action]))
    q_ref, next_q = both[:, :6], both[:, 6:].min(0).values
    y = b["reward"] + 0.99 * (1 - b["terminated"].float()) * next_q
    torch.testing.assert_close(q, q_ref)
    torch.testing.assert_close(loss, (q_ref - y.detach()).pow(2).mean(1).sum())
    torch.testing.assert_close(m.critic.renorms[0].mean, ref.critic.renorms[0].mean)  # one pass over 12 rows
    assert m.critic.renorms[0].steps.item() == 1
    loss.backward()
    assert m.actor.net[1].weight.grad is None  # y holds no gradient: the actor is not trained by the critic loss


def test_batch_renorm_and_no_targets_learn_the_infinite_horizon_value():
    """Reward 1 forever, truncated every 5 steps: Q -> 1 / (1 - gamma) = 5 without any target network."""
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, env_kwargs={"horizon": 5}, warmup_steps=200, batch_size=64, buffer_size=5000)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[32, 32], gamma=0.8, critic_lr=3e-3,
                batch_renorm=True, target_networks=False)
    quiet_trainer(max_steps=1500, callbacks=[EnvLoop()]).fit(model, dm)
    obs, act = torch.rand(512, 2) * 2 - 1, torch.rand(512, 1) * 2 - 1
    with torch.no_grad():
        q = model.critic(obs, act)
    assert abs(q.mean().item() - 5.0) < 0.35, q.mean().item()


def _fit(path, max_steps: int, ckpt_path=None, every: int | None = None, warmup: int = WARMUP_STEPS):
    L.seed_everything(5)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=16, buffer_size=70)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], batch_renorm=True,
                target_networks=False, policy_freq=3, batch_renorm_warmup=warmup)
    fit_checkpointed(model, dm, max_steps, path, every, ckpt_path)
    return model


@pytest.mark.parametrize("warmup", [WARMUP_STEPS, 90])  # 90: the critics' corrections start after the resume at 60
def test_a_crossq_run_resumes_exactly(tmp_path, warmup):
    straight, resumed = straight_and_resumed(functools.partial(_fit, warmup=warmup), tmp_path)
    sa, sb = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert sa["critic.renorms.1.steps"].item() == 120  # the running statistics are in the checkpoint


@pytest.mark.parametrize("options", [{"batch_renorm": True}, {"target_networks": False}])
def test_each_half_of_the_recipe_runs_alone(options):
    m = TD3([3], [-1.0], [1.0], hidden_dims=[8], **options)
    loss, q, _ = m.critic_loss(small_batch(), torch.zeros(6, 1))
    assert q.shape == (2, 6) and torch.isfinite(loss)


def test_an_exported_actor_normalises_by_its_running_statistics_in_torchscript_and_onnx(tmp_path):
    from td3_lightning.export import export_torchscript

    L.seed_everything(0)
    dm = ReplayDataModule("Pendulum-v1", warmup_steps=100, batch_size=32, buffer_size=1000)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], batch_renorm=True,
                target_networks=False)
    trainer = quiet_trainer(max_steps=60)
    trainer.fit(model, dm)
    trainer.save_checkpoint(tmp_path / "run.ckpt")
    first = model.actor.net[0]
    assert first.steps.item() == 30 and first.var.min().item() < 0.99  # the actor's 30 updates moved its statistics
    scripted = torch.jit.load(str(export_torchscript(tmp_path / "run.ckpt", tmp_path / "actor.pt")))
    obs = torch.randn(8, 3) * 3
    loaded = TD3.load_from_checkpoint(tmp_path / "run.ckpt").actor
    expected = loaded(obs)  # called directly, in training mode and with gradients: still the running statistics
    torch.testing.assert_close(scripted(obs), expected)
    torch.testing.assert_close(scripted(obs[:1]), expected[:1])  # one observation as in a batch
    ort = pytest.importorskip("onnxruntime")
    from td3_lightning.export import export_onnx

    session = ort.InferenceSession(str(export_onnx(tmp_path / "run.ckpt", tmp_path / "actor.onnx")),
                                   providers=["CPUExecutionProvider"])
    for rows in (1, 8):  # one observation normalised by the running statistics, not by its own batch's
        (action,) = session.run(None, {"observation": obs[:rows].numpy()})
        torch.testing.assert_close(torch.from_numpy(action), expected[:rows].detach(), atol=1e-5, rtol=0)


def test_adam_beta1_sets_the_actors_and_the_critics_adam():
    m = TD3([3], [-1.0], [1.0], hidden_dims=[8], adam_beta1=0.5, embedding_dim=8, target_update_every=5)
    critic, actor, encoder = m.configure_optimizers()
    assert critic.param_groups[0]["betas"] == actor.param_groups[0]["betas"] == (0.5, 0.999)
    assert encoder.param_groups[0]["betas"] == (0.9, 0.999)  # SALE's encoder keeps Adam's default
    default = TD3([3], [-1.0], [1.0], hidden_dims=[8]).configure_optimizers()
    assert [o.param_groups[0]["betas"] for o in default] == [(0.9, 0.999)] * 2


def test_target_networks_follow_the_running_statistics_as_they_follow_the_weights():
    m = _module(tau=0.25)
    online, target = m.critic.renorms[1], m.critic_target.renorms[1]
    with torch.no_grad():
        online.mean.fill_(2.0)
        online.var.fill_(5.0)
        m.actor.net[0].mean.fill_(-4.0)
    m.update_targets()  # Polyak: theta' <- 0.75 theta' + 0.25 theta, the statistics too
    torch.testing.assert_close(target.mean, torch.full_like(target.mean, 0.5))
    torch.testing.assert_close(target.var, torch.full_like(target.var, 2.0))
    torch.testing.assert_close(m.actor_target.net[0].mean, torch.full((3,), -1.0))
    hard = _module(target_update_every=5)
    with torch.no_grad():
        hard.critic.renorms[0].var.fill_(7.0)
    hard.extensions.target_sync.before_step(hard, 5)  # a hard copy: the statistics too
    assert torch.equal(hard.critic_target.renorms[0].var, hard.critic.renorms[0].var)


def test_batch_renorm_under_several_processes_is_one_line():
    from td3_lightning.batch_renorm import check_processes
    from td3_lightning.errors import UserInputError

    check_processes({"batch_renorm": True}, 1)
    check_processes({"batch_renorm": False}, 4)
    with pytest.raises(UserInputError) as info:
        check_processes({"batch_renorm": True}, 2)
    assert str(info.value) == ("model.batch_renorm keeps the statistics of one process's batches (2 devices or "
                               "nodes): set trainer.devices 1, or model.batch_renorm false")


def test_batch_renorm_over_batches_of_one_transition_is_one_line_before_anything_is_written(tmp_path, monkeypatch,
                                                                                              capsys):
    from td3_lightning.batch_renorm import check_batch
    from td3_lightning.cli import main

    check_batch({"batch_renorm": True}, 2)
    check_batch({"batch_renorm": False}, 1)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", "--model.batch_renorm", "true", "--model.target_networks", "false",
              "--data.batch_size", "1"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "error: model.batch_renorm normalises over the transitions of a batch, and data.batch_size 1 holds one (its "
        "variance is 0): set data.batch_size 2 or more (e.g. 256), or model.batch_renorm false\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("device, capture", [("cpu", False), pytest.param(
    "cuda", True, marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="captures CUDA graphs"))])
def test_the_static_buffer_update_steps_like_td3_update_with_crossq(device, capture):
    """The captured update (its code path eager on the CPU; CUDA graphs on a GPU) over 20 steps with both options:
    the same losses, weights and running statistics (exactly on the CPU); the warm-up updates before the first step
    are undone, statistics included."""
    from test_captured_update import _run_both

    with training_pass():
        (eager, _), (static, _), _, losses, _ = _run_both(20, device, capture, reload_at=12, batch_renorm=True,
                                                          target_networks=False, batch_renorm_warmup=6)
    same = torch.equal if device == "cpu" else (lambda x, y: torch.allclose(x, y, rtol=1e-4, atol=1e-5))
    for step, (a, b) in enumerate(losses):
        assert all(same(x, y) for x, y in zip(a, b)), step
    sa, sb = eager.state_dict(), static.state_dict()
    assert all(same(sa[k], sb[k]) for k in sa), [k for k in sa if not same(sa[k], sb[k])]
    assert sb["critic.renorms.1.steps"].item() == 20 and sb["actor.net.0.steps"].item() == 10
