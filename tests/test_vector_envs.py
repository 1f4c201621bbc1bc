"""Several training envs in one vector env: step accounting and no transition across a reset."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from conftest import quiet_trainer

from td3_lightning import TD3, EnvLoop, ReplayDataModule
from td3_lightning.data import TRAIN_SEED_OFFSET


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


def test_bad_vector_options_are_refused():
    from td3_lightning.errors import UserInputError

    with pytest.raises(UserInputError, match="utd_ratio"):
        ReplayDataModule("td3test/Counting-v0", utd_ratio=0)
    with pytest.raises(UserInputError, match="vector_mode"):
        ReplayDataModule("td3test/Counting-v0", vector_mode="threads")
    with pytest.raises(UserInputError, match="num_envs"):
        ReplayDataModule("td3test/Counting-v0", num_envs=0)
