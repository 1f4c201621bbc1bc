"""CarRacing from pixels: the env, the frame-sharing replay, the CNN encoder, end-to-end training."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from td3_lightning import TD3
from td3_lightning.cli import main
from td3_lightning.envs import register_envs
from td3_lightning.envs.car_racing_pixels import CarRacingPixels
from td3_lightning.replay import LAYOUT_KEYS, FrameStackReplay, ReplayBuffer

register_envs()
SMALL = {"resize": 40, "action_repeat": 4, "max_episode_frames": 200}


# ------------------------------------------------------------------ env
def test_unprocessed_frames_equal_car_racing_v3_frame_for_frame():
    v3 = gym.make("CarRacing-v3")
    pixels = CarRacingPixels(grayscale=False, frame_stack=1)
    obs_v3, _ = v3.reset(seed=3)
    obs, _ = pixels.reset(seed=3)
    assert obs.shape == (3, 96, 96) and obs.dtype == np.uint8
    assert np.array_equal(obs, obs_v3.transpose(2, 0, 1))
    rng = np.random.default_rng(0)
    for _ in range(120):
        action = np.array([rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(0, 0.2)], dtype=np.float32)
        obs_v3, r_v3, term_v3, trunc_v3, _ = v3.step(action)
        obs, r, term, trunc, _ = pixels.step(action)
        assert np.array_equal(obs, obs_v3.transpose(2, 0, 1)) and r == r_v3 and (term, trunc) == (term_v3, trunc_v3)


def test_grayscale_crop_resize_and_stack():
    env = CarRacingPixels(grayscale=True, crop_bottom=12, resize=48, frame_stack=3, action_repeat=2)
    assert env.observation_space.shape == (3, 48, 48) and env.observation_space.dtype == np.uint8
    first, _ = env.reset(seed=0)
    assert first.shape == (3, 48, 48) and env.observation_space.contains(first)
    assert np.array_equal(first[0], first[1]) and np.array_equal(first[1], first[2])  # a reset repeats its frame
    prev = first
    for _ in range(30):
        obs, *_ = env.step(np.array([0.0, 0.6, 0.0], dtype=np.float32))
        assert np.array_equal(obs[:2], prev[1:])  # oldest first: the stack shifts by one frame per step
        prev = obs
    assert not np.array_equal(prev[2], first[2])  # the car moved
    uncropped = CarRacingPixels(grayscale=True, crop_bottom=0, frame_stack=1)
    assert uncropped.observation_space.shape == (1, 96, 96)
    with pytest.raises(ValueError, match="frame_stack must be an integer >= 1"):
        CarRacingPixels(frame_stack=0)


# ------------------------------------------------------------------ replay
def _drive(env: gym.Env, steps: int, seed: int, end_every: int = 0):
    """(obs, action, reward, next_obs, terminated) of a drive with resets, as the env loop sees them."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for t in range(steps):
        action = np.array([rng.uniform(-1, 1), 0.5, 0.0], dtype=np.float32)
        next_obs, reward, term, trunc, _ = env.step(action)
        out.append((obs, action, reward, next_obs, term))
        obs = next_obs
        if term or trunc or (end_every and t % end_every == end_every - 1):
            obs, _ = env.reset(seed=seed + t + 1)
    return out


@pytest.fixture(scope="module")
def drives():
    env = CarRacingPixels(**SMALL)  # 200 frames = 50 steps per episode, then truncated
    return [_drive(env, 160, seed=s, end_every=37 if s else 0) for s in (0, 1)]


def test_frame_replay_returns_exactly_what_was_added_across_resets_and_envs(drives):
    a, b = drives
    buf = FrameStackReplay(1000, a[0][0].shape, 3, frame_stack=4, num_streams=2)
    for ta, tb in zip(a, b):  # two envs side by side, one row each
        buf.add_batch(*[np.stack([x, y]) for x, y in zip(ta, tb)])
    added = [t for pair in zip(a, b) for t in pair]
    assert len(buf) == len(added) == 320
    batch = buf.gather(torch.arange(320))
    for i, (obs, action, reward, next_obs, term) in enumerate(added):
        assert np.array_equal(batch["obs"][i].numpy(), obs) and np.array_equal(batch["next_obs"][i].numpy(), next_obs)
        assert np.allclose(batch["action"][i].numpy(), action) and batch["reward"][i].item() == np.float32(reward)
        assert bool(batch["terminated"][i]) == term
    # one new frame per transition, plus one per episode start (a reset's 4 copies share one frame)
    episodes = 4 + 1 + 5  # env 0: truncated every 50 steps; env 1: also ended every 37 steps
    assert buf.frames_written <= 320 + 2 * episodes
    frame = 40 * 40
    ids_action_reward_flag = 2 * 4 * 8 + 8 + 3 * 4 + 4 + 1
    assert buf.bytes_per_transition == buf.frame_capacity * frame / 1000 + ids_action_reward_flag
    assert buf.bytes_per_transition < 1.3 * frame + 100 < 2 * 4 * frame / 5  # stored whole: 2 x 4 frames


def test_frame_replay_n_step_transitions_equal_those_of_whole_observations(drives):
    a, b = drives
    frames = FrameStackReplay(1000, a[0][0].shape, 3, frame_stack=4, num_streams=2, n_step=3)
    whole = ReplayBuffer(1000, a[0][0].shape, 3, obs_dtype=np.uint8, n_step=3, num_streams=2)
    for ta, tb in zip(a, b):
        rows = [np.stack([x, y]) for x, y in zip(ta, tb)]
        frames.add_batch(*rows)
        whole.add_batch(*rows)
    got, want = frames.gather_n_step(torch.arange(320)), whole.gather_n_step(torch.arange(320))
    assert set(got) == set(want) == {"obs", "action", "reward", "next_obs", "terminated", "horizon"}
    for key in want:
        assert torch.equal(got[key], want[key]), key
    # every reset (env 1 every 37 steps, both envs every 50) cuts the transitions before it short
    assert 0 < int((want["horizon"] < 3).sum()) < 320 and want["reward"].shape == (320, 3)


def test_frame_replay_drops_the_oldest_and_samples_only_live_transitions(drives):
    a, _ = drives
    buf = FrameStackReplay(50, a[0][0].shape, 3, frame_stack=4)
    for t in a:
        buf.add_batch(*[np.asarray(x)[None] for x in t])
    assert len(buf) == 50 and buf.added == 160
    live = a[-50:]
    batch = buf.sample(500, generator=torch.Generator().manual_seed(0))
    seen = {arr.numpy().tobytes() for arr in batch["next_obs"]}
    expected = {t[3].tobytes() for t in live}
    assert seen <= expected and len(seen) > 40  # only the newest 50 transitions, and nearly all of them


def test_frame_replay_state_dict_round_trip(drives):
    a, _ = drives
    buf = FrameStackReplay(100, a[0][0].shape, 3, frame_stack=4)
    for t in a[:130]:
        buf.add_batch(*[np.asarray(x)[None] for x in t])
    other = FrameStackReplay(100, a[0][0].shape, 3, frame_stack=4)
    other.load_state_dict(buf.state_dict())
    for t in a[130:]:  # both continue the same episode: sharing state came along
        buf.add_batch(*[np.asarray(x)[None] for x in t])
        other.add_batch(*[np.asarray(x)[None] for x in t])
    assert other.frames_written == buf.frames_written
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    s1, s2 = buf.sample(64, g1), other.sample(64, g2)
    assert all(torch.equal(s1[k], s2[k]) for k in s1)
    with pytest.raises(ValueError, match="capacity mismatch"):
        FrameStackReplay(90, a[0][0].shape, 3, frame_stack=4).load_state_dict(buf.state_dict())
    two = FrameStackReplay(100, a[0][0].shape, 3, frame_stack=4, num_streams=2)  # a frame ring for 2 envs
    with pytest.raises(ValueError, match=r"frame_capacity mismatch: .*; set data.buffer_size to 100 and "
                                         r"data.num_envs 1$"):
        two.check_layout({k: v for k, v in buf.state_dict().items() if k in LAYOUT_KEYS})
    # either kind of buffer refuses the other's state in one line, whichever way round
    with pytest.raises(ValueError, match="resume with the data.frame_stack the checkpoint was trained with"):
        ReplayBuffer(100, a[0][0].shape, 3).load_state_dict(buf.state_dict())
    flat = ReplayBuffer(100, a[0][0].shape, 3)
    with pytest.raises(ValueError, match="resume with the data.frame_stack the checkpoint was trained with"):
        FrameStackReplay(100, a[0][0].shape, 3, frame_stack=4).load_state_dict(flat.state_dict())


# ------------------------------------------------------------------ networks
def test_shared_encoder_is_trained_by_the_critic_only():
    model = TD3([4, 40, 40], [-1.0, -1.0], [1.0, 1.0], hidden_dims=[16, 16])
    assert model.actor.encoder is model.critic.encoder
    obs = torch.randint(0, 256, (8, 4, 40, 40), dtype=torch.uint8)
    assert model.actor(obs).shape == (8, 2)
    encoder = [p for p in model.critic.encoder.parameters()]
    actor_only = [p for g in model.configure_optimizers()[1].param_groups for p in g["params"]]
    assert all(all(p is not q for q in encoder) for p in actor_only)
    model.actor_loss({"obs": obs}).backward()
    assert all(p.grad is None for p in encoder)  # the actor's loss does not reach the encoder
    assert all(p.grad is not None for p in actor_only)
    separate = TD3([4, 40, 40], [-1.0], [1.0], hidden_dims=[16, 16], shared_encoder=False)
    assert separate.actor.encoder is not separate.critic.encoder


def test_images_too_small_for_the_encoder_are_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--data.env_id", "CarRacingPixels-v0", "--data.env_kwargs", "{resize: 24}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: images of [24, 24] pixels are too small for the CNN encoder: it needs at least 36x36 "
        "(set the env's resize option higher)"
    )


# ------------------------------------------------------------------ end to end
def test_pixel_training_runs_end_to_end_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["--config", "car_pixels.yaml", "--data.env_kwargs",
            "{resize: 40, action_repeat: 4, max_episode_frames: 200, "
            "action_mode: steer_throttle}", "--data.warmup_steps", "60", "--data.batch_size", "8",
            "--data.buffer_size", "400", "--data.eval_episodes", "1", "--trainer.val_check_interval", "20",
            "--model.hidden_dims", "[16,16]", "--learning_curve.filename", "", "--trainer.enable_progress_bar", "false",
            "--data.num_envs", "2", "--data.vector_mode", "sync"]
    main(["fit", *args, "--trainer.max_steps", "40"])
    last = tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt"
    ckpt = torch.load(last, weights_only=False)
    replay = ckpt["ReplayDataModule"]["replay"]
    assert ckpt["global_step"] == 40 and replay["kind"] == "frame_stack" and replay["size"] == 100
    assert replay["frames"].shape[1:] == (1, 40, 40) and replay["frames"].shape[0] < 110  # ~one frame each
    main(["fit", *args, "--trainer.max_steps", "50", "--ckpt_path", str(last)])
    resumed = torch.load(tmp_path / "lightning_logs/version_1/checkpoints/last.ckpt", weights_only=False)
    assert resumed["global_step"] == 50 and resumed["ReplayDataModule"]["replay"]["size"] == 110


def test_pixels_env_takes_the_state_envs_training_aids():
    env = CarRacingPixels(resize=40, max_stall_frames=20, missed_tile_penalty=10.0)
    env.reset(seed=0)
    for _ in range(60):
        _, r, term, _, info = env.step(np.zeros(3, dtype=np.float32))
        if term:
            break
    assert term and info["stall_terminated"] and r == pytest.approx(-10.1)
    assert info["privileged_obs"].shape == (43,)
