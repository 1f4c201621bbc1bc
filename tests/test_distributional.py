"""``model.critic_bins``: HL-Gauss distributional critics, against hand-computed answers, a known Q value and an
exact resume."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from conftest import fit_checkpointed, quiet_trainer, small_batch

from td3_lightning import TD3, EnvLoop, ReplayDataModule
from td3_lightning.distributional import AUTO_START, OUTSIDE, RANGE_HIGH, RANGE_LOW, SIGMA_PER_BIN, ValueHistogram
from td3_lightning.errors import UserInputError

ENV = "td3test/ConstantReward-v0"


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def test_a_target_at_a_bins_centre_puts_the_gaussians_central_mass_there_and_keeps_its_mean():
    head = ValueHistogram(101, -10.0, 10.0)  # bins of width 20 / 101; 0 is the centre of bin 50
    width = 20 / 101
    assert head.sigma == pytest.approx(SIGMA_PER_BIN * width)
    y = torch.tensor([0.0, 3.3, -7.1])
    p = head.target_probs(y)
    assert p.shape == (3, 101)
    torch.testing.assert_close(p.sum(-1), torch.ones(3))
    torch.testing.assert_close((p * head.centers).sum(-1), y, atol=1e-4, rtol=0)  # far from the ends: the mean is y
    centre = 2 * _phi(width / 2 / head.sigma) - 1  # the Gaussian's mass within half a bin of y = 0
    assert p[0, 50].item() == pytest.approx(centre, abs=1e-6)
    assert p[0, 51].item() == pytest.approx(_phi(1.5 * width / head.sigma) - _phi(width / 2 / head.sigma), abs=1e-6)


def test_a_target_beyond_the_range_counts_as_its_end():
    head = ValueHistogram(21, -1.0, 1.0)
    p = head.target_probs(torch.tensor([100.0, -3.0, 1.0]))
    torch.testing.assert_close(p[0], p[2])  # clamped to high
    assert p[0, -1] > 0.5 and p[1, 0] > 0.5  # most of the mass in the end bin
    torch.testing.assert_close(p.sum(-1), torch.ones(3))


def test_logits_of_the_target_histogram_give_its_entropy_and_no_gradient():
    head = ValueHistogram(31, -5.0, 5.0)
    y = torch.tensor([0.3, -2.2, 4.1, 1.0])
    p = head.target_probs(y)
    logits = p.clamp_min(1e-30).log().expand(2, -1, -1).clone().requires_grad_(True)  # two critics
    loss = head.loss(logits, y)
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1).mean()
    torch.testing.assert_close(loss, 2 * entropy)
    loss.backward()
    assert logits.grad.abs().max().item() < 1e-6  # d CE / d logits = softmax - p = 0


def _module(**kw) -> TD3:
    torch.manual_seed(0)
    return TD3([3], [-1.0], [1.0], hidden_dims=[16, 16], critic_bins=11, critic_range=[-5.0, 5.0], **kw)


def test_each_critics_q_is_the_expectation_of_its_bins_and_its_loss_the_cross_entropy_to_y():
    m = _module()
    b, noise = small_batch(), torch.zeros(6, 1)
    logits = m.critic(b["obs"], b["action"], raw=True)
    q = m.critic(b["obs"], b["action"])
    assert logits.shape == (2, 6, 11) and q.shape == (2, 6)
    centers = torch.linspace(-5 + 5 / 11, 5 - 5 / 11, 11)
    torch.testing.assert_close(q, (logits.softmax(-1) * centers).sum(-1))
    torch.testing.assert_close(m.critic.q1(b["obs"], b["action"]), q[0])
    loss, q_loss, priority = m.critic_loss(b, noise)
    y = m.td_target(b, noise)
    expected = -(m.critic.head.target_probs(y) * logits.log_softmax(-1)).sum(-1).mean(-1).sum()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(q_loss, q)
    assert priority is None
    _, _, priority = m.critic_loss({**b, "index": torch.arange(6)}, noise)  # LAP's priorities: |Q - y|
    torch.testing.assert_close(priority, (q - y).abs().max(dim=0).values)


def test_the_bins_are_options_not_weights_and_a_bad_range_is_one_line():
    m = _module()
    assert not any("edges" in k or "centers" in k or "bounds" in k for k in m.state_dict())
    with pytest.raises(UserInputError, match=r"^model.critic_bins 11 needs model.critic_range: auto, or \[low, high\]"):
        TD3([3], [-1.0], [1.0], critic_bins=11)
    with pytest.raises(UserInputError, match=r"^model.critic_range must be \[low, high\], two finite numbers with "
                                             r"low < high, got \[2.0, -2.0\]$"):
        TD3([3], [-1.0], [1.0], critic_bins=11, critic_range=[2.0, -2.0])
    with pytest.raises(UserInputError, match=r"^model.critic_bins must be 0 \(off\) or >= 2, got 1$"):
        TD3([3], [-1.0], [1.0], critic_bins=1, critic_range=[0.0, 1.0])


def test_distributional_q_converges_to_the_infinite_horizon_value_through_truncation():
    """Reward 1 forever, truncated every 5 steps: Q -> 1 / (1 - gamma) = 5, read as the bins' expectation."""
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, env_kwargs={"horizon": 5}, warmup_steps=200, batch_size=64, buffer_size=5000)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[32, 32], gamma=0.8, tau=0.05,
                critic_lr=3e-3, critic_bins=51, critic_range=[-2.0, 10.0])
    trainer = quiet_trainer(max_steps=1500, callbacks=[EnvLoop()])
    trainer.fit(model, dm)
    obs, act = torch.rand(512, 2) * 2 - 1, torch.rand(512, 1) * 2 - 1
    with torch.no_grad():
        q = model.critic(obs, act)
    assert abs(q.mean().item() - 5.0) < 0.35, q.mean().item()
    assert trainer.callback_metrics[f"train/{OUTSIDE}"].item() == 0.0  # every target inside [-2, 10]


def test_targets_beyond_a_range_too_small_are_logged_and_warned_of_once():
    """Q -> 5 as above, in a range that ends at 2: the targets 1 + 0.8 Q' pass 2, count as 2, and fit says so."""
    head = ValueHistogram(11, -5.0, 5.0)
    assert head.outside(torch.tensor([-6.0, 0.0, 5.0, 5.1])).item() == 0.5  # the ends belong to the range
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, env_kwargs={"horizon": 5}, warmup_steps=200, batch_size=64, buffer_size=5000)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[32, 32], gamma=0.8, tau=0.05,
                critic_lr=3e-3, critic_bins=21, critic_range=[-1.0, 2.0])
    trainer = quiet_trainer(max_steps=800, log_every_n_steps=100, callbacks=[EnvLoop()])
    with pytest.warns(UserWarning, match=r"^train/targets_outside_range: \d+\.\d% of the critics' TD targets since "
                                         r"the last log fell outside model.critic_range \[-1, 2\], .*; widen "
                                         r"model.critic_range") as record:
        trainer.fit(model, dm)
    assert sum(OUTSIDE in str(w.message) for w in record) == 1  # once per run
    assert trainer.callback_metrics[f"train/{OUTSIDE}"].item() > 0.9
    assert model.critic(torch.zeros(1, 2), torch.zeros(1, 1)).max().item() < 2.0  # capped inside the range


def test_an_automatic_range_holds_every_target_the_rewards_allow():
    head = ValueHistogram(11)  # critic_range auto
    assert head.auto and head.range() == AUTO_START
    head.observe(torch.tensor([0.5, 2.0, -3.0]), torch.tensor([0.9, 0.0, 0.99]))  # the second one terminated
    low, high = head.range()
    assert low == pytest.approx(-300.0) and high == pytest.approx(5.0)  # -3 / 0.01 and 0.5 / 0.1; 2 / 1 inside
    head.observe(torch.tensor([0.1, -0.5]), torch.tensor([0.5, 0.0]))  # 0.2 and -0.5: inside, nothing moves
    assert head.range() == (low, high)
    edges, centers, sigma = head.grid()
    assert (edges[0].item(), edges[-1].item()) == (low, high) and centers.shape == (11,)
    assert float(sigma) == pytest.approx(SIGMA_PER_BIN * 305.0 / 11)
    for reward, discount in [(0.5, 0.9), (2.0, 0.0), (-3.0, 0.99), (0.1, 0.5)]:  # r + d Q' with Q' at either end
        for q in (low, high):
            assert head.outside(torch.tensor([reward + discount * q])).item() == 0.0
    p = head.target_probs(torch.tensor([high]))  # the target histogram is on the widened bins
    assert p.argmax().item() == 10 and (p * centers).sum().item() < high
    fixed = ValueHistogram(11, -5.0, 5.0)
    fixed.observe(torch.tensor([100.0]), torch.tensor([0.99]))
    assert fixed.range() == (-5.0, 5.0)  # a fixed range stays


def test_with_an_automatic_range_q_converges_to_the_infinite_horizon_value_at_the_ranges_top():
    """Reward 1 forever, truncated every 5 steps, gamma 0.8: the range grows to [-1, 1 / (1 - 0.8)] = [-1, 5] and
    Q -> 5; the targets and their target networks share the range, none falls outside, and the ends are logged."""
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, env_kwargs={"horizon": 5}, warmup_steps=200, batch_size=64, buffer_size=5000)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[32, 32], gamma=0.8, tau=0.05,
                critic_lr=3e-3, critic_bins=51, critic_range="auto")
    assert model.critic_target.head is model.critic.head
    trainer = quiet_trainer(max_steps=1500, callbacks=[EnvLoop()])
    trainer.fit(model, dm)
    low, high = model.critic.head.range()
    assert low == -1.0 and high == pytest.approx(5.0)
    obs, act = torch.rand(512, 2) * 2 - 1, torch.rand(512, 1) * 2 - 1
    with torch.no_grad():
        q = model.critic(obs, act)
    assert abs(q.mean().item() - 5.0) < 0.35, q.mean().item()
    assert trainer.callback_metrics[f"train/{OUTSIDE}"].item() == 0.0
    assert trainer.callback_metrics[f"train/{RANGE_HIGH}"].item() == pytest.approx(5.0)
    assert trainer.callback_metrics[f"train/{RANGE_LOW}"].item() == -1.0


def _fit(path, max_steps: int, ckpt_path=None, every: int | None = None, value_range=(-5.0, 25.0)):
    L.seed_everything(5)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=16, buffer_size=70, sampler="lap")
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], critic_bins=21,
                critic_range=value_range if value_range == "auto" else list(value_range))
    fit_checkpointed(model, dm, max_steps, path, every, ckpt_path)
    return model, dm


@pytest.mark.parametrize("value_range", [(-5.0, 25.0), "auto"])
def test_a_distributional_run_with_lap_resumes_exactly(tmp_path, value_range):
    straight, dm_a = _fit(tmp_path / "a", 120, value_range=value_range)
    _fit(tmp_path / "b", 60, every=60, value_range=value_range)  # 60 + 20 warm-up env steps: an episode's end
    resumed, dm_b = _fit(tmp_path / "c", 120, ckpt_path=tmp_path / "b" / "s60.ckpt", value_range=value_range)
    sa, sb = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert torch.equal(dm_a.buffer.sampler.priority, dm_b.buffer.sampler.priority)
    assert sa["critic.weights.2"].shape == (2, 16, 21)  # the last layer outputs the bins' logits
    if value_range == "auto":  # the range is in the checkpoint the resume started from: reward 1 at gamma 0.99
        saved = torch.load(tmp_path / "b" / "s60.ckpt", weights_only=False)["state_dict"]
        assert torch.equal(saved["critic.head.bounds"], saved["critic_target.head.bounds"])
        assert saved["critic.head.bounds"].tolist() == pytest.approx([-1.0, 100.0])  # 1 / (1 - 0.99) in float32
