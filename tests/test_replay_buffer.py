import numpy as np
import pytest
import torch

from td3_lightning.replay import ReplayBuffer


def fill(buf: ReplayBuffer, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        buf.add(np.full(buf.obs_shape, i), np.full(buf.action_dim, i), float(i), np.full(buf.obs_shape, i + 1),
                i % 7 == 0)


def test_wraps_around_and_overwrites_the_oldest():
    buf = ReplayBuffer(5, (2,), 1)
    fill(buf, 7)  # values 0..6; 0 and 1 are overwritten by 5 and 6
    assert len(buf) == 5 and buf.pos == 2
    assert sorted(buf.reward.tolist()) == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert buf.obs[0].tolist() == [5.0, 5.0] and buf.next_obs[1].tolist() == [7.0, 7.0]
    # only value 0 was terminal, and it was overwritten
    assert buf.terminated.tolist() == [False, False, False, False, False]
    fill(buf, 1, start=7)  # 7 % 7 == 0: terminated, written at slot 2
    assert buf.terminated[2].item() is True and buf.reward[2].item() == 7.0


def test_samples_only_filled_slots():
    buf = ReplayBuffer(1000, (3,), 2)
    fill(buf, 10, start=100)
    gen = torch.Generator().manual_seed(0)
    batch = buf.sample(4096, gen)
    assert set(batch["reward"].tolist()) == {float(i) for i in range(100, 110)}
    assert batch["obs"].shape == (4096, 3) and batch["action"].shape == (4096, 2)
    assert batch["reward"].shape == (4096,) and batch["terminated"].dtype == torch.bool
    # each row is one coherent transition
    assert torch.equal(batch["next_obs"][:, 0], batch["obs"][:, 0] + 1)
    assert torch.equal(batch["action"][:, 0], batch["reward"])


def test_sampling_from_empty_buffer_raises():
    with pytest.raises(RuntimeError, match="empty"):
        ReplayBuffer(4, (1,), 1).sample(2)


def test_observation_dtype_is_kept():
    buf = ReplayBuffer(8, (4, 4, 3), 1, obs_dtype=np.uint8)
    assert buf.obs.dtype == torch.uint8 and buf.next_obs.dtype == torch.uint8
    frame = np.full((4, 4, 3), 255, dtype=np.uint8)
    buf.add(frame, [0.5], 1.0, frame, False)
    assert buf.obs[0].max().item() == 255
    # 2 frames of 48 bytes + 1 float action + float reward + bool terminated
    assert buf.bytes_per_transition == 2 * 48 + 4 + 4 + 1


def test_state_round_trip_is_exact():
    buf = ReplayBuffer(6, (2,), 1)
    fill(buf, 9)
    state = buf.state_dict()
    other = ReplayBuffer(6, (2,), 1)
    other.load_state_dict(state)
    assert (other.pos, other.size) == (buf.pos, buf.size)
    for f in ("obs", "action", "reward", "next_obs", "terminated"):
        assert torch.equal(getattr(other, f), getattr(buf, f)), f
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(buf.sample(32, g1)["obs"], other.sample(32, g2)["obs"])


def test_state_of_partly_filled_buffer_holds_only_filled_slots():
    buf = ReplayBuffer(10_000, (2,), 1)
    fill(buf, 3)
    state = buf.state_dict()
    assert state["obs"].shape == (3, 2)
    assert state["obs"].untyped_storage().nbytes() == 3 * 2 * 4  # not the preallocated 10k rows


def test_load_refuses_other_capacity_and_shape():
    buf = ReplayBuffer(6, (2,), 1)
    fill(buf, 2)
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(7, (2,), 1).load_state_dict(buf.state_dict())
    with pytest.raises(ValueError, match="shape"):
        ReplayBuffer(6, (3,), 1).load_state_dict(buf.state_dict())


def test_add_batch_equals_adding_one_by_one_across_the_wrap():
    one, many = ReplayBuffer(5, (2,), 1), ReplayBuffer(5, (2,), 1)
    fill(one, 3)
    fill(many, 3)
    obs = np.arange(8, dtype=np.float32).reshape(4, 2)
    act, rew, nxt, term = obs[:, :1] * 2, obs[:, 0] * 3, obs + 1, np.array([False, True, False, True])
    for i in range(4):
        one.add(obs[i], act[i], rew[i], nxt[i], term[i])
    many.add_batch(obs, act, rew, nxt, term)
    assert (many.pos, many.size) == (one.pos, one.size) == (2, 5)
    for f in ("obs", "action", "reward", "next_obs", "terminated"):
        assert torch.equal(getattr(one, f), getattr(many, f)), f


def test_cpu_writes_through_numpy_equal_the_indexed_torch_writes():
    """The CPU fast path (numpy views, contiguous rows) against the general indexed path, with
    float64 inputs cast to the float32 fields and a batch that wraps around the end."""
    rng = np.random.default_rng(0)
    fast, indexed = ReplayBuffer(7, (3,), 2), ReplayBuffer(7, (3,), 2)
    indexed._host = None  # force the indexed torch writes
    for n in (1, 2, 3, 2, 4, 2):  # the 2 at pos 6 wraps (indexed path on both), the rest are contiguous
        batch = (rng.normal(size=(n, 3)), rng.normal(size=(n, 2)), rng.normal(size=n) * 1e3,
                 rng.normal(size=(n, 3)), rng.random(n) < 0.5)
        fast.add_batch(*batch)
        indexed.add_batch(*batch)
        assert (fast.pos, fast.size) == (indexed.pos, indexed.size)
    for f in ("obs", "action", "reward", "next_obs", "terminated"):
        assert torch.equal(getattr(fast, f), getattr(indexed, f)), f
    assert fast.reward.dtype == torch.float32 and fast.terminated.dtype == torch.bool
    assert fast.terminated.any() and not fast.terminated.all()
