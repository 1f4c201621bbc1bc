"""``model.normalize_actions``: the critics and SALE's encoder read actions rescaled to [-1, 1] (TD7's replay),
against the same networks fed the rescaled actions by hand, a no-op for bounds of +-1, and resumed exactly."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from conftest import fit_checkpointed, straight_and_resumed

from td3_lightning import TD3, ReplayDataModule
from td3_lightning.networks import ActionRescale

LOW, HIGH = [-0.4, 0.0, -2.0], [0.4, 1.0, 2.0]  # Humanoid's bounds, a car pedal's, Pendulum's


def make(low=LOW, high=HIGH, **kw) -> TD3:
    torch.manual_seed(0)
    return TD3([4], low, high, hidden_dims=[16, 16], **kw)


def by_hand(action: torch.Tensor) -> torch.Tensor:
    """``LOW``/``HIGH`` actions rescaled to [-1, 1], written out per dimension."""
    return torch.stack([action[:, 0] / 0.4, action[:, 1] * 2 - 1, action[:, 2] / 2], dim=1)


def test_the_rescale_maps_each_bound_to_minus_one_and_one_and_a_fixed_bound_to_zero():
    rescale = ActionRescale([-0.4, 0.0, 3.0], [0.4, 1.0, 3.0])
    corners = torch.tensor([[-0.4, 0.0, 3.0], [0.4, 1.0, 3.0], [0.0, 0.5, 3.0], [0.1, 0.25, 3.0]])
    assert torch.allclose(rescale(corners), torch.tensor([[-1.0, -1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0],
                                                          [0.25, -0.5, 0.0]]))
    assert dict(rescale.state_dict()) == {}  # derived from the options, not saved


@pytest.mark.parametrize("sale", [False, True])
def test_the_critics_read_the_rescaled_action(sale):
    kw = dict(embedding_dim=8, target_update_every=10) if sale else {}
    plain, rescaled = make(**kw), make(normalize_actions=True, **kw)
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), rescaled.state_dict().values()))
    obs = torch.randn(5, 4)
    action = torch.rand(5, 3) * (torch.tensor(HIGH) - torch.tensor(LOW)) + torch.tensor(LOW)
    for net in ("critic", "critic_target"):
        q = getattr(rescaled, net)(obs, action)
        assert q.shape == (2, 5)
        torch.testing.assert_close(q, getattr(plain, net)(obs, by_hand(action)))
    torch.testing.assert_close(rescaled.critic.q1(obs, action), plain.critic.q1(obs, by_hand(action)))
    # the actor is untouched: it still acts in the env's bounds
    torch.testing.assert_close(rescaled.actor(obs), plain.actor(obs))


def test_sales_encoder_learns_on_the_rescaled_action():
    kw = dict(embedding_dim=8, target_update_every=10)
    plain, rescaled = make(**kw), make(normalize_actions=True, **kw)
    action = torch.tensor(LOW) + torch.rand(6, 3) * 0.4
    batch = {"obs": torch.randn(6, 4), "action": action, "next_obs": torch.randn(6, 4)}
    loss = rescaled.extensions.auxiliary_losses["embedding"](batch)
    expected = plain.extensions.auxiliary_losses["embedding"]({**batch, "action": by_hand(batch["action"])})
    torch.testing.assert_close(loss, expected)
    assert not torch.allclose(loss, plain.extensions.auxiliary_losses["embedding"](batch))


def test_bounds_of_one_are_read_unchanged():
    obs, action = torch.randn(5, 4), torch.rand(5, 2) * 2 - 1
    plain, rescaled = make([-1.0, -1.0], [1.0, 1.0]), make([-1.0, -1.0], [1.0, 1.0], normalize_actions=True)
    assert torch.equal(rescaled.critic(obs, action), plain.critic(obs, action))


def _fit(path, max_steps: int, ckpt_path=None, every: int | None = None):
    L.seed_everything(3)
    dm = ReplayDataModule("td3test/ConstantReward-v0", env_kwargs={"action_low": -0.4, "action_high": 0.4},
                          warmup_steps=20, batch_size=16, buffer_size=200, sampler="lap")
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8], embedding_dim=8, target_update_every=10,
                normalize_actions=True)
    fit_checkpointed(model, dm, max_steps, path, every, ckpt_path)
    return model


def test_a_run_with_rescaled_actions_resumes_exactly(tmp_path):
    straight, resumed = straight_and_resumed(_fit, tmp_path)  # at 60 + 20 warm-up env steps: an episode's end
    sa, sb = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert straight.critic.action_rescale.scale.tolist() == pytest.approx([0.4])
