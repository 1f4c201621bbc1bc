"""n-step transitions (``data.n_step``): the replay's sums and the TD target, by hand."""

import numpy as np
import pytest
import torch

from td3_lightning.extensions.batch_transforms import NStepReturn
from td3_lightning.module import TD3
from td3_lightning.replay import ReplayBuffer


def one_env_buffer() -> ReplayBuffer:
    """Slots 0-7: an episode truncated after 4 steps, one terminated after 2, one still running."""
    buf = ReplayBuffer(100, (1,), 1, n_step=3)
    rows = [  # obs, reward, next_obs, terminated
        (0, 1, 1, False), (1, 2, 2, False), (2, 3, 3, False), (3, 4, 4, False),  # truncated at obs 4
        (10, 5, 11, False), (11, 6, 12, True),  # terminated
        (20, 7, 21, False), (21, 8, 22, False),  # the newest step
    ]
    for obs, reward, next_obs, terminated in rows:
        buf.add([obs], [obs], float(reward), [next_obs], terminated)
    return buf


def test_n_step_transitions_stop_at_episode_ends_and_at_the_newest_step():
    batch = one_env_buffer().gather_n_step(torch.arange(8))
    assert batch["reward"].tolist() == [
        [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 0], [5, 6, 0], [6, 0, 0], [7, 8, 0], [8, 0, 0],
    ]
    assert batch["horizon"].tolist() == [3, 3, 2, 1, 2, 1, 2, 1]
    assert batch["next_obs"][:, 0].tolist() == [3, 4, 4, 4, 12, 12, 22, 22]
    assert batch["terminated"].tolist() == [False, False, False, False, True, True, False, False]
    # the start of each transition is its own slot's
    assert batch["obs"][:, 0].tolist() == [0, 1, 2, 3, 10, 11, 20, 21]
    assert batch["action"][:, 0].tolist() == [0, 1, 2, 3, 10, 11, 20, 21]


def test_one_step_buffer_samples_what_it_always_did():
    buf = ReplayBuffer(100, (1,), 1)
    for i in range(5):
        buf.add([i], [i], float(i), [i + 1], False)
    batch = buf.sample(64, torch.Generator().manual_seed(0))
    assert "horizon" not in batch and batch["reward"].shape == (64,)
    assert torch.equal(batch["next_obs"][:, 0], batch["obs"][:, 0] + 1)


def test_n_step_follows_each_env_row_across_the_wrap():
    # two envs side by side; env 1's episode terminates at its 2nd step and restarts
    buf = ReplayBuffer(6, (1,), 1, n_step=2, num_streams=2)
    steps = [  # per vector step: (obs, reward, next_obs, terminated) of env 0 and env 1
        ((0, 1, 1, False), (100, 10, 101, False)),
        ((1, 2, 2, False), (101, 20, 102, True)),
        ((2, 3, 3, False), (200, 30, 201, False)),
        ((3, 4, 4, False), (201, 40, 202, False)),
        ((4, 5, 5, False), (202, 50, 203, False)),
    ]
    for rows in steps:
        obs, reward, next_obs, terminated = zip(*rows)
        buf.add_batch(np.array(obs)[:, None], np.array(obs)[:, None], reward, np.array(next_obs)[:, None], terminated)
    # capacity 6 keeps the last 3 vector steps; slot = row + 2 * step, wrapped
    order = torch.tensor([4, 5, 0, 1, 2, 3])  # steps 2, 3, 4 of env 0, env 1
    batch = buf.gather_n_step(order)
    assert batch["obs"][:, 0].tolist() == [2, 200, 3, 201, 4, 202]
    assert batch["reward"].tolist() == [[3, 4], [30, 40], [4, 5], [40, 50], [5, 0], [50, 0]]
    assert batch["horizon"].tolist() == [2, 2, 2, 2, 1, 1]
    assert batch["next_obs"][:, 0].tolist() == [4, 202, 5, 203, 5, 203]


def test_n_step_buffer_refuses_rows_of_fewer_envs():
    buf = ReplayBuffer(10, (1,), 1, n_step=3, num_streams=2)
    with pytest.raises(ValueError, match="add 2 rows at a time"):
        buf.add([0], [0], 0.0, [1], False)


def test_n_step_target_is_the_discounted_sum_plus_the_discounted_bootstrap():
    torch.manual_seed(0)
    m = TD3(obs_shape=[1], action_low=[-1.0], action_high=[1.0], hidden_dims=[8], gamma=0.5, policy_noise=0.0)
    batch = one_env_buffer().gather_n_step(torch.arange(8))
    s = batch["next_obs"]
    next_q = m.critic_target(s, m.actor_target(s)).min(dim=0).values
    r = batch["reward"]
    expected_sum = r[:, 0] + 0.5 * r[:, 1] + 0.25 * r[:, 2]
    assert expected_sum.tolist() == [2.75, 4.5, 5.0, 4.0, 8.0, 6.0, 11.0, 8.0]
    bootstrap = torch.tensor([0.125, 0.125, 0.25, 0.5, 0.0, 0.0, 0.25, 0.5])  # gamma^m, 0 once terminated
    target = m.td_target(NStepReturn(0.5)(batch), noise=torch.zeros(8, 1))
    assert torch.allclose(target, expected_sum + bootstrap * next_q)


def test_n_step_q_converges_to_the_infinite_horizon_value_through_truncation():
    """Reward 1 forever, truncated every 5 steps: Q -> 1 / (1 - gamma) = 5 with 3-step sums too.

    Sums that ran across the reset, or stopped there without bootstrapping, would miss it."""
    import lightning as L
    from conftest import quiet_trainer

    from td3_lightning.data import ReplayDataModule

    L.seed_everything(0)
    dm = ReplayDataModule("td3test/ConstantReward-v0", env_kwargs={"horizon": 5}, warmup_steps=200, batch_size=64,
                          buffer_size=5000, n_step=3)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], actor_lr=1e-3, critic_lr=3e-3,
                gamma=0.8, tau=0.05)
    quiet_trainer(max_steps=1500).fit(model, dm)
    with torch.no_grad():
        q = model.critic(torch.rand(512, 2) * 2 - 1, torch.rand(512, 1) * 2 - 1)
    assert abs(q.mean().item() - 5.0) < 0.35, q.mean().item()


def test_n_step_buffer_refuses_a_checkpoint_of_another_env_count():
    two = ReplayBuffer(10, (1,), 1, n_step=1, num_streams=2)
    two.add_batch([[0], [5]], [[0], [0]], [1.0, 2.0], [[1], [6]], [False, False])
    with pytest.raises(ValueError, match="set data.num_envs to 2"):
        ReplayBuffer(10, (1,), 1, n_step=3, num_streams=1).load_state_dict(two.state_dict())
    one_step = ReplayBuffer(10, (1,), 1)
    one_step.load_state_dict(two.state_dict())  # one-step sums follow no rows
    assert one_step.reward[:2].tolist() == [1.0, 2.0]


def test_n_step_above_the_envs_time_limit_is_warned_of_once_the_run_is_checked(tmp_path, monkeypatch):
    import warnings

    from td3_lightning.cli import main
    from td3_lightning.data import ReplayDataModule

    assert ReplayDataModule("Pendulum-v1", n_step=200).check_n_step() == ()  # 200-step episodes
    line = ("data.n_step 201 is above the 200 steps of Pendulum-v1's episodes: every return runs to its episode's "
            "end, and each replayed transition sums 201 stored steps; set data.n_step 200 or less (n-step returns "
            "take a few steps, e.g. 3)")
    assert ReplayDataModule("Pendulum-v1", n_step=201).check_n_step() == (line,)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["fit", "--config", "pendulum.yaml", "--data.n_step", "201", "--trainer.max_steps", "2",
              "--data.warmup_steps", "20", "--trainer.limit_val_batches", "0", "--model.hidden_dims", "[8]"])
    assert [str(w.message) for w in caught if "n_step" in str(w.message)] == [line]
