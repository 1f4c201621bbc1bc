"""Several training envs in one vector env: step accounting and no transition across a reset."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from conftest import quiet_trainer

from td3_lightning import TD3, EnvLoop, ReplayDataModule
from td3_lightning.data import TRAIN_SEED_OFFSET, transitions_due


def fit(max_steps: int, **data_kwargs):
    L.seed_everything(0)
    args = dict(warmup_steps=12, batch_size=8, buffer_size=10_000)
    args.update(data_kwargs)
    dm = ReplayDataModule("td3test/Counting-v0", **args)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8])
    loop = EnvLoop()
    trainer = quiet_trainer(max_steps=max_steps, callbacks=[loop])
    trainer.fit(model, dm)
    return trainer, model, dm, loop


@pytest.mark.parametrize(
    "num_envs, utd_ratio, vector_mode, transitions",
    [
        (1, 1.0, "sync", 40),  # one env step per update
        (1, 0.5, "sync", 80),  # two env steps per update
        (4, 1.0, "async", 40),  # one vector step every 4 updates
        (4, 0.25, "async", 160),  # one vector step per update
        (3, 1.0, "sync", 42),  # 14 vector steps of 3 keep up with 40 updates
    ],
)
def test_updates_and_transitions_follow_the_utd_ratio(num_envs, utd_ratio, vector_mode, transitions):
    trainer, model, dm, loop = fit(40, num_envs=num_envs, utd_ratio=utd_ratio, vector_mode=vector_mode)
    assert trainer.global_step == 40 and model.num_critic_updates == 40  # max_steps counts updates
    assert loop.train_transitions == transitions
    warmup = -(-12 // num_envs) * num_envs  # the warm-up fills whole vector steps
    assert loop.env_steps == len(dm.buffer) == warmup + transitions
    assert dm.transitions_after(40) == len(dm.buffer)  # what the fit's disk check counts on


@pytest.mark.parametrize("steps, utd_ratio, due", [(21, 0.7, 30), (40, 0.25, 160), (7, 2.0, 4), (0, 0.5, 0)])
def test_transitions_due_is_exact_where_floats_are_not(steps, utd_ratio, due):
    assert transitions_due(steps, utd_ratio) == due  # 21 / 0.7 is 30.000000000000004 in floats


@pytest.mark.parametrize("vector_mode", ["sync", "async"])
def test_no_stored_transition_crosses_an_episode_boundary(vector_mode):
    _, _, dm, loop = fit(60, num_envs=4, utd_ratio=0.25, vector_mode=vector_mode)
    n = len(dm.buffer)
    obs, nxt, term = dm.buffer.obs[:n], dm.buffer.next_obs[:n], dm.buffer.terminated[:n]
    assert torch.equal(nxt[:, 0], obs[:, 0] + 1)  # the next observation is the same episode's next step
    assert torch.equal(nxt[:, 1], obs[:, 1])  # ... of the same episode (seed)
    assert torch.equal(term, (nxt[:, 0] == 5) & (obs[:, 1] % 2 == 0))  # only real terminations are terminal
    seeds = obs[:, 1].unique()
    # every episode got its own seed (consecutive ones, from the training range); 5 or 7 steps each
    assert len(seeds) == loop.episodes_started and len(seeds) >= n // 7
    assert loop.base_seed >= TRAIN_SEED_OFFSET


@pytest.mark.parametrize("num_envs, vector_mode", [(1, "sync"), (3, "sync"), (3, "async")])
def test_every_training_reset_gets_the_env_steps_collected_before_it(num_envs, vector_mode):
    L.seed_everything(0)
    dm = ReplayDataModule("td3test/EnvSteps-v0", warmup_steps=12, batch_size=8, num_envs=num_envs,
                          vector_mode=vector_mode)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8])
    quiet_trainer(max_steps=45, callbacks=[EnvLoop()]).fit(model, dm)
    n = len(dm.buffer)
    obs = dm.buffer.obs[:n]
    first = torch.nonzero(obs[:, 0] == 0).flatten()  # the first step of every episode
    assert len(first) >= n // 7
    # slot i was written by vector step i // num_envs, after (i // num_envs) * num_envs transitions
    assert obs[first, 1].tolist() == ((first // num_envs) * num_envs).float().tolist()


def test_bad_vector_options_are_refused():
    from td3_lightning.errors import UserInputError

    with pytest.raises(UserInputError, match="utd_ratio"):
        ReplayDataModule("td3test/Counting-v0", utd_ratio=0)
    with pytest.raises(UserInputError, match="vector_mode"):
        ReplayDataModule("td3test/Counting-v0", vector_mode="threads")
    with pytest.raises(UserInputError, match="num_envs"):
        ReplayDataModule("td3test/Counting-v0", num_envs=0)


def test_one_env_without_the_vector_wrapper_trains_exactly_as_inside_it(monkeypatch):
    """SingleEnv (one env, no gymnasium vector wrapper) against SyncVectorEnv of one env: the
    same transitions, episodes and weights. Counting-v0's observations carry the reset seed."""
    import gymnasium as gym

    from td3_lightning.envs import SingleEnv

    _, model_a, dm_a, loop_a = fit(60)
    assert isinstance(dm_a.make_train_env(), SingleEnv)  # the default for one env

    def vector_of_one(self):
        env_id, kwargs = self.env_id, dict(self.train_env_kwargs)
        return gym.vector.SyncVectorEnv([lambda: gym.make(env_id, **kwargs)],
                                        autoreset_mode=gym.vector.AutoresetMode.DISABLED)

    monkeypatch.setattr(ReplayDataModule, "make_train_env", vector_of_one)
    _, model_b, dm_b, loop_b = fit(60)
    assert (loop_a.env_steps, loop_a.episodes) == (loop_b.env_steps, loop_b.episodes) == (72, 12)
    for field in ("obs", "action", "reward", "next_obs", "terminated"):
        assert torch.equal(getattr(dm_a.buffer, field), getattr(dm_b.buffer, field)), field
    sa, sb = model_a.state_dict(), model_b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)


def test_single_env_returns_batched_copies_in_the_space_dtype():
    import gymnasium as gym
    import numpy as np

    from td3_lightning.envs import SingleEnv

    class SameArray(gym.Env):  # returns one float64 array, changed in place at every step
        observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
        action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

        def __init__(self):
            self.state = np.zeros(2)

        def reset(self, *, seed=None, options=None):
            self.state[:] = seed or 0
            return self.state, {}

        def step(self, action):
            self.state += action[0]
            return self.state, 0.5, False, True, {}

    env = SingleEnv(SameArray())
    obs, _ = env.reset(seed=[3])
    nxt, reward, terminated, truncated, _ = env.step(np.array([[1.0]], dtype=np.float32))
    assert obs.dtype == nxt.dtype == np.float32 and obs.shape == nxt.shape == (1, 2)
    assert obs.tolist() == [[3.0, 3.0]] and nxt.tolist() == [[4.0, 4.0]]  # obs not changed by the step
    assert reward.tolist() == [0.5] and terminated.tolist() == [False] and truncated.tolist() == [True]
    assert reward.dtype == np.float64 and terminated.dtype == truncated.dtype == np.bool_
