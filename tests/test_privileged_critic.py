"""The privileged (asymmetric) critic, DrQ random shifts and the state-prediction loss."""

from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import lightning as L
import numpy as np
import pytest
import torch
from conftest import quiet_trainer
from lightning.pytorch.callbacks import ModelCheckpoint

import td3_lightning
from td3_lightning import TD3, ReplayDataModule
from td3_lightning.envs.car_racing import CarRacingState
from td3_lightning.envs.car_racing_pixels import CarRacingPixels
from td3_lightning.errors import UserInputError
from td3_lightning.extensions.batch_transforms import random_shift
from td3_lightning.replay import FrameStackReplay, ReplayBuffer

PRIVILEGED_ENV = "PrivilegedCounting-v0"
SHIPPED = Path(td3_lightning.__file__).parent / "checkpoints" / "car_random_tracks.ckpt"


class PrivilegedCountingEnv(gym.Env):
    """The actor sees noise; the privileged observation is ``[t, seed % 1000, 1]``
    (the step within the episode and the episode's reset seed). 7-step episodes."""

    privileged_observation_space = gym.spaces.Box(-1e6, 1e6, (3,), np.float32)

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.t, self.seed_ = 0, 0

    def _out(self) -> tuple[np.ndarray, dict]:
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return obs, {"privileged_obs": np.array([self.t, self.seed_, 1.0], dtype=np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.seed_ = 0, (seed or 0) % 1000
        return self._out()

    def step(self, action):
        self.t += 1
        obs, info = self._out()
        return obs, 1.0, False, self.t >= 7, info


gym.register(PRIVILEGED_ENV, entry_point=PrivilegedCountingEnv)


def _fit(root, max_steps: int, ckpt_path=None, every: int | None = None, num_envs: int = 1):
    L.seed_everything(0)
    dm = ReplayDataModule(PRIVILEGED_ENV, warmup_steps=14, batch_size=8, buffer_size=50, privileged_critic=True,
                          num_envs=num_envs, vector_mode="sync")
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, critic_obs_shape=dm.critic_obs_shape, hidden_dims=[16])
    callbacks = []
    if every is not None:
        callbacks.append(ModelCheckpoint(dirpath=root, every_n_train_steps=every, save_top_k=-1, filename="s{step}",
                                         auto_insert_metric_name=False))
    trainer = quiet_trainer(max_steps=max_steps, callbacks=callbacks, enable_checkpointing=every is not None)
    trainer.fit(model, dm, ckpt_path=ckpt_path)
    return model, dm


def test_pixels_env_offers_the_state_vector_as_privileged_obs():
    kwargs = dict(action_repeat=2, action_mode="steer_throttle")
    pixels, state = CarRacingPixels(resize=40, **kwargs), CarRacingState(**kwargs)
    assert pixels.privileged_observation_space == state.observation_space
    _, info = pixels.reset(seed=5)
    expected, _ = state.reset(seed=5)
    assert np.array_equal(info["privileged_obs"], expected)
    rng = np.random.default_rng(0)
    for _ in range(30):
        action = rng.uniform(-1, 1, 2).astype(np.float32)
        _, _, _, _, info = pixels.step(action)
        expected, _, _, _, state_info = state.step(action)
        assert np.array_equal(info["privileged_obs"], expected)
    assert info["tiles_missed"] == state_info["tiles_missed"]  # the missed-tile book-keeping sees the track position


@pytest.mark.parametrize("kind", ["whole", "frames"])
def test_replay_returns_the_privileged_obs_it_was_given_and_round_trips(kind):
    rng = np.random.default_rng(0)
    if kind == "whole":
        make = lambda: ReplayBuffer(20, (3,), 1, critic_obs_shape=(5,))  # noqa: E731
        obs = rng.normal(size=(30, 3)).astype(np.float32)
    else:
        make = lambda: FrameStackReplay(20, (2, 36, 36), 1, frame_stack=2, critic_obs_shape=(5,))  # noqa: E731
        obs = rng.integers(0, 255, (30, 2, 36, 36), dtype=np.uint8)
    buffer = make()
    critic = rng.normal(size=(30, 5)).astype(np.float32)
    for i in range(29):  # wraps the 20 slots
        buffer.add(obs[i], [0.0], 0.0, obs[i + 1], False, critic[i], critic[i + 1])
    slots = torch.arange(20)
    batch = buffer.gather(slots)
    # slot s holds the transition i with i % 20 == s among the last 20 added (9..28)
    order = [i for i in range(9, 29)]
    order = sorted(order, key=lambda i: i % 20)
    assert torch.equal(batch["critic_obs"], torch.from_numpy(critic[order]))
    assert torch.equal(batch["next_critic_obs"], torch.from_numpy(critic[[i + 1 for i in order]]))
    restored = make()
    restored.load_state_dict(buffer.state_dict())
    for key, value in restored.gather(slots).items():
        assert torch.equal(value, batch[key]), key
    with pytest.raises(ValueError, match="critic_obs_shape"):
        buffer.add(obs[0], [0.0], 0.0, obs[1], False)  # a privileged buffer needs the privileged obs
    plain = ReplayBuffer(20, (3,), 1) if kind == "whole" else FrameStackReplay(20, (2, 36, 36), 1, frame_stack=2)
    with pytest.raises(ValueError, match="data.privileged_critic"):
        plain.load_state_dict(buffer.state_dict())


@pytest.mark.parametrize("num_envs", [1, 2])
def test_env_loop_stores_every_transitions_privileged_obs(num_envs):
    _, dm = _fit(None, 30, num_envs=num_envs)
    n = dm.buffer.size
    critic, next_critic = dm.buffer.critic_obs[:n], dm.buffer.next_critic_obs[:n]
    assert n == 44 and torch.equal(next_critic[:, 0], critic[:, 0] + 1)  # [t] -> [t + 1] in every transition
    assert torch.equal(next_critic[:, 1], critic[:, 1])  # never across a reset: the same episode's seed
    assert set(critic[:, 0].tolist()) == set(range(7)) and torch.all(critic[:, 2] == 1)
    assert torch.equal(dm.buffer.terminated[:n], torch.zeros(n, dtype=torch.bool))


def test_privileged_target_and_losses_read_the_critic_obs():
    torch.manual_seed(0)
    model = TD3([2], [-1.0], [1.0], critic_obs_shape=[3], hidden_dims=[8], gamma=0.9, policy_noise=0.0)
    assert model.critic.weights[0].shape == (2, 3 + 1, 8) and model.actor.net[0].in_features == 2
    batch = {"obs": torch.randn(4, 2), "next_obs": torch.randn(4, 2), "action": torch.rand(4, 1),
             "reward": torch.randn(4), "terminated": torch.tensor([False, True, False, False]),
             "critic_obs": torch.randn(4, 3), "next_critic_obs": torch.randn(4, 3)}
    next_action = model.actor_target(batch["next_obs"])
    next_q = model.critic_target(batch["next_critic_obs"], next_action).min(0).values
    expected = batch["reward"] + 0.9 * (1 - batch["terminated"].float()) * next_q
    assert torch.allclose(model.td_target(batch, torch.zeros(4, 1)), expected)
    q = model.critic(batch["critic_obs"], batch["action"])
    loss, _, _ = model.critic_loss(batch, torch.zeros(4, 1))
    assert torch.allclose(loss, (q - expected).pow(2).mean(1).sum())
    actor_loss = model.actor_loss(batch)
    assert torch.allclose(actor_loss, -model.critic.q1(batch["critic_obs"], model.actor(batch["obs"])).mean())


def test_pixel_actor_keeps_its_own_encoder_and_the_state_head_adds_its_error():
    torch.manual_seed(0)
    model = TD3([4, 36, 36], [-1.0, -1.0], [1.0, 1.0], critic_obs_shape=[5], hidden_dims=[8],
                encoder_features=6, state_prediction=0.5)
    assert model.critic.encoder is None and model.actor.encoder is not None and not model.actor.detach_encoder
    batch = {"obs": torch.randint(0, 255, (3, 4, 36, 36), dtype=torch.uint8), "critic_obs": torch.randn(3, 5)}
    features = model.actor.features(batch["obs"])
    q = model.critic.q1(batch["critic_obs"], model.actor.act(features))
    error = (model.extensions.actor_terms["state_prediction"].head(features) - batch["critic_obs"]).pow(2).mean()
    assert torch.allclose(model.actor_loss(batch), -q.mean() + 0.5 * error)
    assert torch.allclose(model.stats.means()["train/state_prediction_loss"], error)
    assert "train/state_prediction_loss" not in model.stats.means()  # each log starts afresh
    trained = {id(p) for g in model.configure_optimizers()[1].param_groups for p in g["params"]}
    # the actor's optimizer trains the head
    assert {id(p) for p in model.extensions.actor_terms["state_prediction"].head.parameters()} <= trained
    assert {id(p) for p in model.actor.encoder.parameters()} <= trained
    assert not any(k.startswith("actor_terms") for k in model.actor.state_dict())  # not part of the policy


def test_random_shift_crops_the_edge_padded_image_at_an_offset_within_the_pad():
    images = torch.randint(0, 255, (6, 2, 10, 12), dtype=torch.uint8)
    assert torch.equal(random_shift(images, 0), images)
    shifted = random_shift(images, 2, torch.Generator().manual_seed(0))
    assert shifted.dtype == torch.uint8 and shifted.shape == images.shape
    padded = torch.nn.functional.pad(images.float(), (2, 2, 2, 2), mode="replicate").to(torch.uint8)
    offsets = []
    for img, pad in zip(shifted, padded):
        found = [(dy, dx) for dy in range(5) for dx in range(5) if torch.equal(pad[:, dy:dy + 10, dx:dx + 12], img)]
        assert found, "every image is a crop of its padded self"
        offsets.append(found[0])
    assert len(set(offsets)) > 1  # each image draws its own offset


def test_privileged_fit_resumes_exactly(tmp_path):
    # 14 warm-up + 21 steps = 5 episodes of 7: the checkpoint is at an episode end; 50 slots wrap by 42
    model_a, dm_a = _fit(tmp_path / "a", 42)
    _fit(tmp_path / "b", 21, every=21)
    model_b, dm_b = _fit(tmp_path / "b2", 42, ckpt_path=tmp_path / "b" / "s21.ckpt")
    assert dm_b.buffer.size == 50 and model_b.num_critic_updates == 42
    for name, tensor in model_a.state_dict().items():
        assert torch.equal(tensor, model_b.state_dict()[name]), name
    for field in ("obs", "critic_obs", "next_critic_obs", "reward"):
        assert torch.equal(getattr(dm_a.buffer, field), getattr(dm_b.buffer, field)), field


def test_privileged_critic_needs_an_env_that_offers_one():
    with pytest.raises(UserInputError, match="offers none: set data.privileged_critic false"):
        ReplayDataModule("Pendulum-v1", privileged_critic=True)


def test_pixel_run_with_a_privileged_critic_exports_an_actor_that_takes_frames_only(tmp_path, monkeypatch):
    from td3_lightning.cli import main
    from td3_lightning.export import export_torchscript

    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "car_pixels.yaml", "--data.env_kwargs", "{resize: 40, action_repeat: 4, "
          "max_episode_frames: 120, action_mode: steer_throttle}", "--data.warmup_steps", "40",
          "--data.batch_size", "8",
          "--data.buffer_size", "200", "--data.eval_episodes", "1", "--trainer.val_check_interval", "16",
          "--model.hidden_dims", "[16,16]", "--learning_curve.filename", "", "--trainer.enable_progress_bar", "false",
          "--model.random_shift", "2", "--trainer.max_steps", "16"])
    last = tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt"
    ckpt = torch.load(last, weights_only=False)
    assert ckpt["hyper_parameters"]["critic_obs_shape"] == [43]
    assert ckpt["ReplayDataModule"]["replay"]["critic_obs"].shape == (56, 43)  # 40 warm-up + 16 steps
    model = TD3.load_from_checkpoint(last, map_location="cpu")
    scripted = torch.jit.load(str(export_torchscript(last, tmp_path / "actor.pt")))
    frames = torch.randint(0, 255, (3, 4, 40, 40), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.allclose(scripted(frames.float()), model.actor.eval()(frames), atol=1e-6)
    assert not any("actor_terms" in name for name, _ in scripted.named_parameters())
    ort = pytest.importorskip("onnxruntime")
    from td3_lightning.export import export_onnx

    session = ort.InferenceSession(str(export_onnx(last, tmp_path / "actor.onnx")), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    assert inp.name == "observation" and inp.shape[1:] == [4, 40, 40]  # the frames, nothing of the state
    (action,) = session.run(None, {"observation": frames.float().numpy()})
    with torch.no_grad():
        assert torch.allclose(torch.from_numpy(action), model.actor(frames), atol=1e-5)


def _constant_teacher(path, action: float) -> None:
    """A checkpoint whose actor reads PrivilegedCountingEnv's privileged observation and always acts ``action``."""
    teacher = TD3([3], [-1.0], [1.0], hidden_dims=[4])
    with torch.no_grad():
        last = teacher.actor.net[-1]
        last.weight.zero_()
        last.bias.fill_(float(np.arctanh(action)))
    trainer = L.Trainer(logger=False, enable_checkpointing=False, accelerator="cpu", devices=1)
    trainer.strategy.connect(teacher)
    trainer.save_checkpoint(path, weights_only=True)


def test_teacher_term_is_the_squared_action_distance_in_half_ranges(tmp_path):
    from td3_lightning.extensions.teacher import load_teacher

    _constant_teacher(tmp_path / "t.ckpt", 0.5)
    torch.manual_seed(0)
    model = TD3([2], [-2.0], [2.0], critic_obs_shape=[3], hidden_dims=[8],
                teacher=str(tmp_path / "t.ckpt"), teacher_weight=3.0)
    with pytest.raises(UserInputError, match=r"acts in \[\[-1.0\], \[1.0\]\], this env in \[\[-2.0\], \[2.0\]\]"):
        load_teacher(str(tmp_path / "t.ckpt"), model)
    model = TD3([2], [-1.0], [1.0], critic_obs_shape=[3], hidden_dims=[8],
                teacher=str(tmp_path / "t.ckpt"), teacher_weight=3.0)
    model.extensions.actor_terms["teacher"].teacher = (load_teacher(model.hparams.teacher, model),)
    batch = {"obs": torch.randn(5, 2), "critic_obs": torch.randn(5, 3)}
    assert torch.allclose(model.extensions.actor_terms["teacher"].teacher[0](batch["critic_obs"]),
                          torch.full((5, 1), 0.5))
    actions = model.actor(batch["obs"])
    q = model.critic.q1(batch["critic_obs"], actions)
    assert torch.allclose(model.actor_loss(batch), -q.mean() + 3.0 * (actions - 0.5).pow(2).mean())
    model.actor_loss(batch)  # the terms are logged as means over the actor updates since the last log
    logged = model.stats.means()
    assert torch.allclose(logged["train/teacher_distance"], (actions - 0.5).pow(2).mean())
    assert not any("teacher" in name for name in model.state_dict())  # not saved with the student


def test_fitting_with_a_teacher_pulls_the_actor_to_the_teachers_actions(tmp_path):
    _constant_teacher(tmp_path / "t.ckpt", 0.6)
    for weight, near in ((0.0, False), (100.0, True)):
        L.seed_everything(0)
        dm = ReplayDataModule(PRIVILEGED_ENV, warmup_steps=14, batch_size=16, buffer_size=200, privileged_critic=True)
        model = TD3(dm.obs_shape, dm.action_low, dm.action_high, critic_obs_shape=dm.critic_obs_shape,
                    hidden_dims=[16], teacher=str(tmp_path / "t.ckpt"), teacher_weight=weight, policy_freq=1,
                    actor_lr=1e-2)
        quiet_trainer(max_steps=150).fit(model, dm)
        with torch.no_grad():
            acted = model.actor(torch.rand(64, 2) * 2 - 1)
        assert (acted.sub(0.6).abs().max() < 0.05) == near, (weight, acted.min(), acted.max())


@pytest.mark.parametrize("kwargs, message", [
    (dict(critic_obs_shape=[3], teacher_weight=-1.0), "model.teacher_weight must be >= 0"),
])
def test_teacher_options_out_of_range_get_one_line(kwargs, message):
    with pytest.raises(UserInputError, match=message):
        TD3([2], [-1.0], [1.0], teacher="t.ckpt", **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(obs_shape=[2], random_shift=2), r"model.random_shift shifts image observations, and these are vectors "
                                          r"of shape \(2,\)"),
    (dict(obs_shape=[2], critic_obs_shape=[3], state_prediction=1.0), "model.state_prediction trains the actor's CNN"),
    (dict(obs_shape=[3, 64, 64], state_prediction=1.0), "needs image observations and data.privileged_critic true"),
])
def test_image_only_options_on_observations_they_cannot_act_on_get_one_line(kwargs, message):
    from td3_lightning.extensions import check_extensions_act

    model = TD3(action_low=[-1.0], action_high=[1.0], **kwargs)  # a checkpoint that has one is still played
    with pytest.raises(UserInputError, match=message):
        check_extensions_act(model.hparams)  # a new run is refused
    for name in ("random_shift", "state_prediction"):  # off, the same observations are fine
        kwargs[name] = 0
    check_extensions_act(TD3(action_low=[-1.0], action_high=[1.0], **kwargs).hparams)


def test_a_student_without_a_privileged_critic_is_taught_on_its_own_observation(tmp_path):
    from td3_lightning.extensions.teacher import load_teacher

    _constant_teacher(tmp_path / "t.ckpt", -0.25)
    with pytest.raises(UserInputError, match=r"reads observations of shape \[3\], but the observation has shape \[2\]"):
        load_teacher(str(tmp_path / "t.ckpt"), TD3([2], [-1.0], [1.0], teacher=str(tmp_path / "t.ckpt")))
    with pytest.raises(UserInputError) as said:  # the pixel car with its privileged critic switched off
        load_teacher("td3_lightning/checkpoints/car_random_tracks.ckpt", TD3([4, 40, 40], [-1.0, -1.0], [1.0, 1.0]))
    assert str(said.value).endswith("but the observation has shape [4, 40, 40]; give the checkpoint of a policy "
                                    "trained on the observation's env (and env_kwargs), or set "
                                    "data.privileged_critic true for a teacher of the env's privileged observation "
                                    "(the car's state vector)")
    torch.manual_seed(0)
    model = TD3([3], [-1.0], [1.0], hidden_dims=[8], teacher=str(tmp_path / "t.ckpt"), teacher_weight=2.0)
    model.extensions.actor_terms["teacher"].teacher = (load_teacher(model.hparams.teacher, model),)
    batch = {"obs": torch.randn(5, 3)}
    actions = model.actor(batch["obs"])
    q = model.critic.q1(batch["obs"], actions)
    assert torch.allclose(model.actor_loss(batch), -q.mean() + 2.0 * (actions + 0.25).pow(2).mean())


def test_teacher_that_reads_another_observation_or_no_file_gets_one_line(tmp_path):
    from td3_lightning.extensions.teacher import load_teacher

    _constant_teacher(tmp_path / "t.ckpt", 0.5)
    model = TD3([2], [-1.0], [1.0], critic_obs_shape=[5], teacher=str(tmp_path / "t.ckpt"))
    with pytest.raises(UserInputError, match=r"reads observations of shape \[3\], but the privileged observation "
                                             r"has shape \[5\]"):
        load_teacher(model.hparams.teacher, model)
    with pytest.raises(UserInputError, match="model.teacher: checkpoint file not found: nowhere.ckpt"):
        load_teacher("nowhere.ckpt", model)


def test_a_teacher_named_relative_to_the_run_is_recorded_where_it_was_found(tmp_path, monkeypatch):
    """A new run records a relative ``model.teacher`` as an absolute path, so it resumes from any folder; a resume
    may name the same teacher file another way."""
    import shutil

    import yaml

    from td3_lightning.checkpointing import same_option as _same
    from td3_lightning.cli import TD3CLI, main

    tiny = ["--config", "pendulum.yaml", "--model.hidden_dims", "[16]", "--data.warmup_steps", "20",
            "--trainer.val_check_interval", "20", "--data.eval_episodes", "1", "--selection.episodes", "0"]
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.chdir(run)
    main(["fit", *tiny, "--trainer.max_steps", "20"])
    shutil.copy(run / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", run / "teacher.ckpt")
    main(["fit", *tiny, "--trainer.max_steps", "20", "--model.teacher", "teacher.ckpt"])
    config = yaml.safe_load((run / "lightning_logs" / "version_1" / "config.yaml").read_text())
    assert config["model"]["teacher"] == str(run / "teacher.ckpt")
    package_root = Path(td3_lightning.__file__).resolve().parent.parent
    monkeypatch.chdir(package_root)  # from the installed package's folder: only its own files stay relative
    for teacher, recorded in [("td3_lightning/checkpoints/car_random_tracks.ckpt", None),
                              (os.path.relpath(run / "teacher.ckpt"), str(run / "teacher.ckpt"))]:
        model = {"teacher": teacher}
        TD3CLI._record_teacher_where_found(model)
        assert model["teacher"] == (recorded or teacher)
    monkeypatch.chdir(tmp_path)  # elsewhere, naming the same teacher by another path
    shipped = Path(td3_lightning.__file__).parent / "checkpoints" / "car_random_tracks.ckpt"
    assert _same("teacher", "td3_lightning/checkpoints/car_random_tracks.ckpt", str(shipped))  # beside the package
    assert not _same("teacher", "td3_lightning/checkpoints/car_random_tracks.ckpt", "run/teacher.ckpt")
    main(["fit", *tiny, "--trainer.max_steps", "40", "--model.teacher", "run/teacher.ckpt",
          "--ckpt_path", "run/lightning_logs/version_1/checkpoints/last.ckpt"])
    resumed = torch.load(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt",
                         map_location="cpu", weights_only=False)
    assert resumed["global_step"] == 40 and resumed["hyper_parameters"]["teacher"] == str(run / "teacher.ckpt")
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    with pytest.warns(UserWarning, match=r"--model.teacher missing.ckpt \(the checkpoint's: .*\) is not used"):
        main(["test", *tiny, "--ckpt_path", str(last), "--data.test_episodes", "1", "--model.teacher", "missing.ckpt"])
    assert (tmp_path / "lightning_logs" / "version_1" / "test_results.json").is_file()  # played: no teacher read


def test_the_shipped_state_driver_teaches_the_pixel_actor_from_any_directory(tmp_path, monkeypatch):
    from td3_lightning.extensions.teacher import load_teacher

    monkeypatch.chdir(tmp_path)  # the relative path is found beside the installed package
    env = CarRacingPixels(action_mode="steer_throttle", resize=40)
    model = TD3([4, 40, 40], env.action_space.low.tolist(), env.action_space.high.tolist(),
                critic_obs_shape=[43], teacher="td3_lightning/checkpoints/car_random_tracks.ckpt")
    teacher = load_teacher(model.hparams.teacher, model)
    state, info = CarRacingState(action_mode="steer_throttle").reset(seed=3)
    shipped = TD3.load_from_checkpoint(SHIPPED, map_location="cpu")
    obs = torch.as_tensor(state)[None]
    assert torch.equal(teacher(obs), shipped.actor.eval()(obs).detach())
