"""The TD3 update against hand-computed answers."""

import pytest
import torch
from torch import nn

from td3_lightning.errors import UserInputError
from td3_lightning.module import TD3
from td3_lightning.networks import Actor, CriticEnsemble


def make_module(**kw) -> TD3:
    torch.manual_seed(0)
    args = dict(obs_shape=[3], action_low=[-2.0, 0.0], action_high=[2.0, 1.0], hidden_dims=[16, 16])
    args.update(kw)
    return TD3(**args)


def batch_of(n: int = 4) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {
        "obs": torch.randn(n, 3, generator=g),
        "action": torch.rand(n, 2, generator=g),
        "reward": torch.tensor([1.0, -2.0, 0.5, 3.0][:n]),
        "next_obs": torch.randn(n, 3, generator=g),
        "terminated": torch.tensor([False, True, False, True][:n]),
    }


def test_target_bootstraps_only_through_non_terminal_transitions():
    m = make_module(gamma=0.9, policy_noise=0.0)
    b = batch_of()
    next_a = m.actor_target(b["next_obs"])
    next_q = m.critic_target(b["next_obs"], next_a).min(dim=0).values
    expected = b["reward"] + 0.9 * torch.tensor([1.0, 0.0, 1.0, 0.0]) * next_q
    target = m.td_target(b, noise=torch.zeros(4, 2))
    assert torch.allclose(target, expected)
    # terminated rows are exactly the reward; truncated rows are stored as not terminated and bootstrap
    assert target[1].item() == -2.0 and target[3].item() == 3.0
    assert target[0].item() != 1.0


def test_target_uses_minimum_over_all_target_critics():
    m = make_module(num_critics=5, gamma=0.5, policy_noise=0.0)
    b = batch_of()
    all_q = m.critic_target(b["next_obs"], m.actor_target(b["next_obs"]))
    assert all_q.shape == (5, 4)
    expected = b["reward"] + 0.5 * (1 - b["terminated"].float()) * all_q.min(dim=0).values
    assert torch.allclose(m.td_target(b, noise=torch.zeros(4, 2)), expected)


def test_target_policy_noise_is_clipped_relative_to_the_action_range():
    m = make_module(policy_noise=0.2, noise_clip=0.5)
    b = batch_of()
    huge = torch.full((4, 2), 100.0)  # clipped to noise_clip * half-range = [1.0, 0.25]
    clean = m.actor_target(b["next_obs"])
    expected_action = torch.minimum(clean + torch.tensor([1.0, 0.25]), torch.tensor([2.0, 1.0]))
    expected = b["reward"] + 0.99 * (1 - b["terminated"].float()) * m.critic_target(
        b["next_obs"], expected_action
    ).min(0).values
    assert torch.allclose(m.td_target(b, noise=huge), expected)
    small = torch.full((4, 2), 0.5)  # 0.5 * 0.2 = 0.1 of the half range: [0.2, 0.05], within the clip
    a = torch.clamp(clean + torch.tensor([0.2, 0.05]), torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0]))
    expected = b["reward"] + 0.99 * (1 - b["terminated"].float()) * m.critic_target(b["next_obs"], a).min(0).values
    assert torch.allclose(m.td_target(b, noise=small), expected)


def test_critic_loss_is_sum_of_per_critic_mse():
    m = make_module(num_critics=3)
    b = batch_of()
    noise = torch.randn(4, 2)
    loss, q, _ = m.critic_loss(b, noise)
    assert q.shape == (3, 4)
    target = m.td_target(b, noise)
    expected = sum(((m.critic(b["obs"], b["action"])[i] - target) ** 2).mean() for i in range(3))
    assert torch.allclose(loss, expected)
    loss.backward()  # the target carries no gradient into the target networks
    assert all(p.grad is None for p in m.critic_target.parameters())


def test_ensemble_matches_independent_mlps():
    torch.manual_seed(0)
    ens = CriticEnsemble(3, 2, [8, 8], num_critics=3)
    obs, act = torch.randn(5, 3), torch.randn(5, 2)
    out = ens(obs, act)
    for i in range(3):
        mlp = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
        with torch.no_grad():
            for layer, w, b in zip([0, 2, 4], ens.weights, ens.biases):
                mlp[layer].weight.copy_(w[i].T)
                mlp[layer].bias.copy_(b[i, 0])
        assert torch.allclose(out[i], mlp(torch.cat([obs, act], -1)).squeeze(-1), atol=1e-6)
    assert torch.allclose(ens.q1(obs, act), out[0], atol=1e-6)


def test_actor_update_leaves_critic_gradients_empty():
    m = make_module()
    loss = m.actor_loss(batch_of())
    loss.backward()
    assert all(p.grad is None for p in m.critic.parameters())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in m.actor.net.parameters())


def test_actor_respects_asymmetric_bounds():
    torch.manual_seed(0)
    actor = Actor(4, [-1.0, 0.0, 10.0], [1.0, 1.0, 30.0], [32])
    with torch.no_grad():
        for p in actor.net.parameters():
            p.mul_(50)  # saturate tanh to hit the bounds
        a = actor(torch.randn(2000, 4) * 10)
    low, high = torch.tensor([-1.0, 0.0, 10.0]), torch.tensor([1.0, 1.0, 30.0])
    assert torch.all(a >= low) and torch.all(a <= high)
    assert torch.allclose(a.min(0).values, low, atol=1e-3) and torch.allclose(a.max(0).values, high, atol=1e-3)
    assert torch.equal(actor.action_bias, torch.tensor([0.0, 0.5, 20.0]))
    # self-contained: a saved state dict carries the bounds
    assert {"action_scale", "action_bias"} <= set(actor.state_dict())


def test_polyak_update_arithmetic():
    m = make_module(tau=0.1)
    with torch.no_grad():
        for p in m.actor.parameters():
            p.fill_(1.0)
        for p in m.actor_target.parameters():
            p.fill_(3.0)
        for p in m.critic.parameters():
            p.fill_(-1.0)
        for p in m.critic_target.parameters():
            p.fill_(0.0)
    m.update_targets()
    assert all(torch.allclose(p, torch.full_like(p, 2.8)) for p in m.actor_target.parameters())
    assert all(torch.allclose(p, torch.full_like(p, -0.1)) for p in m.critic_target.parameters())
    m.update_targets()
    assert all(torch.allclose(p, torch.full_like(p, 2.8 * 0.9 + 0.1)) for p in m.actor_target.parameters())


def test_targets_have_no_gradients_and_stay_in_eval_mode():
    m = make_module()
    m.train()
    assert not m.actor_target.training and not m.critic_target.training
    assert not any(p.requires_grad for p in [*m.actor_target.parameters(), *m.critic_target.parameters()])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_critics": 1}, "num_critics"),
        ({"gamma": 1.5}, "gamma"),
        ({"tau": 0.0}, "tau"),
        ({"policy_freq": 0}, "policy_freq"),
        ({"obs_shape": [8, 8]}, "the MLP networks alone take 1-D observations"),
        ({"obs_shape": [3, 20, 20]}, "too small for the CNN encoder"),
        ({"encoder": "cnn"}, "model.encoder cnn needs image observations"),
        ({"obs_shape": [3, 40, 40], "encoder": "none"}, "need model.encoder auto or cnn"),
        ({"encoder": "mlp"}, "model.encoder must be auto, cnn or none"),
        ({"compile_mode": "fast"}, "model.compile_mode must be one of none, default, reduce-overhead"),
        ({"action_low": [3.0, 0.0]}, "action_low"),
        ({"preactivation_penalty": -1e-3}, r"model.preactivation_penalty must be >= 0 \(0 = off\), got -0.001"),
    ],
)
def test_bad_hyperparameters_are_refused(kwargs, match):
    with pytest.raises(UserInputError, match=match):
        make_module(**kwargs)


def test_flush_denormal_is_set_when_the_module_is_created(cli_env):
    """In a fresh process (this one has it on already): denormals survive before the module
    exists, and become zero after, while a normal float stays."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from td3_lightning.module import TD3\n"
        "tiny = torch.tensor([1e-39, 3e-38])\n"
        "before = (tiny * 1.0).tolist()\n"
        "TD3([3], [-1.0], [1.0], hidden_dims=[8])\n"
        "print(before[0] > 0, (tiny * 1.0)[0].item() == 0.0, (tiny * 1.0)[1].item() > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=cli_env)
    assert out.stdout.split() == ["True", "True", "True"]


def test_preactivation_penalty_adds_the_weighted_mean_square_of_the_output_before_the_tanh():
    plain, penalised = make_module(), make_module(preactivation_penalty=0.5)
    b = batch_of()
    z = plain.actor.net(b["obs"])
    expected = plain.actor_loss(b) + 0.5 * z.pow(2).mean()
    assert torch.allclose(penalised.actor_loss(b), expected)
    assert torch.allclose(penalised.stats.means()["train/actor_preactivation"], z.pow(2).mean())


@pytest.mark.parametrize("penalty, pinned", [(0.0, True), (1e-3, False)])
def test_a_nearly_flat_critic_pins_the_action_at_its_bound_unless_the_preactivation_is_penalised(penalty, pinned):
    """A critic with a small constant slope dQ/da = 0.01 (as early in training): Adam moves the actor's output
    at its full step size, so without the penalty the tanh saturates (and its gradient vanishes); with 1e-3 the
    output settles where 0.01 * (1 - tanh(z)^2) = 2e-3 * z, z about 1.25, an action of about 0.85."""
    m = make_module(action_low=[-1.0], action_high=[1.0], preactivation_penalty=penalty)
    m.critic.q1 = lambda obs, action, detach_params=False: 0.01 * action.sum(dim=1)
    optimizer = torch.optim.Adam(m.actor.parameters(), lr=3e-4)
    obs = torch.randn(64, 3, generator=torch.Generator().manual_seed(2))
    for _ in range(1000):
        optimizer.zero_grad()
        m.actor_loss({"obs": obs}).backward()
        optimizer.step()
    action, z = m.actor(obs), m.actor.net(obs)
    if pinned:  # saturated: tanh'(z) < 0.01 for most states, and still moving outward
        assert action.mean() > 0.99 and z.mean() > 3.0
    else:
        assert 0.8 < action.mean() < 0.9 and action.max() < 0.95 and 1.1 < z.mean() < 1.4
