"""``model.compile_mode cudagraphs``: the update over static buffers with a capturable Adam steps exactly like
the eager ``td3_update``, inside the Lightning loop too, and what it cannot capture is refused with one line.

On the CPU the static-buffer functions run eagerly (everything but ``torch.cuda.graph`` itself); the tests at
the end run the captured graphs and are skipped without CUDA (``benchmarks/gpu_check.sh`` runs them).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from conftest import quiet_trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.core.optimizer import LightningOptimizer

from td3_lightning import TD3, EnvLoop, ReplayDataModule
from td3_lightning import captured as captured_module
from td3_lightning.captured import CPU_MESSAGE, CapturedUpdate, check_capture_options
from td3_lightning.cli import main
from td3_lightning.user_input import CONFIG_DIR
from td3_lightning.errors import UserInputError
from td3_lightning.schedules import Schedules

ENV = "td3test/ConstantReward-v0"
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="captures CUDA graphs: needs a CUDA device")


# ----------------------------------------------------------------------------- the update against td3_update
def _module(device: str = "cpu", **kw) -> TD3:
    torch.manual_seed(0)
    return TD3([3], [-2.0, 0.0], [2.0, 1.0], hidden_dims=[32, 32], **kw).to(device)


def _eager(module: TD3) -> list[torch.optim.Optimizer]:
    """``module``'s optimizers, its stepper set up as a plain single-device run sets it (around Lightning's hooks)."""
    optimizers = module.configure_optimizers()
    module.stepper.direct = True
    module.stepper.optimizers = [LightningOptimizer(o) for o in optimizers]
    return optimizers


def _batches(n: int, device: str = "cpu", size: int = 16, lap: bool = False):
    g = torch.Generator().manual_seed(7)
    for _ in range(n):
        batch = {"obs": torch.randn(size, 3, generator=g), "action": torch.rand(size, 2, generator=g) * 2 - 1,
                 "reward": torch.randn(size, generator=g), "next_obs": torch.randn(size, 3, generator=g),
                 "terminated": torch.rand(size, generator=g) < 0.2}
        if lap:  # drawn by priority: the update returns the batch's new priorities
            batch["index"] = torch.randint(100, (size,), generator=g)
        yield {k: v.to(device) for k, v in batch.items()}, torch.randn(size, 2, generator=g).to(device)


def _losses(result) -> list[torch.Tensor]:
    """An update's losses and Q values (the actor's loss on its steps), copied."""
    return [x.detach().clone() for x in result[:3] if x is not None]


def _extras(result) -> list[torch.Tensor]:
    """An update's loss terms by name and its priorities (what is there), copied."""
    return [*(v.clone() for _, v in sorted(result.terms.items())), *(
        [] if result.priority is None else [result.priority.clone()])]


def _run_both(steps: int, device: str, capture: bool, reload_at: int | None = None, lap: bool = False, **kw):
    """The eager ``td3_update`` and the static-buffer update, from the same state on the same batches and noise,
    with a learning rate that halves over the run and the step hooks (hard target updates) before each step;
    -> both modules, optimizers, per-step losses and per-step loss terms and priorities."""
    eager, static = _module(device, **kw), _module(device, **kw)
    eager_opts, static_opts = _eager(eager), _eager(static)
    static.stepper.check_each_loss = False  # as Stepper.compile sets it: no host sync inside a captured update
    captured = CapturedUpdate(static, static_opts, capture=capture)
    schedule = Schedules(0.1, None, lr_final_factor=0.5, steps=steps)
    losses, extras = [], []
    for i, (batch, noise) in enumerate(_batches(steps, device, lap=lap)):
        for module in (eager, static):
            module.extensions.before_step(module, i)
            schedule.set_learning_rates(module.stepper.optimizers, [3e-4, 3e-4], i, None)
        update_actor = (i + 1) % 2 == 0
        a = eager.td3_update(batch, noise, update_actor)
        b = captured.step(batch, noise, update_actor)
        losses.append((_losses(a), _losses(b)))
        extras.append((_extras(a), _extras(b)))
        if i == reload_at:  # a checkpoint's load: the optimizer states become new tensors, captured afresh
            static_opts[0].load_state_dict(static_opts[0].state_dict())
    return (eager, eager_opts), (static, static_opts), captured, losses, extras


def _adam_states(optimizers: list[torch.optim.Optimizer]) -> list[dict]:
    return [o.state_dict()["state"] for o in optimizers]


@pytest.mark.parametrize("options", [{}, {"layer_norm": True, "preactivation_penalty": 1e-3, "num_critics": 3,
                                          "actor_q": "min"},
                                     {"critic_bins": 11, "critic_range": [-5.0, 5.0]},
                                     {"critic_bins": 11, "critic_range": "auto"}],
                         ids=["plain", "layer_norm-penalty-3critics-min", "distributional", "distributional-auto"])
def test_the_static_buffer_update_steps_bit_for_bit_like_td3_update(options):
    """20 steps (10 actor steps, the learning rate moving every step, Adam states reloaded at step 12): the
    same losses, weights, targets and Adam states, exactly; the warm-up before the first step is undone."""
    (eager, eager_opts), (static, static_opts), captured, losses, _ = _run_both(20, "cpu", False, reload_at=12,
                                                                                **options)
    for step, (a, b) in enumerate(losses):
        assert len(a) == len(b) == (3 if step % 2 else 2)
        assert all(torch.equal(x, y) for x, y in zip(a, b)), step
    sa, sb = eager.state_dict(), static.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    for st_a, st_b in zip(_adam_states(eager_opts), _adam_states(static_opts)):
        assert all(torch.equal(st_a[i][k], st_b[i][k]) for i in st_a for k in st_a[i])
    assert float(_adam_states(static_opts)[0][0]["step"]) == 20 and float(_adam_states(static_opts)[1][0]["step"]) == 10
    start = _module(**options).state_dict()
    assert not torch.equal(start["critic.weights.0"], sb["critic.weights.0"])  # it trained
    assert not torch.equal(start["actor_target.net.0.weight"], sb["actor_target.net.0.weight"])  # Polyak ran
    assert captured.ready and captured._graphs is None  # eager on the CPU: nothing captured


TD7_SET = {"embedding_dim": 8, "target_update_every": 5, "value_clipping": True, "actor_q": "mean"}


def test_the_static_buffer_update_steps_bit_for_bit_like_td3_update_with_the_td7_set():
    """SALE's encoder step, hard target updates with value clipping and the fixed encoder's refresh, the mean-Q
    actor and prioritised (LAP) batches, 20 steps: the same losses, encoder losses, priorities, weights, value bounds
    and Adam states (the encoder's too), exactly."""
    (eager, eager_opts), (static, static_opts), captured, losses, extras = _run_both(20, "cpu", False, reload_at=12,
                                                                                   lap=True, **TD7_SET)
    for step, ((a, b), (x, y)) in enumerate(zip(losses, extras)):
        assert len(a) == len(b) == (3 if step % 2 else 2)
        assert all(torch.equal(u, v) for u, v in zip(a, b)), step
        # the actor's preactivation (on its steps), the encoder's loss, the priorities max_i |Q_i - y|
        assert len(x) == len(y) == (3 if step % 2 else 2) and x[-1].shape == (16,) and bool((x[-1] >= 0).all())
        assert all(torch.equal(u, v) for u, v in zip(x, y)), step
    sa, sb = eager.state_dict(), static.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert len(static_opts) == 3  # critic, actor, SALE's encoder
    for st_a, st_b in zip(_adam_states(eager_opts), _adam_states(static_opts)):
        assert all(torch.equal(st_a[i][k], st_b[i][k]) for i in st_a for k in st_a[i])
    assert float(_adam_states(static_opts)[2][0]["step"]) == 20
    assert float(sb["extensions.target_value.high"]) > float(sb["extensions.target_value.low"])  # bounds were taken
    start = _module(**TD7_SET).state_dict()
    fixed = [k for k in sb if k.startswith("critic.") and ".fixed.encoder." in k]
    assert fixed and all(not torch.equal(start[k], sb[k]) for k in fixed)  # refreshed at the hard updates


def test_the_learning_rates_are_tensors_the_schedule_writes_into():
    static = _module()
    optimizers = static.configure_optimizers()
    CapturedUpdate(static, optimizers, capture=False)
    rates = [o.param_groups[0]["lr"] for o in optimizers]
    assert all(torch.is_tensor(r) and r.dtype == torch.float64 for r in rates)
    assert all(o.param_groups[0]["capturable"] for o in optimizers)
    schedule = Schedules(0.1, None, lr_final_factor=0.1, steps=100)
    for step, factor in [(0, 1.0), (50, 0.55), (100, 0.1), (300, 0.1)]:
        schedule.set_learning_rates(optimizers, [1e-3, 2e-3], step, None)
        assert all(o.param_groups[0]["lr"] is r for o, r in zip(optimizers, rates))  # the tensors a graph reads
        exact = schedule.lr_factor_at(step, None)  # the float an eager run sets
        assert exact == pytest.approx(factor, abs=1e-15)
        assert float(rates[0]) == 1e-3 * exact and float(rates[1]) == 2e-3 * exact


def test_a_capturable_adams_state_dict_is_a_plain_adams_and_loads_into_one():
    static, eager = _module(), _module()
    static_opts, eager_opts = _eager(static), eager.configure_optimizers()
    captured = CapturedUpdate(static, static_opts, capture=False)
    batch, noise = next(_batches(1))
    captured.step(batch, noise, update_actor=True)
    saved = static_opts[1].state_dict()
    assert saved["param_groups"][0]["lr"] == 3e-4 and saved["param_groups"][0]["capturable"] is False
    assert torch.is_tensor(static_opts[1].param_groups[0]["lr"])  # the live one is untouched
    eager_opts[1].load_state_dict(saved)
    assert eager_opts[1].state_dict()["param_groups"] == saved["param_groups"]
    assert float(eager_opts[1].state_dict()["state"][0]["step"]) == 1


# ----------------------------------------------------------------------------- inside the Lightning loop
@pytest.fixture
def eager_on_cpu(monkeypatch) -> None:
    """compile_mode cudagraphs on the CPU: the static-buffer update runs eagerly in the fit, not refused."""
    monkeypatch.setattr(captured_module, "can_capture", lambda device: True)


def _fit(mode: str, max_steps: int = 60, ckpt_path: Path | None = None, save_to: Path | None = None,
         data: dict | None = None, **kw):
    """Train on the constant-reward env with chunks of 4 steps, validation, an lr and a noise schedule, a network
    reset and observation normalisation; with ``save_to`` checkpoint every 40 steps and the last one."""
    L.seed_everything(11)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=16, buffer_size=70, steps_per_batch=4, eval_episodes=1,
                          **(data or {}))
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], compile_mode=mode,
                lr_final_factor=0.3, exploration_noise=0.3, exploration_noise_final=0.05, schedule_steps=60,
                reset_steps=[48], normalize_obs=True, actor_lr=1e-3, critic_lr=1e-3, **kw)
    callbacks = [EnvLoop()]
    if save_to is not None:
        callbacks.append(ModelCheckpoint(dirpath=save_to, every_n_train_steps=40, save_top_k=-1, save_last=True,
                                         filename="s{step}", auto_insert_metric_name=False))
    trainer = quiet_trainer(max_steps=max_steps, val_check_interval=28, log_every_n_steps=20, callbacks=callbacks,
                            enable_checkpointing=save_to is not None)
    trainer.fit(model, dm, ckpt_path=ckpt_path)
    return model, dm, trainer


def _assert_same(a, b) -> None:
    (model_a, dm_a, trainer_a), (model_b, dm_b, trainer_b) = a, b
    assert trainer_a.global_step == trainer_b.global_step
    assert (model_a.num_critic_updates, model_a.num_actor_updates) == (model_b.num_critic_updates,
                                                                        model_b.num_actor_updates)
    sa, sb = model_a.state_dict(), model_b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa), [k for k in sa if not torch.equal(sa[k], sb[k])]
    assert torch.equal(dm_a.buffer.action, dm_b.buffer.action)  # the same exploration
    for opt_a, opt_b in zip(trainer_a.optimizers, trainer_b.optimizers):
        st_a, st_b = opt_a.state_dict()["state"], opt_b.state_dict()["state"]
        assert all(torch.equal(st_a[i][k], st_b[i][k]) for i in st_a for k in st_a[i])


def test_cudagraphs_mode_trains_in_the_lightning_loop_bit_for_bit_like_eager(eager_on_cpu):
    eager, static = _fit("none"), _fit("cudagraphs")
    _assert_same(eager, static)
    model, _, trainer = static
    assert isinstance(model._compiled, CapturedUpdate) and model._compiled.ready
    assert model.num_actor_updates == 30 and trainer.callback_metrics["val/return"].item() == 20.0
    lr = trainer.optimizers[0].param_groups[0]["lr"]
    assert torch.is_tensor(lr) and float(lr) == pytest.approx(1e-3 * (1 - 0.7 * 59 / 60), rel=1e-12)


def test_a_checkpoint_of_either_mode_resumes_exactly_in_the_other(eager_on_cpu, tmp_path):
    straight = _fit("none")
    _fit("cudagraphs", max_steps=40, save_to=tmp_path / "graphs")
    ckpt = torch.load(tmp_path / "graphs" / "last.ckpt", weights_only=False)
    groups = [g for state in ckpt["optimizer_states"] for g in state["param_groups"]]
    assert all(isinstance(g["lr"], float) and g["capturable"] is False for g in groups)  # a plain Adam's
    _assert_same(straight, _fit("none", ckpt_path=tmp_path / "graphs" / "last.ckpt"))
    _fit("none", max_steps=40, save_to=tmp_path / "eager")
    _assert_same(straight, _fit("cudagraphs", ckpt_path=tmp_path / "eager" / "last.ckpt"))


TD7_FIT = {**TD7_SET, "policy_checkpoints": True, "checkpoint_episodes": 2, "checkpoint_after": 30,
           "data": {"sampler": "lap"}}


def test_cudagraphs_mode_trains_the_td7_set_in_the_lightning_loop_bit_for_bit_like_eager(eager_on_cpu):
    """SALE, LAP, value clipping, hard target updates, the mean-Q actor and policy checkpoints, with the schedules,
    a reset and normalisation of ``_fit``: the same weights, Adam states, priorities and exploration."""
    eager, static = _fit("none", **TD7_FIT), _fit("cudagraphs", **TD7_FIT)
    _assert_same(eager, static)
    (model, dm, _), (_, dm_eager, _) = static, eager
    assert isinstance(model._compiled, CapturedUpdate) and len(model.optimizers()) == 3
    assert torch.equal(dm.buffer.sampler.priority, dm_eager.buffer.sampler.priority)
    assert float(dm.buffer.sampler.priority.max()) > 1.0  # the update's priorities reached the sampler
    assert int(model.policy_checkpoint.taken) > 0  # policy checkpoints were taken


def test_a_td7_checkpoint_of_either_mode_resumes_exactly_in_the_other(eager_on_cpu, tmp_path):
    straight = _fit("none", **TD7_FIT)
    _fit("cudagraphs", max_steps=40, save_to=tmp_path / "graphs", **TD7_FIT)
    resumed = _fit("none", ckpt_path=tmp_path / "graphs" / "last.ckpt", **TD7_FIT)
    _assert_same(straight, resumed)
    assert torch.equal(straight[1].buffer.sampler.priority, resumed[1].buffer.sampler.priority)
    _fit("none", max_steps=40, save_to=tmp_path / "eager", **TD7_FIT)
    _assert_same(straight, _fit("cudagraphs", ckpt_path=tmp_path / "eager" / "last.ckpt", **TD7_FIT))


def test_cudagraphs_mode_on_the_cpu_is_refused_when_training_starts():
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=100)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8], compile_mode="cudagraphs")
    with pytest.raises(UserInputError, match=f"^{re.escape(CPU_MESSAGE)}$"):
        quiet_trainer(max_steps=2).fit(model, dm)


# ----------------------------------------------------------------------------- refusals by the command line
@pytest.fixture
def work_folder(tmp_path, monkeypatch) -> Path:
    shutil.copy(CONFIG_DIR / "pendulum.yaml", tmp_path / "pendulum.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


REFUSALS = {
    "cpu": (["--trainer.accelerator", "cpu"], CPU_MESSAGE),
    "ddp": (["--trainer.accelerator", "cpu", "--trainer.strategy", "ddp", "--trainer.devices", "2"],
            "model.compile_mode cudagraphs captures the update on one device, not distributed (trainer.strategy ddp); "
            "use model.compile_mode none"),
    "two devices": (["--trainer.accelerator", "cpu", "--trainer.devices", "2"],
                    "model.compile_mode cudagraphs captures the update on one device (trainer.devices 2): set "
                    "trainer.devices 1, or use model.compile_mode none with several"),
    "two nodes": (["--trainer.num_nodes", "2"], "model.compile_mode cudagraphs captures the update on one device, "
                  "not distributed (trainer.num_nodes 2); use model.compile_mode none"),
    "bf16": (["--trainer.precision", "bf16-mixed"], "model.compile_mode cudagraphs needs 32-bit precision "
             "(trainer.precision bf16-mixed); use model.compile_mode none"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_what_cudagraphs_cannot_run_is_one_line_and_writes_nothing(case, work_folder, capsys):
    args, message = REFUSALS[case]
    before = {p: p.read_bytes() for p in work_folder.rglob("*")}
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", "--model.compile_mode", "cudagraphs", *args])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"error: {message}"]
    assert {p: p.read_bytes() for p in work_folder.rglob("*")} == before


def test_the_device_count_of_auto_is_every_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    with pytest.raises(UserInputError, match=r"one device \(trainer.devices auto\)"):
        check_capture_options({"compile_mode": "cudagraphs"}, {"accelerator": "gpu", "devices": "auto"})
    check_capture_options({"compile_mode": "cudagraphs"}, {"accelerator": "gpu", "devices": 1})  # passes
    check_capture_options({"compile_mode": "none"}, {"accelerator": "cpu", "devices": 2})


def test_the_configured_compile_mode_replaces_the_checkpoints(work_folder, capsys):
    """A checkpoint of a GPU run in cudagraphs mode resumes on the CPU in eager mode: how this run computes
    the update is configured, not read from the checkpoint."""
    tiny = ["--trainer.max_steps", "60", "--data.warmup_steps", "50", "--data.eval_episodes", "1",
            "--trainer.val_check_interval", "60", "--model.hidden_dims", "[16, 16]", "--trainer.accelerator", "cpu"]
    main(["fit", "--config", "pendulum.yaml", *tiny])
    last = next(work_folder.rglob("last.ckpt"))
    ckpt = torch.load(last, weights_only=False)
    ckpt["hyper_parameters"]["compile_mode"] = "cudagraphs"
    torch.save(ckpt, work_folder / "graphs.ckpt")
    main(["fit", "--config", "pendulum.yaml", *tiny, "--trainer.max_steps", "90", "--ckpt_path", "graphs.ckpt"])
    resumed = torch.load(sorted(work_folder.rglob("last.ckpt"))[-1], weights_only=False)
    assert resumed["global_step"] == 90 and resumed["hyper_parameters"]["compile_mode"] == "none"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal without CUDA")
def test_the_gpu_benchmark_and_check_stop_with_one_line_without_cuda(cli_env, tmp_path):
    repo = Path(__file__).resolve().parents[1]
    expected = {"throughput.py": "error: --device cuda needs a CUDA device, and torch sees none",
                "gpu_check.sh": "error: benchmarks/gpu_check.sh needs a CUDA device; torch sees none"}
    for cmd in ([sys.executable, "benchmarks/throughput.py", "--device", "cuda"], ["bash", "benchmarks/gpu_check.sh"]):
        out = subprocess.run(cmd, cwd=repo, env={**cli_env, "OUT": str(tmp_path / "out")}, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
        assert out.stderr.startswith(expected[Path(cmd[1]).name]) and out.stdout == ""
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- the captured graphs (CUDA only)
@CUDA
def test_the_captured_update_follows_eager_on_the_gpu_for_100_steps():
    (eager, eager_opts), (static, static_opts), captured, losses, _ = _run_both(100, "cuda", True, reload_at=40)
    assert captured._graphs is not None
    for step, (a, b) in enumerate(losses):
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5, msg=f"step {step}")
    sa, sb = eager.state_dict(), static.state_dict()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=1e-4, atol=1e-5, msg=k)
    obs = torch.randn(1, 3, device="cuda")
    with torch.no_grad():
        torch.testing.assert_close(captured.act(obs).clone(), static.actor(obs))


@CUDA
def test_the_captured_td7_update_follows_eager_on_the_gpu_for_100_steps():
    """SALE's encoder inside the graph (its embeddings computed in each graph), LAP priorities as graph outputs, hard
    target updates and value clipping between replays."""
    (eager, _), (static, _), captured, losses, extras = _run_both(100, "cuda", True, reload_at=40, lap=True, **TD7_SET)
    assert captured._graphs is not None
    for step, ((a, b), (x, y)) in enumerate(zip(losses, extras)):
        assert len(x) == len(y) == (3 if step % 2 else 2)
        for u, v in zip([*a, *x], [*b, *y]):
            torch.testing.assert_close(u, v, rtol=1e-4, atol=1e-5, msg=f"step {step}")
    sa, sb = eager.state_dict(), static.state_dict()
    for k in sa:
        torch.testing.assert_close(sa[k], sb[k], rtol=1e-4, atol=1e-5, msg=k)


@CUDA
def test_a_captured_fit_resumes_exactly_from_last_ckpt(tmp_path):
    def fit(max_steps: int, ckpt_path: Path | None = None, save_to: Path | None = None):
        L.seed_everything(3)
        dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=32, buffer_size=200, steps_per_batch=4, eval_episodes=1)
        model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[64, 64], compile_mode="cudagraphs",
                    lr_final_factor=0.3, schedule_steps=120, reset_steps=[80])
        every = ModelCheckpoint(dirpath=save_to, every_n_train_steps=60, save_last=True, save_top_k=-1)
        callbacks = [EnvLoop(), *([every] if save_to else [])]
        trainer = quiet_trainer(max_steps=max_steps, val_check_interval=50, accelerator="gpu",
                                callbacks=callbacks, enable_checkpointing=save_to is not None)
        trainer.fit(model, dm, ckpt_path=ckpt_path)
        return model, dm, trainer

    straight = fit(120)
    assert isinstance(straight[0]._compiled, CapturedUpdate) and straight[0]._compiled._graphs is not None
    fit(60, save_to=tmp_path)
    _assert_same(straight, fit(120, ckpt_path=tmp_path / "last.ckpt"))
