"""The Lightning loop: step semantics, the known-answer Q value, and resume."""

from __future__ import annotations

import os

import lightning as L
import pytest
import torch
from conftest import quiet_trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

import td3_lightning.stepping as stepping
from td3_lightning import TD3, EnvLoop, ReplayDataModule
from td3_lightning.extensions.resets import reset_networks
from td3_lightning.schedules import run_length

ENV = "td3test/ConstantReward-v0"


def small(dm: ReplayDataModule, **kw) -> TD3:
    args = dict(hidden_dims=[16, 16], actor_lr=1e-3, critic_lr=1e-3)
    args.update(kw)
    return TD3(dm.obs_shape, dm.action_low, dm.action_high, **args)


def test_max_steps_counts_env_steps_and_critic_updates():
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=50, batch_size=8, buffer_size=1000)
    model = small(dm, policy_freq=3)
    loop = EnvLoop()
    trainer = quiet_trainer(max_steps=100, callbacks=[loop])
    trainer.fit(model, dm)
    assert trainer.global_step == 100
    assert len(dm.buffer) == 150  # warm-up + exactly one env step per training step
    assert loop.env_steps == 150 and loop.episodes == 7  # 20-step episodes
    assert model.num_critic_updates == 100 and model.num_actor_updates == 33
    critic_opt, actor_opt = (o.optimizer if hasattr(o, "optimizer") else o for o in trainer.optimizers)
    assert all(int(s["step"]) == 100 for s in critic_opt.state.values())
    assert all(int(s["step"]) == 33 for s in actor_opt.state.values())
    assert dm.num_sampled == 100  # every batch sampled right before its step: none drawn ahead


def test_validation_and_checkpoints_count_env_steps(tmp_path):
    seen: list[int] = []

    class RecordValidation(Callback):
        def on_validation_start(self, trainer, pl_module):
            seen.append(trainer.global_step)

    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=1000, eval_episodes=2)
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=40, save_top_k=-1, filename="s{step}",
                           auto_insert_metric_name=False)
    trainer = quiet_trainer(
        max_steps=120, val_check_interval=50, callbacks=[ckpt, RecordValidation()], enable_checkpointing=True
    )
    trainer.fit(small(dm), dm)
    assert seen == [50, 100]
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == ["s120.ckpt", "s40.ckpt", "s80.ckpt"]
    assert trainer.callback_metrics["val/return"].item() == 20.0  # reward 1 for 20 steps
    # what checkpoint.monitor may name is what validation logs
    from td3_lightning.trainer_options import VALIDATION_METRICS

    assert sorted(k for k in trainer.callback_metrics if k.startswith("val/")) == sorted(VALIDATION_METRICS)


def test_q_converges_to_infinite_horizon_value_through_truncation():
    """Reward 1 forever, truncated every 5 steps: Q -> 1 / (1 - gamma) = 5.

    Treating truncation as terminal would give about 2.3 instead."""
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, env_kwargs={"horizon": 5}, warmup_steps=200, batch_size=64, buffer_size=5000)
    model = small(dm, gamma=0.8, tau=0.05, critic_lr=3e-3)
    quiet_trainer(max_steps=1500).fit(model, dm)
    obs = torch.rand(512, 2) * 2 - 1
    act = torch.rand(512, 1) * 2 - 1
    with torch.no_grad():
        q = model.critic(obs, act)
    assert abs(q.mean().item() - 5.0) < 0.35, q.mean().item()


def _fit(tmp_path, max_steps: int, ckpt_path=None, every: int | None = None, n_step: int = 1, **model_kw):
    L.seed_everything(123)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=16, buffer_size=70, n_step=n_step)
    model = small(dm, **model_kw)
    loop = EnvLoop()
    callbacks: list[Callback] = [loop]
    if every is not None:
        callbacks.append(ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=every, save_top_k=-1, filename="s{step}",
                                         auto_insert_metric_name=False))
    trainer = quiet_trainer(max_steps=max_steps, callbacks=callbacks, enable_checkpointing=every is not None)
    trainer.fit(model, dm, ckpt_path=ckpt_path)
    return trainer, model, dm, loop


def test_resume_restores_buffer_counters_and_continues_exactly(tmp_path):
    # A: 120 steps straight. B: 60 steps, stop, resume from its checkpoint to 120.
    # 60 + 20 warm-up = 80 env steps: an episode boundary; the 70-slot buffer has wrapped.
    _, model_a, dm_a, loop_a = _fit(tmp_path / "a", 120)
    _fit(tmp_path / "b", 60, every=60)
    trainer_b, model_b, dm_b, loop_b = _fit(tmp_path / "b2", 120, ckpt_path=tmp_path / "b" / "s60.ckpt")
    assert trainer_b.global_step == 120
    assert (loop_b.env_steps, loop_b.episodes) == (loop_a.env_steps, loop_a.episodes) == (140, 7)
    assert model_b.num_critic_updates == 120 and model_b.num_actor_updates == 60
    for name, tensor in model_a.state_dict().items():
        assert torch.equal(tensor, model_b.state_dict()[name]), name
    for field in ("obs", "action", "reward", "next_obs", "terminated"):
        assert torch.equal(getattr(dm_a.buffer, field), getattr(dm_b.buffer, field)), field
    assert (dm_a.buffer.pos, dm_a.buffer.size) == (dm_b.buffer.pos, dm_b.buffer.size)


def test_n_step_run_resumes_exactly_and_differs_from_one_step(tmp_path):
    _, model_a, _, _ = _fit(tmp_path / "a", 120, n_step=3)
    _fit(tmp_path / "b", 60, every=60, n_step=3)
    _, model_b, _, _ = _fit(tmp_path / "b2", 120, ckpt_path=tmp_path / "b" / "s60.ckpt", n_step=3)
    for name, tensor in model_a.state_dict().items():
        assert torch.equal(tensor, model_b.state_dict()[name]), name
    _, one_step, _, _ = _fit(tmp_path / "c", 120)
    assert not torch.equal(next(one_step.critic.parameters()), next(model_a.critic.parameters()))


def test_reset_steps_leave_the_run_alone_before_the_reset_and_resume_exactly_across_it(tmp_path):
    _, plain, _, _ = _fit(tmp_path / "p", 60)
    _, before, _, _ = _fit(tmp_path / "r", 60, reset_steps=[60])  # the reset would come before step 61
    for name, tensor in plain.state_dict().items():
        assert torch.equal(tensor, before.state_dict()[name]), name
    _, straight, dm_a, _ = _fit(tmp_path / "a", 120, reset_steps=[60])
    _fit(tmp_path / "b", 60, every=60, reset_steps=[60])
    _, resumed, dm_b, _ = _fit(tmp_path / "b2", 120, ckpt_path=tmp_path / "b" / "s60.ckpt", reset_steps=[60])
    for name, tensor in straight.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name
    assert torch.equal(dm_a.buffer.obs, dm_b.buffer.obs)
    _, no_reset, _, _ = _fit(tmp_path / "c", 120)
    assert not torch.equal(no_reset.actor.net[0].weight, straight.actor.net[0].weight)


def test_reset_networks_draws_fresh_weights_in_place_and_zeroes_adam(tmp_path):
    trainer, model, _, _ = _fit(tmp_path, 60)
    params = {name: p.data_ptr() for name, p in model.named_parameters()}
    optimizers = [o.optimizer for o in model.optimizers()]
    assert all(st["exp_avg_sq"].abs().sum() > 0 for o in optimizers for st in o.state.values())
    # the known answer: a new module built under the seed the module's own stream gives next
    stream = torch.Generator().manual_seed(0)
    stream.set_state(model.random_stream.get_state())
    seed = int(torch.randint(2**62, (1,), generator=stream).item())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = TD3(**{k: v for k, v in model.hparams.items() if not k.startswith("_")})
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    reset_networks(model)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, fresh.state_dict()[name]), name  # targets included: copies of the fresh networks
    assert not torch.equal(trained["actor.net.0.weight"], model.actor.net[0].weight)
    for name, p in model.named_parameters():
        assert p.data_ptr() == params[name], name  # the same tensors: optimizers and compiled steps keep them
    for o in optimizers:
        for st in o.state.values():
            assert all(float(v.abs().sum()) == 0.0 for v in st.values() if torch.is_tensor(v))
    second = {k: v.clone() for k, v in model.state_dict().items()}
    reset_networks(model)  # the stream moved on: another draw
    assert not torch.equal(second["critic.weights.0"], model.critic.weights[0])


def test_a_reset_keeps_the_observation_statistics_value_clippings_bounds_and_an_automatic_value_range(tmp_path):
    _, model, _, _ = _fit(tmp_path, 40, normalize_obs=True, value_clipping=True, target_update_every=10,
                          critic_bins=11, critic_range="auto")
    kept = {k: v.clone() for k, v in model.state_dict().items()
            if "normalizer." in k or "target_value." in k or "head.bounds" in k}
    bounds = kept["extensions.target_value.low"], kept["extensions.target_value.high"]
    assert kept["actor.normalizer.count"].item() > 0 and bounds[0] < bounds[1]
    assert kept["critic.head.bounds"].tolist() != [-1.0, 1.0]  # widened by the rewards
    weight = model.actor.net[0].weight.clone()
    reset_networks(model)
    for name, tensor in kept.items():
        assert torch.equal(tensor, model.state_dict()[name]), name  # the data's statistics, not learned
    assert not torch.equal(weight, model.actor.net[0].weight)


def test_reset_steps_must_be_positive_training_steps():
    from td3_lightning.errors import UserInputError

    for bad in ([0], [-5], [1.5], 60000, None):
        with pytest.raises(UserInputError, match=r"model.reset_steps must be training steps >= 1, e.g. \[60000\]"):
            TD3([3], [-1.0], [1.0], reset_steps=bad)


def test_solved_threshold_stops_at_the_first_evaluation_reaching_it():
    from lightning.pytorch.callbacks import EarlyStopping

    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=1000, eval_episodes=2)
    solved = EarlyStopping("val/return", mode="max", stopping_threshold=19.5, patience=10**6,
                           check_on_train_epoch_end=False)
    trainer = quiet_trainer(max_steps=1000, val_check_interval=30, callbacks=[solved])
    trainer.fit(small(dm), dm)
    assert trainer.global_step == 30  # every episode returns 20 > 19.5: solved at the first evaluation
    assert trainer.should_stop


def test_learning_curve_records_episodes_and_evaluations(tmp_path):
    from td3_lightning.plots import LearningCurve

    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=1000, eval_episodes=1)
    curve = LearningCurve()
    trainer = quiet_trainer(max_steps=100, val_check_interval=50, callbacks=[curve], default_root_dir=tmp_path)
    trainer.fit(small(dm), dm)
    # 20-step episodes: the warm-up is one (not drawn), then one ends every 20 training steps
    assert curve.train == [(s, 20.0) for s in (20, 40, 60, 80, 100)]
    assert curve.val == [(50, 20.0), (100, 20.0)]
    png = tmp_path / "learning_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_resume_from_a_single_env_loop_checkpoint_of_version_0_1(tmp_path):
    """Checkpoints written before vector envs hold the env loop's state without transition counts."""
    _fit(tmp_path / "b", 60, every=60)
    path = tmp_path / "b" / "s60.ckpt"
    ckpt = torch.load(path, weights_only=False)
    key = next(k for k in ckpt["callbacks"] if k.startswith("EnvLoop"))
    state = ckpt["callbacks"][key]
    old = {k: state[k] for k in ("env_steps", "episodes", "base_seed", "rng")}
    old.update(episode_return=0.0, episode_length=0)
    ckpt["callbacks"][key] = old
    torch.save(ckpt, path)
    trainer, model, dm, loop = _fit(tmp_path / "b2", 100, ckpt_path=path)
    assert trainer.global_step == 100 and loop.train_transitions == 100
    assert len(dm.buffer) == 70 and loop.env_steps == 120  # 20 warm-up + 100: one env step per training step


def test_a_mid_episode_resume_says_so_when_training_goes_on_and_only_for_its_own_fit(tmp_path):
    """The env's episodes are 20 steps: at 20 warm-up + 50 training steps one is under way. Resumed to 60 it is
    abandoned (said); a finished run resumed trains nothing (nothing said, and a later fit of the same EnvLoop from
    scratch says nothing either)."""
    import warnings

    _fit(tmp_path / "b", 50, every=50)
    path = tmp_path / "b" / "s50.ckpt"
    L.seed_everything(123)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=16, buffer_size=70)
    loop = EnvLoop()

    def said(max_steps: int, ckpt_path=None) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quiet_trainer(max_steps=max_steps, callbacks=[loop]).fit(small(dm), dm, ckpt_path=ckpt_path)
        return [str(w.message) for w in caught if "mid-episode" in str(w.message)]

    assert said(50, path) == []  # at max_steps already: no step left, no episode abandoned
    assert said(5) == []  # from scratch
    assert said(60, path) == ["resumed mid-episode: 1 episode(s) in progress are abandoned and new ones start; "
                              "checkpoints at episode ends resume exactly"]


def test_exploration_noise_and_learning_rates_follow_their_linear_schedules():
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=1000)
    model = small(dm, exploration_noise=0.3, exploration_noise_final=0.1, lr_final_factor=0.1, schedule_steps=50)
    assert model.exploration_noise_at(0) == 0.3
    assert abs(model.exploration_noise_at(25) - 0.2) < 1e-12
    assert abs(model.exploration_noise_at(50) - 0.1) < 1e-12 and abs(model.exploration_noise_at(500) - 0.1) < 1e-12
    lr_factor_at = model.schedules.lr_factor_at
    assert lr_factor_at(0, run_length(model)) == 1.0 and abs(lr_factor_at(25, run_length(model)) - 0.55) < 1e-12
    trainer = quiet_trainer(max_steps=40)
    trainer.fit(model, dm)
    critic_opt, actor_opt = (o.optimizer if hasattr(o, "optimizer") else o for o in trainer.optimizers)
    factor = 1 + (0.1 - 1) * 39 / 50  # set before the last step, training step 39
    assert abs(critic_opt.param_groups[0]["lr"] - 1e-3 * factor) < 1e-12
    assert abs(actor_opt.param_groups[0]["lr"] - 1e-3 * factor) < 1e-12


def test_schedules_default_to_the_run_length_and_to_constants():
    dm = ReplayDataModule(ENV, warmup_steps=20)
    constant = small(dm)
    assert constant.exploration_noise_at(10**6) == 0.1
    assert constant.schedules.lr_factor_at(10**6, run_length(constant)) == 1.0
    decaying = small(dm, exploration_noise_final=0.0)
    trainer = quiet_trainer(max_steps=200)
    decaying.trainer = trainer
    assert abs(decaying.exploration_noise_at(100) - 0.05) < 1e-12  # halfway through max_steps


def test_a_schedule_over_the_run_length_needs_a_step_limit():
    from td3_lightning.errors import UserInputError
    from td3_lightning.schedules import check_schedule_length

    hp = {"exploration_noise": 0.1, "exploration_noise_final": 0.0, "lr_final_factor": 1.0, "schedule_steps": None}
    check_schedule_length(hp, 1000)
    with pytest.raises(UserInputError, match=r"^model.exploration_noise_final schedule over trainer.max_steps, "):
        check_schedule_length(hp, -1)
    check_schedule_length({**hp, "schedule_steps": 500}, -1)  # its own length
    check_schedule_length({**hp, "exploration_noise_final": 0.1}, -1)  # constant: no schedule
    with pytest.raises(UserInputError, match=r"^model.lr_final_factor schedule"):
        check_schedule_length({**hp, "exploration_noise_final": None, "lr_final_factor": 0.5}, None)


class _GradNormWatcher(Callback):
    """A callback that looks at every optimizer step, as gradient-norm loggers do."""

    def __init__(self) -> None:
        self.calls = 0

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.calls += 1


def _initial_weights() -> dict[str, torch.Tensor]:
    L.seed_everything(3)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=500)
    return small(dm, policy_freq=2).state_dict()


def _train_weights(direct: bool | None, callbacks: list, steps: int = 60, **kw) -> tuple[TD3, L.Trainer]:
    L.seed_everything(3)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=500)
    model = small(dm, policy_freq=2, **kw)
    trainer = quiet_trainer(max_steps=steps, callbacks=[EnvLoop(), *callbacks])
    with pytest.MonkeyPatch.context() as patch:
        if direct is not None:  # force the path (None: the one the run chooses)
            patch.setattr(stepping, "direct_update_possible", lambda trainer, module: direct)
        trainer.fit(model, dm)
    return model, trainer


def test_direct_update_gives_the_hooked_path_bit_for_bit():
    direct, t_direct = _train_weights(True, [])
    hooked, t_hooked = _train_weights(False, [])
    assert direct.stepper.direct and not hooked.stepper.direct
    assert t_direct.global_step == t_hooked.global_step == 60
    assert direct.num_actor_updates == hooked.num_actor_updates == 30
    a, b = direct.state_dict(), hooked.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for o_direct, o_hooked in zip(t_direct.optimizers, t_hooked.optimizers):
        sa, sb = o_direct.state_dict()["state"], o_hooked.state_dict()["state"]
        assert all(torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"]) for i in sa)


def test_direct_update_is_chosen_only_when_no_hook_watches_the_update():
    model, _ = _train_weights(None, [], steps=10)
    assert model.stepper.direct  # plain CPU, 32-bit: around the hooks
    watcher = _GradNormWatcher()
    model, _ = _train_weights(None, [watcher], steps=10)
    assert not model.stepper.direct
    assert watcher.calls == 10 + 5  # every critic and every actor step reached the hook
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=500)
    model = small(dm)
    quiet_trainer(max_steps=5, precision="bf16-mixed", callbacks=[EnvLoop()]).fit(model, dm)
    assert not model.stepper.direct  # mixed precision needs Lightning's backward (autocast, scaling)


def test_compiled_losses_train_like_eager():
    """compile_mode default: the whole update runs through torch.compile (Inductor on the CPU) and
    the weights follow the eager run to float32 rounding."""
    import shutil

    import pytest

    if shutil.which(os.environ.get("CXX", "g++")) is None and shutil.which("cc") is None:
        pytest.skip("torch.compile on the CPU needs a C++ compiler")
    from torch._dynamo.utils import counters

    counters.clear()
    compiled, _ = _train_weights(None, [], steps=20, compile_mode="default")
    eager, _ = _train_weights(None, [], steps=20)
    assert compiled._compiled is not None and counters["stats"]["unique_graphs"] >= 2
    a, b = compiled.state_dict(), eager.state_dict()
    assert max((a[k] - b[k]).abs().max().item() for k in a if a[k].is_floating_point()) < 1e-4
    init = _initial_weights()
    assert any(not torch.equal(a[k], init[k]) for k in init if k.startswith("critic."))  # it did train


class _Recording(TD3):
    """Records what each training step hands to the statistics."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.seen: list[tuple[float, float, float | None]] = []

    def track_statistics(self, loss_q, q, loss_pi) -> None:
        self.seen.append((loss_q.item(), q[0].mean().item(), None if loss_pi is None else loss_pi.item()))
        super().track_statistics(loss_q, q, loss_pi)


def test_logged_training_statistics_are_the_means_since_the_last_log():
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=1000)
    model = _Recording(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], policy_freq=3)
    trainer = quiet_trainer(max_steps=600, log_every_n_steps=300, callbacks=[EnvLoop()])
    trainer.fit(model, dm)  # 300 steps per log: the histories fold once (every 256) in between
    last = model.seen[300:]
    logged = trainer.callback_metrics
    expected_pi = [x[2] for x in last if x[2] is not None]
    assert len(expected_pi) == 100
    assert abs(float(logged["train/critic_loss"]) - sum(x[0] for x in last) / 300) < 1e-5 * max(1, abs(last[0][0]))
    assert abs(float(logged["train/q"]) - sum(x[1] for x in last) / 300) < 1e-4
    assert abs(float(logged["train/actor_loss"]) - sum(expected_pi) / 100) < 1e-4


class _Overwritten(_Recording):
    """Losses whose outputs are overwritten after each step, as a CUDA graph's next replay
    overwrites the last one's (``compile_mode reduce-overhead`` on a GPU)."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.stats.copy_outputs = True  # what compile_mode reduce-overhead sets on a GPU; compile_mode none keeps it

    def track_statistics(self, loss_q, q, loss_pi) -> None:
        super().track_statistics(loss_q, q, loss_pi)
        for out in (loss_q, q, loss_pi):
            if out is not None:
                out.detach().fill_(float("nan"))  # the buffers' next contents


def test_statistics_survive_graph_outputs_being_overwritten():
    L.seed_everything(0)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=1000)
    model = _Overwritten(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16])
    trainer = quiet_trainer(max_steps=40, log_every_n_steps=20, callbacks=[EnvLoop()])
    trainer.fit(model, dm)
    last = model.seen[20:]
    logged = trainer.callback_metrics
    assert abs(float(logged["train/critic_loss"]) - sum(x[0] for x in last) / 20) < 1e-5 * max(1, abs(last[0][0]))
    assert abs(float(logged["train/q"]) - sum(x[1] for x in last) / 20) < 1e-4
    assert abs(float(logged["train/actor_loss"]) - sum(x[2] for x in last if x[2] is not None) / 10) < 1e-4


def test_test_and_validation_report_which_episodes_the_env_ended_before_its_time_limit():
    # Counting-v0 ends an even-seeded episode itself at step 5 (terminated) and every other at its limit, 7
    dm = ReplayDataModule("td3test/Counting-v0", warmup_steps=20, batch_size=8, buffer_size=50, test_episodes=4,
                          test_seed=10)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8, 8])
    quiet_trainer().test(model, dm, verbose=False)
    assert model.test_episodes["episode_terminated"] == [1.0, 0.0, 1.0, 0.0]
    assert model.test_episodes["episode_lengths"] == [5.0, 7.0, 5.0, 7.0]
    assert model.trainer.callback_metrics["test/terminated"].item() == 0.5
    dm.test_episodes = 1  # seed 10 alone: each test counts only its own episodes
    quiet_trainer().test(model, dm, verbose=False)
    assert model.trainer.callback_metrics["test/terminated"].item() == 1.0
    dm.eval_episodes, dm.eval_seed = 3, 21  # seeds 21, 22, 23: one of three ended by the env
    quiet_trainer().validate(model, dm, verbose=False)
    assert model.trainer.callback_metrics["val/terminated"].item() == pytest.approx(1 / 3)
    assert model.trainer.callback_metrics["val/episode_length"].item() == pytest.approx(19 / 3)
