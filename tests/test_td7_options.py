"""TD7's additions as options: normalised layers, SALE embeddings and hard target updates,
against hand-computed answers, and resumed bit for bit."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn import functional as F
from test_training_loop import _fit

from td3_lightning.embeddings import avg_l1_norm
from td3_lightning.errors import UserInputError
from td3_lightning.module import TD3


def make(**kw) -> TD3:
    torch.manual_seed(0)
    return TD3(**{"obs_shape": [3], "action_low": [-2.0, 0.0], "action_high": [2.0, 1.0], "hidden_dims": [16, 16],
                  **kw})


def batch_of(n: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {"obs": torch.randn(n, 3, generator=g), "action": torch.rand(n, 2, generator=g),
            "reward": torch.randn(n, generator=g), "next_obs": torch.randn(n, 3, generator=g),
            "terminated": torch.zeros(n, dtype=torch.bool)}


def test_avg_l1_norm_divides_by_the_mean_absolute_value():
    x = torch.tensor([[1.0, -3.0], [0.0, 0.0]])
    assert torch.equal(avg_l1_norm(x), torch.tensor([[0.5, -1.5], [0.0, 0.0]]))  # mean |x| = 2; zeros stay zeros


def test_layer_norm_normalises_every_hidden_layer_of_actor_and_critics():
    m = make(layer_norm=True)
    assert sum(isinstance(x, torch.nn.LayerNorm) for x in m.actor.net) == 2
    c, obs, action = m.critic, torch.randn(4, 3), torch.rand(4, 2)
    with torch.no_grad():
        c.norm_gains[0].uniform_(0.5, 1.5)
        c.norm_offsets[1].uniform_(-0.5, 0.5)
    x = torch.cat([obs, action], dim=1)
    for member in range(2):
        h = x
        for i in range(2):
            h = h @ c.weights[i][member] + c.biases[i][member]
            h = torch.relu(F.layer_norm(h, (16,)) * c.norm_gains[i][member] + c.norm_offsets[i][member])
        expected = (h @ c.weights[2][member] + c.biases[2][member]).squeeze(-1)
        assert torch.allclose(c(obs, action)[member], expected, atol=1e-6)
    assert torch.allclose(c.q1(obs, action), c(obs, action)[0], atol=1e-6)
    assert not any("norm" in name for name in make().state_dict())  # off: the networks as before


def test_sale_embeddings_feed_actor_and_critics_from_the_fixed_encoder():
    m = make(embedding_dim=8, target_update_every=10)
    sale = m.extensions.auxiliary_losses["embedding"].encoder
    fixed = m.actor.encoder.fixed
    assert m.critic.input_layer.fixed is fixed  # one fixed encoder, read by actor and critics
    assert m.critic_target.input_layer.fixed is m.actor_target.encoder.fixed is not fixed  # and one for the targets
    assert all(not p.requires_grad for p in fixed.parameters())
    assert all(torch.equal(a, b) for a, b in zip(fixed.encoder.parameters(), sale.parameters()))
    b = batch_of()
    zs = fixed.encoder.zs(b["obs"])
    assert zs.shape == (5, 8) and torch.allclose(zs.abs().mean(dim=1), torch.ones(5))  # AvgL1Norm'd
    features = m.actor.features(b["obs"])
    assert features.shape == (5, 16 + 8) and torch.equal(features[:, 16:], zs)
    assert m.critic(b["obs"], b["action"]).shape == (2, 5)
    # the encoder's loss: predict the next state's embedding
    expected = F.mse_loss(sale.zsa(sale.zs(b["obs"]), b["action"]), sale.zs(b["next_obs"]).detach())
    assert torch.allclose(m.extensions.auxiliary_losses["embedding"](b), expected)
    # the frozen encoder is in no optimizer; the trained one has its own
    critic_opt, actor_opt, encoder_opt = m.configure_optimizers()
    in_opt = {id(p) for o in (critic_opt, actor_opt) for g in o.param_groups for p in g["params"]}
    assert not in_opt & {id(p) for p in fixed.parameters()}
    assert {id(p) for g in encoder_opt.param_groups for p in g["params"]} == {id(p) for p in sale.parameters()}


def test_a_training_step_encodes_its_float64_batch_once_and_a_changed_batch_again():
    m = make(embedding_dim=8, target_update_every=10)
    fixed = m.actor.encoder.fixed
    b = {k: v.double() if k.endswith("obs") else v for k, v in batch_of().items()}  # MuJoCo's observations
    calls = []
    original = fixed.encoder.zs
    fixed.encoder.zs = lambda obs: calls.append(obs.dtype) or original(obs)
    features = m.actor.features(b["obs"])
    q = m.critic(b["obs"], b["action"])
    m.actor_loss(b)
    assert calls == [torch.float32]  # one encoding for the actor, the critics and the actor's Q
    assert torch.equal(features[:, 16:], original(b["obs"].float()))
    assert torch.equal(q, make(embedding_dim=8, target_update_every=10).critic(b["obs"].float(), b["action"]))
    b["obs"].add_(1.0)  # the same tensor, new values: encoded again
    assert torch.equal(m.actor.features(b["obs"])[:, 16:], original(b["obs"].float())) and len(calls) == 2
    with torch.no_grad():
        next(fixed.encoder.parameters()).mul_(2.0)  # new weights: encoded again
    m.actor.features(b["obs"])
    assert len(calls) == 3


def test_the_actor_gradient_reaches_its_action_through_the_state_action_embedding():
    m = make(embedding_dim=8, target_update_every=10)
    b = batch_of()
    m.actor_loss(b).backward()
    assert all(p.grad is not None for p in m.actor.parameters() if p.requires_grad)
    assert all(p.grad is None for p in m.critic.parameters())  # the critic's weights held fixed
    action = m.actor(b["obs"]).detach().requires_grad_(True)
    m.critic.q1(b["obs"], action).sum().backward()
    assert action.grad is not None and action.grad.abs().sum() > 0


def test_sale_and_hard_target_updates_need_each_other_and_vector_observations():
    with pytest.raises(UserInputError, match=r"model.embedding_dim refreshes the fixed encoder .* set "
                                             r"model.target_update_every \(TD7: 250\)"):
        make(embedding_dim=8)
    with pytest.raises(UserInputError, match=r"model.embedding_dim needs vector observations"):
        TD3([4, 40, 40], [-1.0], [1.0], embedding_dim=8, target_update_every=10)
    with pytest.raises(UserInputError, match=r"model.target_update_every must be >= 0 \(0 = Polyak\), got -1"):
        make(target_update_every=-1)


def test_hard_target_updates_copy_every_n_steps_and_refresh_the_fixed_encoder_after(tmp_path):
    _, model, _, _ = _fit(tmp_path, 25, embedding_dim=8, target_update_every=10)
    sale = model.extensions.auxiliary_losses["embedding"].encoder
    fixed = model.actor.encoder.fixed.encoder
    # the last copy came before step 21: after it 5 more steps trained the networks and the encoder
    assert not torch.equal(model.actor_target.net[0].weight, model.actor.net[0].weight)
    assert not any(torch.equal(a, b) for a, b in zip(fixed.parameters(), sale.parameters()))
    # the target's fixed encoder is the one the networks read before the refresh: a copy of an older encoder
    target_fixed = model.actor_target.encoder.fixed.encoder
    assert not torch.equal(next(target_fixed.parameters()), next(fixed.parameters()))
    _, at20, _, _ = _fit(tmp_path / "b", 20, embedding_dim=8, target_update_every=10)
    _, at21, _, _ = _fit(tmp_path / "c", 21, embedding_dim=8, target_update_every=10)
    # before step 21: the targets are copies of the networks after step 20, then the fixed encoder takes the
    # trained encoder's weights of step 20
    for target, online in ((at21.actor_target, at20.actor), (at21.critic_target, at20.critic)):
        for (name, t), o in zip(target.named_parameters(), online.parameters()):
            assert torch.equal(t, o), name
    trained = at20.extensions.auxiliary_losses["embedding"].encoder
    assert all(torch.equal(a, b) for a, b in zip(at21.actor.encoder.fixed.encoder.parameters(), trained.parameters()))


def test_a_sale_run_resumes_exactly(tmp_path):
    kw = dict(embedding_dim=8, target_update_every=25, layer_norm=True)
    _, straight, _, _ = _fit(tmp_path / "a", 120, **kw)
    _fit(tmp_path / "b", 60, every=60, **kw)
    _, resumed, _, _ = _fit(tmp_path / "b2", 120, ckpt_path=tmp_path / "b" / "s60.ckpt", **kw)
    for name, tensor in straight.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name


def test_a_sale_run_is_tested_under_inference_mode_with_the_actions_of_its_actor(tmp_path):
    trainer, model, dm, _ = _fit(tmp_path, 25, embedding_dim=8, target_update_every=10)
    obs = torch.randn(4, *model.hparams.obs_shape, dtype=torch.float64)
    with torch.no_grad():
        expected = model.actor(obs)
    with torch.inference_mode():  # what Lightning's test and validate loops run under
        acted = model.actor(torch.from_numpy(obs.numpy()))
    assert torch.equal(acted, expected)
    results = trainer.test(model, datamodule=dm, verbose=False)  # plays its test episodes with the SALE actor
    assert results[0]["test/episodes"] == dm.test_episodes


# ----------------------------------------------------------------------------- value clipping, the actor's Q
def test_clipped_targets_keep_the_next_value_in_the_range_seen_before_the_last_refresh():
    from td3_lightning.extensions.value_clipping import ClippedTargetValue

    clip = ClippedTargetValue()
    reward, discount = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 0.5])
    # before the first refresh the bounds are 0 and 0: the target is the reward
    assert torch.equal(clip(reward, discount, torch.tensor([10.0, -10.0])), reward)
    clip.refresh()  # the targets seen: 1 and -2
    assert (clip.low.item(), clip.high.item()) == (-2.0, 1.0)
    # next values clamped to [-2, 1]: 1 + 0.5 * 1, -2 + 0.5 * -2
    assert torch.equal(clip(reward, discount, torch.tensor([10.0, -10.0])), torch.tensor([1.5, -3.0]))
    assert (clip.low.item(), clip.high.item()) == (-2.0, 1.0)  # new bounds only at the next refresh
    clip.refresh()
    assert (clip.low.item(), clip.high.item()) == (-3.0, 1.5)
    # a refresh with no target seen since the start keeps the bounds at 0
    fresh = ClippedTargetValue()
    fresh.refresh()
    assert (fresh.low.item(), fresh.high.item()) == (0.0, 0.0)


def test_a_module_with_value_clipping_passes_the_weights_guard_before_its_first_update():
    model = make(value_clipping=True, target_update_every=10)  # a sanity validation or a checkpoint at step 0
    model.check_finite(action="; not evaluating them")  # before: "non-finite weights in ...seen_low"
    assert all(torch.isfinite(v).all() for v in model.state_dict().values() if v.is_floating_point())


def test_value_clipping_takes_its_bounds_at_the_hard_target_updates_and_resumes_exactly(tmp_path):
    kw = dict(target_update_every=10, value_clipping=True)
    _, model, _, _ = _fit(tmp_path / "a", 25, **kw)
    bounds = model.extensions.target_value
    assert bounds.low.item() < bounds.high.item()  # bounds from the first 20 steps' targets
    assert bounds.seen_low.item() <= bounds.low.item() and bounds.seen_high.item() >= bounds.high.item()
    assert "extensions.target_value.low" in model.state_dict()
    _, straight, _, _ = _fit(tmp_path / "s", 120, **kw)
    _fit(tmp_path / "b", 60, every=60, **kw)  # a checkpoint at an episode's end: resumed exactly
    _, resumed, _, _ = _fit(tmp_path / "b2", 120, ckpt_path=tmp_path / "b" / "s60.ckpt", **kw)
    for name, tensor in straight.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name
    with pytest.raises(UserInputError, match="model.value_clipping takes new bounds at each hard target update"):
        make(value_clipping=True)


def test_the_actor_ascends_the_mean_of_every_critic_with_actor_q_mean():
    model = make(actor_q="mean", num_critics=3)
    batch = batch_of()
    loss = model.actor_loss(batch)
    with torch.no_grad():
        action = model.actor(batch["obs"])
        q = model.critic(batch["obs"], action)  # (3, batch)
    torch.testing.assert_close(loss, -q.mean())
    loss.backward()
    assert all(p.grad is None for p in model.critic.parameters())  # dQ/da only: the critics are held fixed
    assert model.actor.net[0].weight.grad is not None
    first = make(actor_q="first", num_critics=3)
    with torch.no_grad():
        q1 = first.critic.q1(batch["obs"], first.actor(batch["obs"]))
    torch.testing.assert_close(first.actor_loss(batch), -q1.mean())
    least = make(actor_q="min", num_critics=3)
    with torch.no_grad():
        q = least.critic(batch["obs"], least.actor(batch["obs"]))
    assert (q.min(0).values < q.mean(0)).all()  # the three critics differ: min is neither mean nor first
    torch.testing.assert_close(least.actor_loss(batch), -q.min(0).values.mean())
    with pytest.raises(UserInputError, match="model.actor_q must be first, mean or min"):
        make(actor_q="max")


# ----------------------------------------------------------------------------- LAP
def test_lap_loss_is_huber_at_one_summed_over_critics_and_averaged_over_the_batch():
    from td3_lightning.samplers import lap_loss

    td = torch.tensor([[0.5, -2.0], [1.5, 0.2]])  # (critics, batch)
    # 0.5 * 0.25 + 1.5 = 1.625 for the first transition, 2.0 + 0.5 * 0.04 = 2.02 for the second
    assert torch.allclose(lap_loss(td), torch.tensor((1.625 + 2.02) / 2))


def test_lap_sampler_draws_in_proportion_to_the_priorities_and_new_transitions_start_at_the_top():
    from td3_lightning.samplers import LAPSampler

    sampler = LAPSampler(capacity=4, alpha=1.0)
    sampler.added(torch.arange(2))
    assert sampler.priority.tolist() == [1.0, 1.0, 0.0, 0.0]
    batch = sampler.hand_out({"reward": torch.zeros(2)}, torch.tensor([0, 1]))
    sampler.update(batch["index"], torch.tensor([0.5, 3.0]))  # what the update returns: max_i |TD error|
    draws = sampler.draw(2, 40_000, torch.Generator().manual_seed(0))
    assert sampler.priority[:2].tolist() == [1.0, 3.0]  # clamped at 1, then ** alpha
    assert abs(draws.float().mean().item() - 0.75) < 0.01  # slot 1 three times as likely
    sampler.added(torch.tensor([2]))
    assert sampler.priority[2].item() == 3.0  # the largest priority seen


def test_a_uniform_replay_restored_under_lap_starts_every_stored_transition_at_the_top():
    """A uniform run resumed with ``data.sampler lap`` (warned of): its checkpoint holds no priorities."""
    from td3_lightning.replay import ReplayBuffer
    from td3_lightning.samplers import LAPSampler

    uniform = ReplayBuffer(8, (3,), 1)
    for i in range(5):
        uniform.add([i, 0.0, 0.0], [0.0], 1.0, [i + 1, 0.0, 0.0], False)
    lap = ReplayBuffer(8, (3,), 1)
    lap.sampler = LAPSampler(8, alpha=0.4)
    lap.load_state_dict(uniform.state_dict())
    assert len(lap) == 5 and lap.sampler.priority.tolist() == [1.0] * 5 + [0.0] * 3
    assert set(lap.sample(200, torch.Generator().manual_seed(0))["index"].tolist()) == set(range(5))


def test_lap_sampler_gives_each_slot_its_own_share_in_a_full_buffer():
    from td3_lightning.samplers import LAPSampler

    size = 1_000_000
    sampler = LAPSampler(capacity=size, alpha=0.4)
    priority = torch.rand(size, generator=torch.Generator().manual_seed(0)) * 3 + 1
    sampler.priority.copy_(priority.pow(0.4))
    widths = torch.diff(sampler.cumulative(size), prepend=torch.zeros(1, dtype=torch.float64))
    # each slot's interval is its own priority, to float32's precision of that priority (not of the sum)
    torch.testing.assert_close(widths, sampler.priority.double(), rtol=1e-6, atol=0)
    draws = sampler.draw(size, 4096, torch.Generator().manual_seed(1))
    assert draws.dtype == torch.int64 and draws.shape == (4096,) and 0 <= int(draws.min()) and int(draws.max()) < size


def test_a_prioritised_batch_gets_lap_loss_and_hands_back_its_largest_td_errors():
    m = make()
    b = batch_of()
    plain_loss, q, none = m.critic_loss(b, torch.zeros(5, 2))
    b["index"] = torch.arange(5)  # drawn by priority
    loss, _, priority = m.critic_loss(b, torch.zeros(5, 2))
    td = q - m.td_target(b, torch.zeros(5, 2))
    assert none is None
    assert torch.allclose(priority, td.abs().max(dim=0).values)
    assert torch.allclose(plain_loss, td.pow(2).mean(dim=1).sum())
    assert torch.allclose(loss, torch.where(td.abs() < 1, 0.5 * td.pow(2), td.abs()).sum(0).mean())


def _fit_lap(tmp_path, max_steps: int, ckpt_path=None, every: int | None = None, alpha: float = 0.4):
    return _fit_on_constant_reward(tmp_path, max_steps, ckpt_path, every, seed=123, data={"priority_alpha": alpha})


def _fit_on_constant_reward(tmp_path, max_steps: int, ckpt_path, every: int | None, seed: int, data: dict,
                            model: dict | None = None, precision: str = "32-true"):
    """A LAP run on ConstantReward (16-16 networks, warm-up 20, buffer 70), checkpointed every ``every`` steps."""
    import lightning as L
    from conftest import fit_checkpointed

    from td3_lightning import ReplayDataModule

    L.seed_everything(seed)
    dm = ReplayDataModule("td3test/ConstantReward-v0", warmup_steps=20, batch_size=16, buffer_size=70,
                          sampler="lap", **data)
    td3 = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], actor_lr=1e-3, critic_lr=1e-3,
              **(model or {}))
    fit_checkpointed(td3, dm, max_steps, tmp_path, every, ckpt_path, precision=precision)
    return td3, dm


def test_a_lap_run_resumes_exactly_with_its_priorities(tmp_path):
    straight, dm_a = _fit_lap(tmp_path / "a", 120)
    _fit_lap(tmp_path / "b", 60, every=60)
    resumed, dm_b = _fit_lap(tmp_path / "b2", 120, ckpt_path=tmp_path / "b" / "s60.ckpt")
    assert dm_a.buffer.sampler.priority.max() > 1.0  # priorities moved away from the start
    assert torch.equal(dm_a.buffer.sampler.priority, dm_b.buffer.sampler.priority)
    for name, tensor in straight.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name
    uniform, _ = _fit_lap(tmp_path / "c", 120, alpha=0.0)  # alpha 0: every priority is 1, uniform draws
    assert not torch.equal(uniform.critic.weights[0], straight.critic.weights[0])


def _fit_td7_set(tmp_path, max_steps: int, ckpt_path=None, every: int | None = None, precision: str = "bf16-mixed"):
    td7 = {"embedding_dim": 8, "target_update_every": 10, "value_clipping": True, "actor_q": "mean"}
    return _fit_on_constant_reward(tmp_path, max_steps, ckpt_path, every, seed=7, data={"steps_per_batch": 4},
                                   model=td7, precision=precision)


def test_the_td7_set_in_bf16_mixed_resumes_exactly(tmp_path):
    # trainer.precision bf16-mixed on the CPU (docs/options.md): a long run stopped and resumed is the run it was
    # (at an episode boundary: 20 warm-up steps and 40 training steps are three of the env's 20-step episodes)
    straight, dm_a = _fit_td7_set(tmp_path / "a", 80)
    _fit_td7_set(tmp_path / "b", 40, every=40)
    resumed, dm_b = _fit_td7_set(tmp_path / "b2", 80, ckpt_path=tmp_path / "b" / "s40.ckpt")
    assert dm_a.buffer.sampler.priority.max() > 1.0  # the priorities moved
    assert torch.equal(dm_a.buffer.sampler.priority, dm_b.buffer.sampler.priority)
    for name, tensor in straight.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name
    full, _ = _fit_td7_set(tmp_path / "c", 80, precision="32-true")
    assert not torch.equal(full.critic.weights[0], straight.critic.weights[0])  # bfloat16 products did run


def test_lap_needs_a_replay_of_whole_observations():
    from td3_lightning import ReplayDataModule

    with pytest.raises(UserInputError, match=r"data.sampler must be uniform or lap, got 'per'"):
        ReplayDataModule("Pendulum-v1", sampler="per")
    takes = r"data.priority_alpha must be in \[0, 1\] \(0 = uniform, 1 = proportional\), got "
    with pytest.raises(UserInputError, match=takes + "-1"):
        ReplayDataModule("Pendulum-v1", sampler="lap", priority_alpha=-1)
    over = takes + "1000"
    with pytest.raises(UserInputError, match=over):
        ReplayDataModule("Pendulum-v1", sampler="lap", priority_alpha=1000)


# ----------------------------------------------------------------------------- observation normalisation
def test_running_statistics_equal_the_moments_of_everything_merged():
    from td3_lightning.normalization import ObservationNormalizer

    norm = ObservationNormalizer(3)
    assert torch.equal(norm(torch.tensor([[1.0, -2.0, 3.0]])), torch.tensor([[1.0, -2.0, 3.0]]))  # identity at first
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(1000, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1])
         + torch.tensor([2.0, -3.0, 7.0]))
    for chunk in x.split(77):
        norm.update(chunk)
    assert norm.count.item() == 1000
    assert torch.allclose(norm.mean.double(), x.mean(0), atol=1e-5)
    assert torch.allclose(norm.var.double(), x.var(0, unbiased=False), rtol=1e-4)
    expected = ((x[:4] - x.mean(0)) / (x.var(0, unbiased=False) + 1e-8).sqrt()).float()
    assert torch.allclose(norm(x[:4]), expected, atol=1e-4)
    assert norm(torch.tensor([[1e6, 0.0, 0.0]]))[0, 0].item() == 10.0  # clipped


def test_normalised_observations_are_part_of_the_policy_and_shared_with_critics_and_targets():
    m = make(normalize_obs=True)
    norm = m.actor.normalizer
    assert norm is m.critic.normalizer is m.actor_target.normalizer is m.critic_target.normalizer
    b = batch_of(64)
    b["obs"] = b["obs"] * 10 + 5
    m.extensions.transform(b, torch.Generator())  # the replay batch updates the statistics
    assert norm.count.item() == 64 and torch.allclose(norm.mean, b["obs"].mean(0), atol=1e-5)
    plain = make()  # the same weights, drawn from the same seed: its actor reads what the normaliser gives
    assert torch.allclose(m.actor(b["obs"]), plain.actor(norm(b["obs"])))
    assert {"actor.normalizer.mean", "actor.normalizer.var", "actor.normalizer.count"} <= set(m.state_dict())


def test_normalize_obs_refuses_images_and_privileged_critics():
    with pytest.raises(UserInputError, match=r"model.normalize_obs standardises vector observations"):
        TD3([4, 40, 40], [-1.0], [1.0], normalize_obs=True)
    with pytest.raises(UserInputError, match=r"model.normalize_obs standardises vector observations"):
        make(normalize_obs=True, critic_obs_shape=[5])


def test_a_normalised_run_resumes_exactly_and_its_export_applies_the_statistics(tmp_path):
    from td3_lightning.export import export_torchscript

    kw = dict(normalize_obs=True, embedding_dim=8, target_update_every=25)
    _, straight, _, _ = _fit(tmp_path / "a", 120, **kw)
    _fit(tmp_path / "b", 60, every=60, **kw)
    _, resumed, _, _ = _fit(tmp_path / "b2", 120, ckpt_path=tmp_path / "b" / "s60.ckpt", **kw)
    for name, tensor in straight.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name
    assert straight.actor.normalizer.count.item() == 120 * 16  # every replayed observation of 120 batches of 16
    ckpt = tmp_path / "b" / "s60.ckpt"
    export_torchscript(ckpt, tmp_path / "actor.pt")
    loaded = TD3.load_from_checkpoint(ckpt, map_location="cpu")
    assert loaded.actor.normalizer.count.item() == 60 * 16
    obs = torch.randn(5, 2) * 3
    with torch.no_grad():
        assert torch.allclose(torch.jit.load(str(tmp_path / "actor.pt"))(obs), loaded.actor(obs), atol=1e-6)


def test_lap_with_frames_shared_between_observations_is_one_line_before_anything_is_written(tmp_path, monkeypatch,
                                                                                            capsys):
    """Priorities are kept per stored observation: the pixel replay (each frame stored once) cannot hold them."""
    from td3_lightning.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "car_pixels.yaml", "--trainer.max_steps", "20", "--data.sampler", "lap"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: data.sampler lap needs a replay of whole observations: set data.frame_stack 1 (observation and next "
        "observation stored whole, 4 frames each: about 7x the replay memory) or data.sampler uniform")
    assert list(tmp_path.iterdir()) == []


def test_hard_target_updates_after_the_last_step_are_warned_of(tmp_path):
    """The targets would never take the trained weights (and value clipping would keep its first bounds)."""
    with pytest.warns(UserWarning, match=r"^model.target_update_every 100 is at or after trainer.max_steps \(40\): "
                                         r"the targets \(and the fixed encoder\) never take the trained weights"):
        _fit(tmp_path, 40, target_update_every=100)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="model.target_update_every")
        _fit(tmp_path, 40, target_update_every=20)  # updated at step 20: no warning
