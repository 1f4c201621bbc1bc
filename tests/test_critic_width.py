"""``model.critic_hidden_dims``: critics of their own width (wide critics beside a small actor), against a
hand-computed forward pass, with SALE's input layer, and resumed exactly."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from conftest import fit_checkpointed, straight_and_resumed

from td3_lightning import TD3, ReplayDataModule


def make(**kw) -> TD3:
    torch.manual_seed(0)
    return TD3([3], [-1.0, -1.0], [1.0, 1.0], hidden_dims=[16, 16], **kw)


def test_the_critics_take_their_own_hidden_sizes_and_the_actor_keeps_its_own():
    plain, wide = make(), make(critic_hidden_dims=[64, 32])
    assert [p.shape for p in wide.actor.parameters()] == [p.shape for p in plain.actor.parameters()]
    assert [tuple(w.shape) for w in wide.critic.weights] == [(2, 5, 64), (2, 64, 32), (2, 32, 1)]
    assert [tuple(w.shape) for w in wide.critic_target.weights] == [(2, 5, 64), (2, 64, 32), (2, 32, 1)]
    obs, action, c = torch.randn(4, 3), torch.rand(4, 2), wide.critic
    for member in range(2):  # Q = W3 relu(W2 relu(W1 [s, a] + b1) + b2) + b3, per critic
        h = torch.cat([obs, action], dim=1)
        for i in range(2):
            h = torch.relu(h @ c.weights[i][member] + c.biases[i][member])
        expected = (h @ c.weights[2][member] + c.biases[2][member]).squeeze(-1)
        assert torch.allclose(c(obs, action)[member], expected, atol=1e-6)
    same = make(critic_hidden_dims=[16, 16])  # null and the actor's sizes build the same networks
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), same.state_dict().values()))


def test_sale_critics_read_their_embedding_input_at_their_own_width():
    m = make(critic_hidden_dims=[64, 32], embedding_dim=8, target_update_every=10)
    assert tuple(m.critic.input_layer.weight.shape) == (2, 5, 64)  # linear(s, a) at the critics' first width
    assert [tuple(w.shape) for w in m.critic.weights] == [(2, 64 + 8 + 8, 64), (2, 64, 32), (2, 32, 1)]
    assert m.actor.encoder.linear.out_features == 16  # the actor's [AvgL1Norm(linear(s)), z_s] at its own width
    assert m.critic(torch.randn(4, 3), torch.rand(4, 2)).shape == (2, 4)


def _fit(path, max_steps: int, ckpt_path=None, every: int | None = None):
    L.seed_everything(3)
    dm = ReplayDataModule("td3test/ConstantReward-v0", warmup_steps=20, batch_size=16, buffer_size=200)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8], critic_hidden_dims=[32, 16])
    fit_checkpointed(model, dm, max_steps, path, every, ckpt_path)
    return model


def test_a_run_with_wide_critics_resumes_exactly(tmp_path):
    straight, resumed = straight_and_resumed(_fit, tmp_path)  # at 60 + 20 warm-up env steps: an episode's end
    sa, sb = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert sa["critic.weights.0"].shape == (2, 3, 32) and sa["actor.net.0.weight"].shape == (8, 2)


@pytest.mark.parametrize("embedding_dim", [0, 16])
def test_q_values_keep_float32_precision_under_bf16_autocast(embedding_dim):
    # trainer.precision bf16-mixed: the hidden layers run in bfloat16, the last layer in float32, so a Q of about
    # 1000 is not rounded to bfloat16's steps of 8 (nor its TD error, nor LAP's priority)
    torch.manual_seed(0)
    model = TD3([5], [-1.0, -1.0], [1.0, 1.0], hidden_dims=[32, 32], embedding_dim=embedding_dim,
                target_update_every=250 if embedding_dim else 0)
    with torch.no_grad():
        model.critic.biases[-1].fill_(1000.0)
    obs, action = torch.randn(64, 5), torch.rand(64, 2) * 2 - 1
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q, q1, raw = model.critic(obs, action), model.critic.q1(obs, action), model.critic(obs, action, raw=True)
    assert q.dtype == q1.dtype == raw.dtype == torch.float32
    for values in (q, q1):
        assert (values != values.to(torch.bfloat16).float()).float().mean() > 0.9  # not on bfloat16's grid
    # the first critic alone: its own kernels, whose float32 sums may differ in the last bit (AMD EPYC: 1e-4 at 1000)
    torch.testing.assert_close(q1, q[0])
    with torch.no_grad():
        full = model.critic(obs, action)  # float32 throughout
    assert 0 < (q - full).abs().max() < 1.0  # the hidden layers' bfloat16 rounding, no more
