"""TD7's additions as options: normalised layers, SALE embeddings and hard target updates,
against hand-computed answers, and resumed bit for bit."""

from __future__ import annotations

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
