"""TD3 (Fujimoto et al., 2018) as a LightningModule: the update and nothing about environments."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor
from torchmetrics import CatMetric, MeanMetric

from td3_lightning.distributed import average_gradients
from td3_lightning.errors import UserInputError
from td3_lightning.networks import MIN_IMAGE_SIZE, Actor, CriticEnsemble, PixelEncoder

CHECKPOINT_KEY = "td3_lightning"
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
FORMAT_VERSION = 1


class NonFiniteError(UserInputError):
    """A NaN or an infinity in what the environment returned, in a training loss or in the
    weights. Training stops with one line naming the quantity and the step; no checkpoint
    with non-finite weights is ever written."""


def _noop_closure() -> None:
    return None


class TD3(L.LightningModule):
    """Twin Delayed DDPG with manual optimization.

    One ``training_step`` is one critic update on one replay batch (the ``EnvLoop``
    callback takes one environment step before it); every ``policy_freq`` steps the actor
    is updated through the first critic and all targets track their networks by Polyak
    averaging. ``trainer.global_step`` counts training steps, i.e. environment steps after
    the warm-up.

    A non-finite critic or actor loss stops training with a :class:`NonFiniteError`. On the
    CPU every loss is checked before its backward pass, so the weights never become
    non-finite. On an accelerator a per-step check would cost a host sync, so the step of
    the first non-finite loss is recorded on the device and checked every
    ``log_every_n_steps`` steps, before every validation and test and before every
    checkpoint; a checkpoint with non-finite weights is never written.

    Args:
        obs_shape: shape of one observation (from the env; linked automatically by the CLI).
        action_low: lower action bounds (from the env; linked automatically by the CLI).
        action_high: upper action bounds (from the env; linked automatically by the CLI).
        hidden_dims: hidden layer sizes of the actor and of every critic.
        num_critics: number of critics; the target takes the minimum over all of them (≥ 2).
        gamma: discount factor.
        tau: Polyak averaging rate of the target networks (1 = hard copy).
        policy_noise: std of the target-policy smoothing noise, relative to half the action range.
        noise_clip: clip of the target-policy smoothing noise, relative to half the action range.
        policy_freq: actor and target updates happen every ``policy_freq`` critic updates.
        exploration_noise: std of the Gaussian exploration noise added to the actor's action
            while collecting data, relative to half the action range.
        actor_lr: Adam learning rate of the actor.
        critic_lr: Adam learning rate of the critics.
        exploration_noise_final: when set, the exploration noise decays linearly from
            ``exploration_noise`` to this value over ``schedule_steps`` training steps, then stays.
        lr_final_factor: the learning rates decay linearly to ``lr * lr_final_factor`` over
            ``schedule_steps`` training steps (1 = constant).
        schedule_steps: length of both schedules in training steps (default: ``trainer.max_steps``).
        encoder: ``auto`` (a CNN for image observations ``(C, H, W)``, none for vectors),
            ``cnn`` or ``none``.
        encoder_features: length of the CNN encoder's feature vector.
        shared_encoder: with a CNN, the actor uses the critics' encoder (trained by the critic
            loss only; the actor's gradient does not reach it) instead of its own.
        flush_denormal: treat float32 values below 1.2e-38 as zero on the CPU
            (``torch.set_flush_denormal``, for the whole process: set when the module is
            created, so that the CPU threads torch starts afterwards inherit it). Values in
            that range appear in the update, and x86 CPUs compute on them many times slower:
            LunarLander trains 10-20% faster with it on the 2-core CPU (214 vs 185 steps/s in
            the README's benchmark). No effect on GPU math. ``false`` leaves the process's
            setting as it is.
        compile_mode: ``torch.compile`` the critic and actor losses (forward and backward)
            with this mode: ``none`` (eager), ``default``, ``max-autotune-no-cudagraphs``,
            ``max-autotune`` or ``reduce-overhead`` (the last two capture the losses in CUDA
            graphs on a GPU). Compilation happens at the first training step and takes a
            while; it is meant for GPUs, where it removes per-kernel launch costs. On the
            2-core CPU eager is faster.
    """

    def __init__(
        self,
        obs_shape: list[int],
        action_low: list[float],
        action_high: list[float],
        hidden_dims: list[int] = [256, 256],  # noqa: B006 - list default shows in --help
        num_critics: int = 2,
        gamma: float = 0.99,
        tau: float = 0.005,
        policy_noise: float = 0.2,
        noise_clip: float = 0.5,
        policy_freq: int = 2,
        exploration_noise: float = 0.1,
        actor_lr: float = 3e-4,
        critic_lr: float = 3e-4,
        exploration_noise_final: float | None = None,
        lr_final_factor: float = 1.0,
        schedule_steps: int | None = None,
        encoder: str = "auto",
        encoder_features: int = 50,
        shared_encoder: bool = True,
        flush_denormal: bool = True,
        compile_mode: str = "none",
    ) -> None:
        super().__init__()
        _check_hparams(
            obs_shape=obs_shape, action_low=action_low, action_high=action_high, hidden_dims=hidden_dims,
            num_critics=num_critics, gamma=gamma, tau=tau, policy_noise=policy_noise, noise_clip=noise_clip,
            policy_freq=policy_freq, exploration_noise=exploration_noise, actor_lr=actor_lr, critic_lr=critic_lr,
            exploration_noise_final=exploration_noise_final, lr_final_factor=lr_final_factor,
            schedule_steps=schedule_steps, encoder=encoder, encoder_features=encoder_features,
            compile_mode=compile_mode,
        )
        self.save_hyperparameters()
        self.automatic_optimization = False
        if flush_denormal:
            # before the networks are built: the CPU thread pool starts with their first large
            # operation, and new threads inherit the setting (set later, only this thread has it)
            torch.set_flush_denormal(True)

        obs_dim, action_dim = int(obs_shape[0]), len(action_low)
        cnn = encoder == "cnn" or (encoder == "auto" and len(obs_shape) == 3)
        critic_encoder = PixelEncoder(obs_shape, encoder_features) if cnn else None
        if cnn and shared_encoder:
            actor_encoder = critic_encoder
        else:
            actor_encoder = PixelEncoder(obs_shape, encoder_features) if cnn else None
        self.actor = Actor(obs_dim, action_low, action_high, hidden_dims, actor_encoder,
                           detach_encoder=cnn and shared_encoder)
        self.critic = CriticEnsemble(obs_dim, action_dim, hidden_dims, num_critics, critic_encoder)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False).eval()
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False).eval()

        self.num_critic_updates = 0
        self.num_actor_updates = 0
        self._noise_gen: torch.Generator | None = None
        self._noise_gen_state: Tensor | None = None  # restored from a checkpoint, applied on first use
        self._train_hist: tuple[list[Tensor], list[Tensor], list[Tensor]] = ([], [], [])  # critic loss, Q1, actor loss
        self._train_sums: Tensor | None = None  # folded sums of the three histories
        self._train_counts = [0, 0, 0]  # and how many values each sum holds
        self._first_non_finite: Tensor | None = None  # (critic, actor): step of the first non-finite loss, or -1
        self._first_non_finite_value: Tensor | None = None  # (critic, actor): that loss
        self._direct = False  # backward and steps around Lightning's hooks (set in on_train_start)
        self._compiled: tuple[Any, Any] | None = None  # compiled (critic_loss, actor_loss)
        self._graph_outputs = False  # the losses run as CUDA graphs: their outputs live until the next replay

        self.val_return = MeanMetric()
        self.val_length = MeanMetric()
        self.test_returns = CatMetric()
        self.test_lengths = CatMetric()
        self.test_seconds = MeanMetric()
        # the last test's episodes, {"episode_returns": [...], "episode_lengths": [...]}, for TestReport
        self.test_episodes: dict[str, list[float]] = {}

    # ------------------------------------------------------------------ the TD3 update
    @torch.no_grad()
    def td_target(self, batch: dict[str, Tensor], noise: Tensor | None = None) -> Tensor:
        """``r + gamma * (1 - terminated) * min_i Q'_i(s', clip(pi'(s') + clip(eps)))``.

        Args:
            batch: replay batch with ``reward``, ``next_obs``, ``terminated`` and ``action``.
            noise: standard-normal draws shaped like ``batch["action"]`` (drawn here if None).
        """
        hp = self.hparams
        scale, bias = self.actor.action_scale, self.actor.action_bias
        if noise is None:
            noise = self._standard_normal(batch["action"])
        eps = (noise * hp.policy_noise).clamp(-hp.noise_clip, hp.noise_clip) * scale
        next_action = torch.clamp(self.actor_target(batch["next_obs"]) + eps, bias - scale, bias + scale)
        next_q = self.critic_target(batch["next_obs"], next_action).min(dim=0).values
        not_done = 1.0 - batch["terminated"].float()
        return batch["reward"] + hp.gamma * not_done * next_q

    def critic_loss(self, batch: dict[str, Tensor], noise: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Sum over critics of the mean squared TD error; also returns the critics' Q values."""
        q = self.critic(batch["obs"], batch["action"])  # (num_critics, batch)
        return (q - self.td_target(batch, noise)).pow(2).mean(dim=1).sum(), q

    def actor_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """``-Q_1(s, pi(s))`` with the critic's weights held fixed."""
        return -self.critic.q1(batch["obs"], self.actor(batch["obs"]), detach_params=True).mean()

    @torch.no_grad()
    def update_targets(self) -> None:
        """Polyak averaging ``theta' <- (1 - tau) theta' + tau theta`` of every target network."""
        online = [*self.actor.parameters(), *self.critic.parameters()]
        target = [*self.actor_target.parameters(), *self.critic_target.parameters()]
        torch._foreach_lerp_(target, online, self.hparams.tau)

    # ------------------------------------------------------------------ schedules
    def _progress(self, step: int) -> float:
        """Fraction of the schedules done at training step ``step`` (0 to 1)."""
        total = self.hparams.get("schedule_steps")
        if total is None:
            trainer = self._trainer
            total = trainer.max_steps if trainer is not None and trainer.max_steps and trainer.max_steps > 0 else None
        return 1.0 if not total else min(1.0, step / total)

    def exploration_noise_at(self, step: int) -> float:
        """Exploration noise std (relative to half the action range) at training step ``step``."""
        start, final = self.hparams.exploration_noise, self.hparams.get("exploration_noise_final")
        return start if final is None else start + (final - start) * self._progress(step)

    def lr_factor_at(self, step: int) -> float:
        """Multiplier of both learning rates at training step ``step``."""
        factor = self.hparams.get("lr_final_factor", 1.0)
        return 1.0 if factor == 1.0 else 1.0 + (factor - 1.0) * self._progress(step)

    def _apply_lr_schedule(self, critic_opt: Any, actor_opt: Any) -> None:
        if self.hparams.get("lr_final_factor", 1.0) == 1.0:
            return
        factor = self.lr_factor_at(self.global_step)
        for opt, base in ((critic_opt, self.hparams.critic_lr), (actor_opt, self.hparams.actor_lr)):
            for group in opt.optimizer.param_groups:
                group["lr"] = base * factor

    def training_step(self, batch: dict[str, Tensor] | Iterable[dict[str, Tensor]], batch_idx: int) -> None:
        """One training step per replay batch; a chunk of batches (``data.steps_per_batch``) is
        one training step per batch it yields."""
        critic_opt, actor_opt = self.optimizers()  # type: ignore[misc]
        if getattr(self, "_ddp_wrapper", None) is not None:  # see on_train_start
            self._ddp_wrapper.require_backward_grad_sync = False
        for one in (batch,) if isinstance(batch, dict) else batch:
            self.td3_step(one, critic_opt, actor_opt)

    def td3_step(self, batch: dict[str, Tensor], critic_opt: Any, actor_opt: Any) -> None:
        """The TD3 update on one replay batch: the critics every step; the actor and the
        target networks every ``policy_freq`` steps."""
        self._apply_lr_schedule(critic_opt, actor_opt)
        critic_loss, actor_loss = self._loss_functions()
        loss_q, q = critic_loss(batch, self._standard_normal(batch["action"]))
        self._check_loss(0, loss_q)
        critic_opt.zero_grad(set_to_none=True)
        self._backward(loss_q)
        average_gradients(self.trainer, self.critic)  # no-op in a single process
        self._optimizer_step(critic_opt, counted=True)  # global_step counts these steps
        self.num_critic_updates += 1

        loss_pi = None
        if self.num_critic_updates % self.hparams.policy_freq == 0:
            loss_pi = actor_loss(batch)
            self._check_loss(1, loss_pi)
            actor_opt.zero_grad(set_to_none=True)
            self._backward(loss_pi)
            average_gradients(self.trainer, self.actor)
            self._optimizer_step(actor_opt, counted=False)
            self.update_targets()
            self.num_actor_updates += 1
        self._track(loss_q, q, loss_pi)

    # ------------------------------------------------------------------ backward and steps
    # None: go around Lightning's backward / optimizer-step hooks when they would do nothing
    # (see direct_update_possible); True / False force the direct / the hooked path.
    direct_update: bool | None = None

    def _backward(self, loss: Tensor) -> None:
        if self._direct:
            loss.backward()
        else:
            self.manual_backward(loss)

    def _loss_functions(self) -> tuple[Any, Any]:
        """``critic_loss`` and ``actor_loss``, compiled once when ``compile_mode`` asks for it."""
        mode = self.hparams.get("compile_mode", "none")
        if mode == "none":
            return self.critic_loss, self.actor_loss
        if self._compiled is None:
            self._compiled = (torch.compile(self.critic_loss, mode=mode), torch.compile(self.actor_loss, mode=mode))
        self._graph_outputs = mode in ("reduce-overhead", "max-autotune") and self.device.type == "cuda"
        if self._graph_outputs:
            torch.compiler.cudagraph_mark_step_begin()  # a new training step: earlier graph outputs are done
        return self._compiled

    def _optimizer_step(self, optimizer: Any, counted: bool) -> None:
        """One step of a ``LightningOptimizer``. Only ``counted`` steps advance ``global_step``
        (the critic's), so that ``global_step`` counts training steps."""
        if self._direct:
            if counted:
                optimizer._on_before_step()  # Lightning's step count, as LightningOptimizer.step
            optimizer.optimizer.step()
            if counted:
                optimizer._on_after_step()
        elif counted:
            optimizer.step()
        else:  # through the strategy (precision plugins, loss scaling), not counted
            self.trainer.strategy.optimizer_step(optimizer.optimizer, _noop_closure, model=self)

    # ------------------------------------------------------------------ non-finite guard
    # None: check every loss at once on the CPU (a host sync there is nearly free) and defer
    # the check on accelerators; True / False force one way.
    finite_check_every_step: bool | None = None
    _LOSS_NAMES = ("critic loss", "actor loss")

    def _check_loss(self, slot: int, loss: Tensor) -> None:
        """Stop at the first non-finite loss of this step (``slot`` 0: critic, 1: actor)."""
        eager = self.finite_check_every_step
        if eager is None:
            eager = loss.device.type == "cpu"
        if eager:
            value = loss.item()  # on the CPU cheaper than an isfinite kernel
            if not math.isfinite(value):
                raise NonFiniteError(self._loss_message(slot, self.global_step + 1, value))
            return
        step = self.global_step + 1  # the training step being taken
        steps, values = self._first_non_finite, self._first_non_finite_value
        if steps is None or values is None or steps.device != loss.device:
            steps = self._first_non_finite = torch.full((2,), -1, dtype=torch.long, device=loss.device)
            values = self._first_non_finite_value = torch.zeros(2, dtype=torch.float32, device=loss.device)
        hit = (steps[slot] < 0) & ~torch.isfinite(loss)  # no host sync: the first bad step stays on the device
        steps[slot] = torch.where(hit, step, steps[slot])
        values[slot] = torch.where(hit, loss.detach().float(), values[slot])

    def _loss_message(self, slot: int, step: int, value: float, action: str = "") -> str:
        lr = "model.critic_lr" if slot == 0 else "model.actor_lr"
        return (
            f"non-finite {self._LOSS_NAMES[slot]} ({value}) at training step {step}{action}; "
            f"try a lower {lr} or check the scale of the rewards and observations"
        )

    def check_finite(self, state_dict: dict[str, Tensor] | None = None, action: str = "") -> None:
        """Raise :class:`NonFiniteError` if a loss was non-finite since the last check or a
        weight is non-finite (one host sync)."""
        if self._first_non_finite is not None and self._first_non_finite_value is not None:
            for slot, step in enumerate(self._first_non_finite.tolist()):
                if step >= 0:
                    value = float(self._first_non_finite_value[slot])
                    raise NonFiniteError(self._loss_message(slot, step, value, action))
        tensors = {k: v for k, v in (state_dict if state_dict is not None else self.state_dict()).items()
                   if isinstance(v, Tensor) and v.is_floating_point()}
        if not tensors:
            return
        finite = torch.stack([torch.isfinite(v).all() for v in tensors.values()]).tolist()
        if not all(finite):
            name = next(k for k, ok in zip(tensors, finite) if not ok)
            raise NonFiniteError(f"non-finite weights in {name} at training step {self.global_step}{action}")

    def on_train_end(self) -> None:
        self.check_finite()

    def on_validation_start(self) -> None:
        self.check_finite(action="; not evaluating them")

    def on_test_start(self) -> None:
        self.check_finite(action="; not evaluating them")

    # ------------------------------------------------------------------ random streams
    def _standard_normal(self, like: Tensor) -> Tensor:
        """Target-policy noise from the module's own generator (saved in checkpoints)."""
        if self._noise_gen is None or self._noise_gen.device != like.device:
            self._noise_gen = torch.Generator(device=like.device)
            if self._noise_gen_state is not None:
                self._noise_gen.set_state(self._noise_gen_state)
                self._noise_gen_state = None
            else:
                self._noise_gen.manual_seed(int(torch.randint(2**62, (1,)).item()))
        return torch.randn(like.shape, generator=self._noise_gen, device=like.device, dtype=torch.float32)

    def on_train_start(self) -> None:
        # Under DDP every rank samples its own replay, and each of the two losses of a training
        # step has its own backward: DistributedDataParallel's reducer (one synchronised backward
        # per forward, every parameter used) does not fit. training_step switches it off and
        # average_gradients averages each optimizer's gradients before its step instead.
        model = self.trainer.model
        ddp = model if isinstance(model, torch.nn.parallel.DistributedDataParallel) else None
        object.__setattr__(self, "_ddp_wrapper", ddp)  # a reference, not a submodule
        direct = self.direct_update
        self._direct = direct_update_possible(self.trainer, self) if direct is None else direct

    def on_fit_start(self) -> None:
        # draw the noise seed now, in a fixed order relative to the other seeded streams
        if self._noise_gen is None:
            self._standard_normal(torch.empty(0, device=self.device))

    # ------------------------------------------------------------------ logging
    def _track(self, loss_q: Tensor, q: Tensor, loss_pi: Tensor | None) -> None:
        """Accumulate training statistics on the device; log their means every
        ``trainer.log_every_n_steps`` steps (no host sync on the other steps)."""
        critic_losses, q1s, actor_losses = self._train_hist
        # views only (no kernel runs), but copies of a CUDA graph's outputs: its next replay overwrites them
        keep = (lambda t: t.detach().clone()) if self._graph_outputs else Tensor.detach
        critic_losses.append(keep(loss_q))
        q1s.append(keep(q[0]))
        if loss_pi is not None:
            actor_losses.append(keep(loss_pi))
        if len(critic_losses) >= 256:
            self._fold_train_stats()
        every = max(1, self.trainer.log_every_n_steps)
        if self.global_step % every == 0:
            if self._first_non_finite is not None:
                self.check_finite({})  # the deferred loss check; this step syncs anyway
            sums, counts = self._fold_train_stats(), self._train_counts
            metrics = {"train/critic_loss": sums[0] / counts[0], "train/q": sums[1] / counts[1]}
            if self.hparams.get("exploration_noise_final") is not None:
                metrics["train/exploration_noise"] = self.exploration_noise_at(self.global_step)
            if self.hparams.get("lr_final_factor", 1.0) != 1.0:
                metrics["train/lr_factor"] = self.lr_factor_at(self.global_step)
            if counts[2]:
                metrics["train/actor_loss"] = sums[2] / counts[2]
            self.log_dict(metrics, on_step=True, on_epoch=False)
            self._train_sums, self._train_counts = None, [0, 0, 0]

    def _fold_train_stats(self) -> Tensor:
        """Add the histories to the running sums (a few kernels every 256 steps) and return them."""
        hist, counts = self._train_hist, self._train_counts
        if self._train_sums is None:
            self._train_sums = torch.zeros(3, device=self.device)
        parts = [torch.stack(hist[0]).sum() if hist[0] else None, torch.cat(hist[1]).sum() if hist[1] else None,
                 torch.stack(hist[2]).sum() if hist[2] else None]
        for i, part in enumerate(parts):
            if part is not None:
                self._train_sums[i] += part
        counts[0] += len(hist[0])
        counts[1] += sum(x.numel() for x in hist[1])
        counts[2] += len(hist[2])
        for h in hist:
            h.clear()
        return self._train_sums

    # ------------------------------------------------------------------ evaluation
    def setup(self, stage: str) -> None:
        # Lightning writes the hyperparameters with a placeholder hp_metric of -1; the real
        # one (the mean validation return) is written at the first validation instead.
        self._hparams_written = False
        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger._default_hp_metric = False

    def on_validation_epoch_end(self) -> None:
        """``hp_metric`` = mean validation return, so TensorBoard's HPARAMS tab compares runs by it."""
        if self.trainer.sanity_checking or self.trainer.state.fn != "fit" or self.val_return.update_count == 0:
            return
        value = float(self.val_return.compute())
        self.log("hp_metric", value, sync_dist=True)  # the same value on every rank (val_return is synced)
        if getattr(self, "_hparams_written", True) or not self.trainer.is_global_zero:
            return
        self._hparams_written = True
        from lightning.fabric.utilities.logger import _flatten_dict, _sanitize_params
        from torch.utils.tensorboard.summary import hparams

        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                params = _sanitize_params(_flatten_dict(dict(logger.hparams)))
                writer = logger.experiment._get_file_writer()
                for summary in hparams(params, {"hp_metric": value}):
                    writer.add_summary(summary, self.global_step)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """One batch is one finished deterministic episode (played by the eval data stream)."""
        self.val_return.update(batch["return"])
        self.val_length.update(batch["length"])
        self.log("val/return", self.val_return, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/episode_length", self.val_length, on_step=False, on_epoch=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.test_returns.update(batch["return"])
        self.test_lengths.update(batch["length"])
        self.test_seconds.update(batch["seconds"])

    def on_test_epoch_end(self) -> None:
        returns = self.test_returns.compute().float().reshape(-1)
        lengths = self.test_lengths.compute().float().reshape(-1)
        std = returns.std(unbiased=False) if returns.numel() > 1 else torch.zeros(())
        self.log_dict(
            {
                "test/return": returns.mean(),
                "test/return_std": std,
                "test/return_min": returns.min(),
                "test/return_max": returns.max(),
                "test/episode_length": lengths.mean(),
                "test/episodes": float(returns.numel()),
                "test/seconds_per_episode": self.test_seconds.compute(),
            }
        )
        self.test_episodes = {"episode_returns": returns.tolist(), "episode_lengths": lengths.tolist()}
        self.test_returns.reset()
        self.test_lengths.reset()
        self.test_seconds.reset()

    # ------------------------------------------------------------------ optimizers and state
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        # order matters: the first (critic) optimizer's steps are the ones global_step counts
        # fused Adam (one kernel over all parameters) on CPU and CUDA, the multi-tensor one elsewhere
        impl = {"fused": True} if self.device.type in ("cpu", "cuda") else {"foreach": True}
        critic_opt = torch.optim.Adam(self.critic.parameters(), lr=self.hparams.critic_lr, **impl)
        actor_opt = torch.optim.Adam(self._actor_own_parameters(), lr=self.hparams.actor_lr, **impl)
        return [critic_opt, actor_opt]

    def _actor_own_parameters(self) -> list[torch.nn.Parameter]:
        """The actor's parameters without an encoder it shares with the critics (theirs to train)."""
        shared = {id(p) for p in self.critic.parameters()}
        return [p for p in self.actor.parameters() if id(p) not in shared]

    def train(self, mode: bool = True) -> TD3:
        super().train(mode)
        self.actor_target.eval()  # targets are never in train mode
        self.critic_target.eval()
        return self

    def configure_callbacks(self) -> list[L.Callback]:
        """Add the environment loop when the trainer has none (plain ``Trainer`` use)."""
        from td3_lightning.callbacks import EnvLoop

        trainer = getattr(self, "_trainer", None)
        if trainer is not None and any(isinstance(c, EnvLoop) for c in trainer.callbacks):
            return []
        return [EnvLoop()]

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # never replace a good checkpoint with one holding non-finite weights
        not_written = f"; the checkpoint at step {self.global_step} was not written"
        self.check_finite(checkpoint.get("state_dict"), action=not_written)
        checkpoint[CHECKPOINT_KEY] = {
            "format_version": FORMAT_VERSION,
            "algorithm": "TD3",
            "num_critic_updates": self.num_critic_updates,
            "num_actor_updates": self.num_actor_updates,
            "noise_rng": self._noise_gen.get_state() if self._noise_gen is not None else None,
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = check_checkpoint_meta(checkpoint)
        self.num_critic_updates = int(meta.get("num_critic_updates", 0))
        self.num_actor_updates = int(meta.get("num_actor_updates", 0))
        self._noise_gen, self._noise_gen_state = None, meta.get("noise_rng")


_UPDATE_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")


def direct_update_possible(trainer: L.Trainer, module: L.LightningModule) -> bool:
    """Whether ``loss.backward()`` and ``optimizer.step()`` do all that Lightning's
    ``manual_backward`` and ``LightningOptimizer.step`` would: one device, 32-bit precision
    (no loss scaling or autocast), no profiler, and no callback or module hook that watches
    backward passes or optimizer steps. Lightning's path costs 0.2-0.5 ms per training step
    in hook dispatch on the 2-core CPU, 3-8% of a LunarLander step."""
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.profilers import PassThroughProfiler
    from lightning.pytorch.strategies import SingleDeviceStrategy
    from lightning.pytorch.utilities.model_helpers import is_overridden

    strategy = trainer.strategy
    if type(strategy) is not SingleDeviceStrategy or type(strategy.precision_plugin) is not Precision:
        return False
    if not isinstance(trainer.profiler, PassThroughProfiler) or getattr(module, "_fabric", None) is not None:
        return False
    if any(is_overridden(h, cb, L.Callback) for cb in trainer.callbacks for h in _UPDATE_HOOKS):
        return False
    if any(is_overridden(h, module, L.LightningModule) for h in (*_UPDATE_HOOKS, "backward")):
        return False
    return all(hasattr(opt, "_on_before_step") and hasattr(opt, "_on_after_step")
               for opt in strategy._lightning_optimizers)


def check_checkpoint_meta(checkpoint: Any, name: str = "the checkpoint") -> dict[str, Any]:
    """The ``td3_lightning`` section of a loaded checkpoint; :class:`UserInputError` with one
    line if it is not a TD3 checkpoint of the format this version reads."""
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        raise UserInputError(f"{name} is not a Lightning checkpoint (no 'state_dict')")
    meta = checkpoint.get(CHECKPOINT_KEY)
    if not isinstance(meta, dict):
        raise UserInputError(
            f"{name} was not written by td3_lightning (a Lightning checkpoint without the '{CHECKPOINT_KEY}' section)"
        )
    if meta.get("algorithm") != "TD3":
        raise UserInputError(f"{name} holds a '{meta.get('algorithm')}' model, not TD3")
    if meta.get("format_version") != FORMAT_VERSION:
        raise UserInputError(
            f"{name} has format version {meta.get('format_version')}; this td3_lightning reads version {FORMAT_VERSION}"
        )
    return meta


def _check_hparams(**hp: Any) -> None:
    """One clear line for every hyperparameter out of range."""
    low, high = hp["action_low"], hp["action_high"]
    rules = [
        (hp["encoder"] in ("auto", "cnn", "none"), f"model.encoder must be auto, cnn or none, got {hp['encoder']!r}"),
        (len(hp["obs_shape"]) == 1 or (len(hp["obs_shape"]) == 3 and hp["encoder"] != "none"),
         f"observations of shape {tuple(hp['obs_shape'])} need model.encoder auto or cnn (images (C, H, W)); "
         "the MLP networks alone take 1-D observations"),
        (hp["encoder"] != "cnn" or len(hp["obs_shape"]) == 3,
         f"model.encoder cnn needs image observations (C, H, W), got shape {tuple(hp['obs_shape'])}"),
        (len(hp["obs_shape"]) != 3 or min(hp["obs_shape"][1:]) >= MIN_IMAGE_SIZE,
         f"images of {hp['obs_shape'][1:]} pixels are too small for the CNN encoder: it needs at least "
         f"{MIN_IMAGE_SIZE}x{MIN_IMAGE_SIZE} "
         "(set the env's resize option higher)"),
        (hp["compile_mode"] in COMPILE_MODES,
         f"model.compile_mode must be one of {', '.join(COMPILE_MODES)}, got {hp['compile_mode']!r}"),
        (hp["encoder_features"] >= 1, f"model.encoder_features must be >= 1, got {hp['encoder_features']}"),
        (len(low) == len(high) and len(low) > 0, "action_low and action_high must have the same, non-zero length"),
        (all(lo < hi for lo, hi in zip(low, high)), f"every action_low must be < action_high, got {low} and {high}"),
        (len(hp["hidden_dims"]) > 0 and all(h > 0 for h in hp["hidden_dims"]), "model.hidden_dims must be positive sizes"),
        (hp["num_critics"] >= 2, f"model.num_critics must be at least 2 (clipped double-Q), got {hp['num_critics']}"),
        (0.0 <= hp["gamma"] <= 1.0, f"model.gamma must be in [0, 1], got {hp['gamma']}"),
        (0.0 < hp["tau"] <= 1.0, f"model.tau must be in (0, 1], got {hp['tau']}"),
        (hp["policy_noise"] >= 0, f"model.policy_noise must be >= 0, got {hp['policy_noise']}"),
        (hp["noise_clip"] >= 0, f"model.noise_clip must be >= 0, got {hp['noise_clip']}"),
        (hp["policy_freq"] >= 1, f"model.policy_freq must be >= 1, got {hp['policy_freq']}"),
        (hp["exploration_noise"] >= 0, f"model.exploration_noise must be >= 0, got {hp['exploration_noise']}"),
        (hp["actor_lr"] > 0 and hp["critic_lr"] > 0, "model.actor_lr and model.critic_lr must be > 0"),
        (hp["exploration_noise_final"] is None or hp["exploration_noise_final"] >= 0,
         f"model.exploration_noise_final must be >= 0, got {hp['exploration_noise_final']}"),
        (hp["lr_final_factor"] > 0, f"model.lr_final_factor must be > 0, got {hp['lr_final_factor']}"),
        (hp["schedule_steps"] is None or hp["schedule_steps"] >= 1,
         f"model.schedule_steps must be >= 1, got {hp['schedule_steps']}"),
    ]
    for ok, message in rules:
        if not ok:
            raise UserInputError(message)
