"""TD3 (Fujimoto et al., 2018) as a LightningModule: the networks, their optimizers and the update.

The module never touches an environment: the ``EnvLoop`` callback steps the envs and fills the
replay buffer, and ``training_step`` receives replay batches. What is not TD3 lives beside it and
wraps the update from outside: the non-finite guard (``guards.py``), the training statistics
(``stats.py``), the schedules (``schedules.py``), the path around Lightning's hooks
(``_lightning.py``) and ``torch.compile`` (:meth:`TD3.on_train_start`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor
from torchmetrics import CatMetric, MeanMetric

from td3_lightning import _lightning, checkpointing
from td3_lightning.distributed import average_gradients, without_reducer_sync
from td3_lightning.errors import NonFiniteError, UserInputError
from td3_lightning.guards import LossGuard, check_finite_weights
from td3_lightning.networks import MIN_IMAGE_SIZE, Actor, CriticEnsemble, PixelEncoder
from td3_lightning.schedules import LinearSchedule
from td3_lightning.stats import TrainingStatistics

COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CRITIC, ACTOR = 0, 1  # optimizer indices (the critic's steps are the ones global_step counts)

__all__ = ["TD3", "NonFiniteError", "COMPILE_MODES"]


class TD3(L.LightningModule):
    """Twin Delayed DDPG with manual optimization.

    One ``training_step`` is one critic update on one replay batch (the ``EnvLoop`` callback
    takes the environment step before it); every ``policy_freq`` steps the actor is updated
    through the first critic and all targets track their networks by Polyak averaging.
    ``trainer.global_step`` counts training steps, i.e. environment steps after the warm-up.

    A non-finite loss stops training with a :class:`NonFiniteError` (see ``guards.py``); a
    checkpoint with non-finite weights is never written.

    Args:
        obs_shape: shape of one observation (from the env; linked automatically by the CLI).
        action_low: lower action bounds (from the env; linked automatically by the CLI).
        action_high: upper action bounds (from the env; linked automatically by the CLI).
        critic_obs_shape: shape of the critics' privileged observation (linked from
            ``data.privileged_critic``; None: the critics see what the actor sees). With it the
            critics and their targets are MLPs on the privileged vector (batch keys
            ``critic_obs``, ``next_critic_obs``), and the actor keeps its own encoder, trained
            by the actor's loss: asymmetric actor-critic.
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
        preactivation_penalty: weight of a term added to the actor's loss: the mean square of the
            actor's output before the tanh. Why: while the critic is still nearly flat (early
            training, or rewards that are the same for most actions), Adam moves the actor's output
            at its full step size in whatever direction the critic's small gradient points, the
            tanh saturates and its gradient vanishes, and the action stays pinned at a bound for
            the rest of the run (watch ``train/actor_preactivation``: a value of 25 means a
            typical output of 5, a tanh of 0.9999). The term pulls the output back to where the
            tanh still passes the critic's gradient, and is too small to matter once the critic's
            gradient is of order 1 (a weight of 1e-3 still allows outputs of 3, 99.5% of the
            bound). 0 = off.
        reset_steps: training steps after which the networks start over: the actor, the critics,
            their targets (and encoders) are drawn afresh as at the start and both Adam states
            restart from zero; the replay buffer, the schedules and the step counts carry on
            (Nikishin et al., 2022, "The Primacy Bias in Deep Reinforcement Learning"). Why: what
            the networks learned from the first, poor data can hold a run in a bad habit (the car
            braking to a standstill on the grass) that more data no longer undoes; fresh networks
            trained on the whole buffer learn from it without that history. ``[]`` = never.
        encoder: ``auto`` (a CNN for image observations ``(C, H, W)``, none for vectors),
            ``cnn`` or ``none``.
        encoder_features: length of the CNN encoder's feature vector.
        shared_encoder: with a CNN, the actor uses the critics' encoder (trained by the critic
            loss only; the actor's gradient does not reach it) instead of its own. Without
            effect with ``critic_obs_shape`` (the critics then have no encoder).
        state_prediction: with ``critic_obs_shape`` and an actor encoder: weight of an auxiliary
            loss added to the actor's, the mean squared error of a linear head that predicts the
            privileged observation from the actor's encoder features. It gives the encoder a
            dense supervised signal besides the policy gradient; the head is not part of the
            policy (not exported). 0 = off.
        teacher: a td3_lightning checkpoint whose actor reads the privileged observation (for
            the car from pixels: the shipped state driver,
            ``td3_lightning/checkpoints/car_random_tracks.ckpt``; a relative path is also looked
            up beside the installed package). With ``critic_obs_shape``, the actor's loss adds
            ``teacher_weight`` times the mean squared distance, in half action ranges, between the
            actor's action on the observation and the teacher's on the privileged observation of
            the same replayed step. The states are the ones the actor's own driving reached, so
            the teacher labels the actor's mistakes too (as DAgger, Ross et al., 2011). It is read
            when fitting starts and is not part of the checkpoint or the policy. None = off.
        teacher_weight: weight of the teacher's term (with ``teacher``).
        random_shift: image augmentation (DrQ, Kostrikov et al., 2020): every image observation
            of a replay batch is padded by this many pixels (edge pixels repeated) and cropped
            back at a random offset, independently for ``obs`` and ``next_obs``. 0 = off.
        flush_denormal: treat float32 values below 1.2e-38 as zero on the CPU
            (``torch.set_flush_denormal``, for the whole process, set when the module is created
            so that the CPU threads torch starts afterwards inherit it). Such values appear in
            the update, and x86 CPUs compute on them many times slower (see
            ``benchmarks/README.md``). No effect on GPU math. ``false`` leaves the setting alone.
        compile_mode: ``torch.compile`` the whole training step (target, critic loss and step,
            actor loss and step, Polyak update) with this mode: ``none`` (eager), ``default``,
            ``max-autotune-no-cudagraphs``, ``max-autotune`` or ``reduce-overhead`` (the last two
            replay CUDA graphs on a GPU). It needs one device and 32-bit precision; compilation
            happens at the first training steps and takes a while. Meant for GPUs, where it
            removes per-kernel launch costs; on a small CPU eager is faster. torch.compile splits
            the step at each backward pass and optimizer step, so the update runs as several
            compiled pieces (see ``benchmarks/README.md``).
    """

    def __init__(
        self,
        obs_shape: list[int],
        action_low: list[float],
        action_high: list[float],
        critic_obs_shape: list[int] | None = None,
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
        preactivation_penalty: float = 0.0,
        reset_steps: list[int] = [],  # noqa: B006 - list default shows in --help
        encoder: str = "auto",
        encoder_features: int = 50,
        shared_encoder: bool = True,
        state_prediction: float = 0.0,
        teacher: str | None = None,
        teacher_weight: float = 1.0,
        random_shift: int = 0,
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
            compile_mode=compile_mode, critic_obs_shape=critic_obs_shape, random_shift=random_shift,
            state_prediction=state_prediction, teacher=teacher, teacher_weight=teacher_weight,
            preactivation_penalty=preactivation_penalty, reset_steps=reset_steps,
        )
        self.save_hyperparameters()
        self.automatic_optimization = False
        if flush_denormal:
            # before the networks are built: the CPU thread pool starts with their first large
            # operation, and new threads inherit the setting (set later, only this thread has it)
            torch.set_flush_denormal(True)

        obs_dim, action_dim = int(obs_shape[0]), len(action_low)
        cnn = encoder == "cnn" or (encoder == "auto" and len(obs_shape) == 3)
        privileged = critic_obs_shape is not None  # asymmetric: the critics see a state vector
        critic_encoder = PixelEncoder(obs_shape, encoder_features) if cnn and not privileged else None
        share = cnn and shared_encoder and not privileged
        if share:
            actor_encoder = critic_encoder
        else:
            actor_encoder = PixelEncoder(obs_shape, encoder_features) if cnn else None
        self.actor = Actor(obs_dim, action_low, action_high, hidden_dims, actor_encoder, detach_encoder=share)
        critic_dim = int(critic_obs_shape[0]) if privileged else obs_dim
        self.critic = CriticEnsemble(critic_dim, action_dim, hidden_dims, num_critics, critic_encoder)
        # auxiliary: the actor's encoder features -> the privileged observation (state_prediction)
        self.state_head = (torch.nn.Linear(encoder_features, critic_dim)
                           if privileged and cnn and state_prediction > 0 else None)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False).eval()
        # the teacher's actor (teacher): loaded in on_fit_start, kept out of the state dict
        self._teacher: tuple[torch.nn.Module, ...] = ()
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False).eval()

        self.exploration_schedule = LinearSchedule(
            exploration_noise, exploration_noise if exploration_noise_final is None else exploration_noise_final,
            schedule_steps)
        self.lr_schedule = LinearSchedule(1.0, lr_final_factor, schedule_steps)
        self.num_critic_updates = 0
        self.num_actor_updates = 0
        self.guard = LossGuard()
        self.stats = TrainingStatistics()
        self._noise_gen: torch.Generator | None = None
        self._noise_gen_state: Tensor | None = None  # restored from a checkpoint, applied on first use
        self._direct = False  # backward and steps around Lightning's hooks (chosen in on_train_start)
        self._check_each_loss = True  # the guard checks every loss before its backward (else it records them)
        self._compiled: Any | None = None  # the compiled td3_update (compile_mode)
        self._optimizers: list[Any] = []  # the LightningOptimizers of the training step being taken
        self._reset_steps = frozenset(reset_steps)
        self._step_taken = 0  # its number (global_step + 1)

        self.val_return = MeanMetric()
        self.val_length = MeanMetric()
        self.test_returns = CatMetric()
        self.test_lengths = CatMetric()
        self.test_seconds = MeanMetric()
        self.test_successes = CatMetric(nan_strategy="disable")
        # the last test's episodes, {"episode_returns": [...], "episode_lengths": [...], ...}, for TestReport
        self.test_episodes: dict[str, list[float]] = {}

    # ================================================================== the TD3 update
    @torch.no_grad()
    def td_target(self, batch: dict[str, Tensor], noise: Tensor | None = None) -> Tensor:
        """``y = r + gamma * (1 - terminated) * min_i Q'_i(s', clip(pi'(s') + clip(eps, -c, c)))``.

        With n-step transitions (``data.n_step``) ``r`` is the discounted sum
        ``r_0 + gamma r_1 + ... + gamma^(m-1) r_(m-1)`` of their ``m`` steps and the bootstrap
        is discounted by ``gamma^m``; ``s'`` and ``terminated`` are the last step's.

        Args:
            batch: replay batch with ``reward``, ``next_obs``, ``terminated`` and ``action``
                (and ``next_critic_obs``, the critics' view of ``s'``, with a privileged critic);
                n-step batches have ``reward`` of shape ``(B, n)`` and ``horizon`` ``m``.
            noise: standard-normal draws shaped like ``batch["action"]`` (drawn here if None).
        """
        hp = self.hparams
        scale, bias = self.actor.action_scale, self.actor.action_bias
        if noise is None:
            noise = self._standard_normal(batch["action"])
        eps = (noise * hp.policy_noise).clamp(-hp.noise_clip, hp.noise_clip) * scale  # target policy smoothing
        next_action = torch.clamp(self.actor_target(batch["next_obs"]) + eps, bias - scale, bias + scale)
        next_s = batch.get("next_critic_obs", batch["next_obs"])
        next_q = self.critic_target(next_s, next_action).min(dim=0).values  # clipped double Q
        not_done = 1.0 - batch["terminated"].float()  # a time limit (truncated) still bootstraps
        reward, discount = batch["reward"], hp.gamma
        if "horizon" in batch:  # n-step: rewards (B, n), zero past each transition's last step
            powers = torch.arange(reward.shape[1], device=reward.device, dtype=reward.dtype)
            reward, discount = (reward * hp.gamma**powers).sum(dim=1), hp.gamma ** batch["horizon"]
        return reward + discount * not_done * next_q

    def critic_loss(self, batch: dict[str, Tensor], noise: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``sum_i mean (Q_i(s, a) - y)^2``; also returns the critics' Q values ``(num_critics, batch)``."""
        q = self.critic(batch.get("critic_obs", batch["obs"]), batch["action"])
        return (q - self.td_target(batch, noise)).pow(2).mean(dim=1).sum(), q

    def actor_loss(self, batch: dict[str, Tensor]) -> Tensor:
        """``-mean Q_1(s, pi(s))`` with the critic's weights held fixed, plus the weighted
        state-prediction error of the actor's encoder (``state_prediction``), distance to the
        teacher's actions (``teacher``) and mean square of the actor's output before the tanh
        (``preactivation_penalty``); logged as ``train/state_prediction_loss``,
        ``train/teacher_distance`` and ``train/actor_preactivation`` (the last one always)."""
        critic_s = batch.get("critic_obs", batch["obs"])
        features = self.actor.features(batch["obs"])
        preactivation = self.actor.net(features)
        action = self.actor.squash(preactivation)
        loss = -self.critic.q1(critic_s, action, detach_params=True).mean()
        terms: dict[str, Tensor] = {"actor_preactivation": preactivation.pow(2).mean()}
        if self.hparams.preactivation_penalty > 0:
            loss = loss + self.hparams.preactivation_penalty * terms["actor_preactivation"]
        if self.state_head is not None:
            terms["state_prediction_loss"] = (self.state_head(features) - critic_s).pow(2).mean()
            loss = loss + self.hparams.state_prediction * terms["state_prediction_loss"]
        if self._teacher:
            terms["teacher_distance"] = self.teacher_distance(action, critic_s)
            loss = loss + self.hparams.teacher_weight * terms["teacher_distance"]
        if not torch.compiler.is_compiling():  # logged from eager steps (a compiled step returns the loss only)
            for name, value in terms.items():
                self.stats.add_term(name, value)
        return loss

    def teacher_distance(self, action: Tensor, critic_s: Tensor) -> Tensor:
        """Mean squared distance, in half action ranges, between the actor's ``action`` and the
        teacher's on the privileged observations ``critic_s`` of the same steps."""
        with torch.no_grad():
            target = self._teacher[0](critic_s)
        return ((action - target) / self.actor.action_scale).pow(2).sum(dim=1).mean()

    @torch.no_grad()
    def update_targets(self) -> None:
        """Polyak averaging ``theta' <- (1 - tau) theta' + tau theta`` of every target network."""
        online = [*self.actor.parameters(), *self.critic.parameters()]
        target = [*self.actor_target.parameters(), *self.critic_target.parameters()]
        torch._foreach_lerp_(target, online, self.hparams.tau)

    def td3_update(self, batch: dict[str, Tensor], noise: Tensor, update_actor: bool
                   ) -> tuple[Tensor, Tensor, Tensor | None]:
        """One TD3 update on a replay batch, in the paper's order (Algorithm 1).

        Args:
            batch: ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated`` (and
                ``critic_obs``, ``next_critic_obs``: what the critics see, with a privileged critic).
            noise: standard-normal draws for the target-policy smoothing, shaped like the actions.
            update_actor: the delayed step: the actor and the targets are updated (every
                ``policy_freq`` critic updates).

        Returns:
            the critic loss, the critics' Q values and the actor loss (None without the actor step).
        """
        # critic: regress every Q_i(s, a) on the target y (clipped double Q, smoothed target policy)
        critic_loss, q = self.critic_loss(batch, noise)
        self.optimize(CRITIC, critic_loss)
        actor_loss = None
        if update_actor:
            # delayed policy update: ascend Q_1(s, pi(s)), then the targets follow their networks
            actor_loss = self.actor_loss(batch)
            self.optimize(ACTOR, actor_loss)
            self.update_targets()
        return critic_loss, q, actor_loss

    # ================================================================== the training step around it
    def training_step(self, batch: dict[str, Tensor] | Iterable[dict[str, Tensor]], batch_idx: int) -> None:
        """One TD3 update per replay batch; a chunk of batches (``data.steps_per_batch``) is one
        update per batch it yields."""
        self._optimizers = self.optimizers()  # type: ignore[assignment]
        without_reducer_sync(self.trainer)  # each loss has its own backward; see average_gradients
        update = self._compiled or self.td3_update
        for one in (batch,) if isinstance(batch, dict) else batch:
            step = self._step_taken = self.global_step + 1  # the training step being taken
            if step - 1 in self._reset_steps:  # after training step step - 1
                self.reset_networks()
            if self.hparams.get("random_shift", 0):
                one = self.augment(one)
            self._set_learning_rates(step - 1)
            update_actor = (self.num_critic_updates + 1) % self.hparams.policy_freq == 0
            critic_loss, q, actor_loss = update(one, self._standard_normal(one["action"]), update_actor)
            if self._direct:  # a step taken around LightningOptimizer.step is counted here
                _lightning.count_optimizer_step(self._optimizers[CRITIC])
            if not self._check_each_loss:
                self.guard.record(CRITIC, critic_loss, step)
                if actor_loss is not None:
                    self.guard.record(ACTOR, actor_loss, step)
            self.num_critic_updates += 1
            self.num_actor_updates += int(update_actor)
            self.track_statistics(critic_loss, q, actor_loss)

    def reset_networks(self) -> None:
        """Start the networks over (``reset_steps``): fresh weights for the actor, the critics
        and their targets, as a new module would draw them, and zeroed Adam states.

        The weights are copied into the existing tensors, so optimizers and compiled steps keep
        working on them. The fresh module is built from the saved hyperparameters, so a subclass
        needs every constructor argument among them. The seed of the fresh draw comes from the
        module's own random stream (saved in checkpoints), so a resumed run resets to the same
        weights."""
        gen = self._noise_generator(self.device)
        seed = int(torch.randint(2**62, (1,), generator=gen, device=gen.device).item())
        seed = self.trainer.strategy.broadcast(seed, src=0)  # under DDP every rank takes rank 0's draw
        hparams = {k: v for k, v in self.hparams.items() if not k.startswith("_")}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            fresh = type(self)(**{**hparams, "teacher": None, "flush_denormal": False})
        mine, new = self.state_dict(), fresh.state_dict()
        with torch.no_grad():
            for name, tensor in mine.items():
                if name in new and tensor.is_floating_point():
                    tensor.copy_(new[name])
        for optimizer in self.optimizers():
            for state in optimizer.optimizer.state.values():
                for value in state.values():
                    if torch.is_tensor(value):
                        value.zero_()
        self.print(f"step {self.global_step}: networks drawn afresh and Adam states zeroed (model.reset_steps); "
                   "the replay buffer is kept")

    def augment(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """``batch`` with its image observations randomly shifted (``random_shift``)."""
        pad = self.hparams.random_shift
        out = dict(batch)
        for key in ("obs", "next_obs"):
            if batch[key].dim() == 4:
                out[key] = random_shift(batch[key], pad, self._noise_generator(batch[key].device))
        return out

    def track_statistics(self, critic_loss: Tensor, q: Tensor, actor_loss: Tensor | None) -> None:
        """Keep the step's losses and first-critic Q values on the device; every
        ``trainer.log_every_n_steps`` steps log their means (the only host sync they cost) and
        run the deferred loss check."""
        self.stats.add(critic_loss, q[0], actor_loss)
        if self.global_step % max(1, self.trainer.log_every_n_steps):
            return
        self.guard.raise_recorded()
        metrics: dict[str, Any] = self.stats.means()
        if self.exploration_schedule.final != self.exploration_schedule.start:
            metrics["train/exploration_noise"] = self.exploration_noise_at(self.global_step)
        if self.lr_schedule.final != self.lr_schedule.start:
            metrics["train/lr_factor"] = self.lr_factor_at(self.global_step)
        self.log_dict(metrics, on_step=True, on_epoch=False)

    def optimize(self, which: int, loss: Tensor) -> None:
        """``zero_grad``, backward and step of the critic (``CRITIC``) or actor (``ACTOR``) optimizer.

        On a plain single-device 32-bit run the backward and the step go around Lightning's
        hooks (``loss.backward()``, the torch optimizer's ``step``); otherwise through them
        (``manual_backward``, the strategy's optimizer step: precision plugins, loss scaling).
        Only the critic's steps advance ``global_step``, so that it counts training steps.
        """
        if self._check_each_loss:
            self.guard.check_now(which, loss, self._step_taken)
        optimizer = self._optimizers[which]
        optimizer.zero_grad(set_to_none=True)
        if self._direct:
            loss.backward()
            optimizer.optimizer.step()
            return
        self.manual_backward(loss)
        # no-op in one process
        average_gradients(self.trainer, self.critic if which == CRITIC else torch.nn.ModuleList(self._actor_modules()))
        if which == CRITIC:
            optimizer.step()  # counted
        else:
            self.trainer.strategy.optimizer_step(optimizer.optimizer, _noop_closure, model=self)

    # the path around Lightning's backward / optimizer-step hooks: None chooses it when they would
    # do nothing (see direct_update_possible); True / False force the direct / the hooked path
    direct_update: bool | None = None
    # None: check every loss before its backward on the CPU (a host sync there is nearly free) and
    # record them on accelerators; True / False force one way
    finite_check_every_step: bool | None = None

    def on_train_start(self) -> None:
        max_steps = self.trainer.max_steps
        late = sorted(k for k in self._reset_steps if max_steps is not None and 0 < max_steps <= k)
        if late:
            rank_zero_warn(f"model.reset_steps {late} lie at or after trainer.max_steps ({max_steps}): "
                           "those resets never happen")
        direct = self.direct_update
        self._direct = direct_update_possible(self.trainer, self) if direct is None else direct
        every = self.finite_check_every_step
        self._check_each_loss = self.device.type == "cpu" if every is None else every
        mode = self.hparams.get("compile_mode", "none")
        if mode != "none":
            if not self._direct:
                raise UserInputError(
                    f"model.compile_mode {mode} compiles the whole training step, which needs one device, 32-bit "
                    "precision and no callback that watches backward passes or optimizer steps; set "
                    "model.compile_mode none"
                )
            self._check_each_loss = False  # a host sync inside the step would break the graph
            self.stats.copy_outputs = mode in ("reduce-overhead", "max-autotune") and self.device.type == "cuda"
            self._compiled = _compile(self.td3_update, mode, cuda_graphs=self.stats.copy_outputs)

    def on_fit_start(self) -> None:
        if self.hparams.get("teacher") and not self._teacher:
            self._teacher = (load_teacher(self.hparams.teacher, self.hparams).to(self.device),)
        # draw the noise seed now, in a fixed order relative to the other seeded streams
        if self._noise_gen is None:
            self._standard_normal(torch.empty(0, device=self.device))

    # ------------------------------------------------------------------ schedules and random streams
    def exploration_noise_at(self, step: int) -> float:
        """Exploration noise std (relative to half the action range) at training step ``step``."""
        schedule = self.exploration_schedule
        return schedule.start if schedule.final == schedule.start else schedule.at(step, self._run_length())

    def lr_factor_at(self, step: int) -> float:
        """Multiplier of both learning rates at training step ``step``."""
        schedule = self.lr_schedule
        return schedule.start if schedule.final == schedule.start else schedule.at(step, self._run_length())

    def _run_length(self) -> int | None:
        try:
            trainer = self.trainer
        except RuntimeError:  # not attached to a Trainer
            return None
        return trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None

    def _set_learning_rates(self, step: int) -> None:
        """Both learning rates for training step ``step`` (counted from 0) of the schedule."""
        if self.lr_schedule.final == self.lr_schedule.start:
            return
        factor = self.lr_factor_at(step)
        for which, base in ((CRITIC, self.hparams.critic_lr), (ACTOR, self.hparams.actor_lr)):
            for group in self._optimizers[which].optimizer.param_groups:
                group["lr"] = base * factor

    def _standard_normal(self, like: Tensor) -> Tensor:
        """Target-policy noise from the module's own generator (saved in checkpoints)."""
        gen = self._noise_generator(like.device)
        return torch.randn(like.shape, generator=gen, device=like.device, dtype=torch.float32)

    def _noise_generator(self, device: torch.device) -> torch.Generator:
        """The module's random stream on ``device`` (target noise, image shifts), restored on resume."""
        if self._noise_gen is None or self._noise_gen.device != device:
            self._noise_gen = torch.Generator(device=device)
            if self._noise_gen_state is not None:
                self._noise_gen.set_state(self._noise_gen_state)
                self._noise_gen_state = None
            else:
                self._noise_gen.manual_seed(int(torch.randint(2**62, (1,)).item()))
        return self._noise_gen

    # ------------------------------------------------------------------ the guard
    def check_finite(self, state_dict: dict[str, Tensor] | None = None, action: str = "") -> None:
        """Raise :class:`NonFiniteError` if a loss was non-finite since the last check or a
        weight is non-finite (one host sync)."""
        self.guard.raise_recorded(action)
        check_finite_weights(state_dict if state_dict is not None else self.state_dict(), self.global_step, action)

    def on_train_end(self) -> None:
        self.check_finite()

    def on_validation_start(self) -> None:
        self.check_finite(action="; not evaluating them")

    def on_test_start(self) -> None:
        self.check_finite(action="; not evaluating them")

    # ------------------------------------------------------------------ evaluation
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
        self.test_successes.update(batch.get("success", torch.tensor(float("nan"))))

    def on_test_epoch_end(self) -> None:
        returns = self.test_returns.compute().float().reshape(-1)
        lengths = self.test_lengths.compute().float().reshape(-1)
        successes = self.test_successes.compute().float().reshape(-1)
        std = returns.std(unbiased=False) if returns.numel() > 1 else torch.zeros(())
        metrics = {
            "test/return": returns.mean(),
            "test/return_std": std,
            "test/return_min": returns.min(),
            "test/return_max": returns.max(),
            "test/episode_length": lengths.mean(),
            "test/episodes": float(returns.numel()),
            "test/seconds_per_episode": self.test_seconds.compute(),
        }
        self.test_episodes = {"episode_returns": returns.tolist(), "episode_lengths": lengths.tolist()}
        if not successes.isnan().any():  # the env reports info["is_success"] (CarRacing: the lap was closed)
            metrics["test/success_rate"] = successes.mean()
            self.test_episodes["episode_successes"] = successes.tolist()
        self.log_dict(metrics)
        for metric in (self.test_returns, self.test_lengths, self.test_seconds, self.test_successes):
            metric.reset()

    # ------------------------------------------------------------------ optimizers and state
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        # order matters: the first (critic) optimizer's steps are the ones global_step counts
        # fused Adam (one kernel over all parameters) on CPU and CUDA, the multi-tensor one elsewhere
        impl = {"fused": True} if self.device.type in ("cpu", "cuda") else {"foreach": True}
        critic_opt = torch.optim.Adam(self.critic.parameters(), lr=self.hparams.critic_lr, **impl)
        actor_opt = torch.optim.Adam(self._actor_own_parameters(), lr=self.hparams.actor_lr, **impl)
        return [critic_opt, actor_opt]

    def _actor_modules(self) -> list[torch.nn.Module]:
        """What the actor's optimizer trains: the actor (and the state-prediction head)."""
        return [self.actor] if self.state_head is None else [self.actor, self.state_head]

    def _actor_own_parameters(self) -> list[torch.nn.Parameter]:
        """The actor's parameters without an encoder it shares with the critics (theirs to train)."""
        shared = {id(p) for p in self.critic.parameters()}
        params = [p for m in self._actor_modules() for p in m.parameters()]
        return [p for p in params if id(p) not in shared]

    def train(self, mode: bool = True) -> TD3:
        super().train(mode)
        self.actor_target.eval()  # targets are never in train mode
        self.critic_target.eval()
        return self

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # never replace a good checkpoint with one holding non-finite weights
        self.check_finite(checkpoint.get("state_dict"), action=f"; the checkpoint at step {self.global_step} was not written")
        checkpointing.write_td3_section(
            checkpoint, num_critic_updates=self.num_critic_updates, num_actor_updates=self.num_actor_updates,
            noise_rng=self._noise_gen.get_state() if self._noise_gen is not None else None)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = checkpointing.check_checkpoint_meta(checkpoint)
        self.num_critic_updates = int(meta.get("num_critic_updates", 0))
        self.num_actor_updates = int(meta.get("num_actor_updates", 0))
        self._noise_gen, self._noise_gen_state = None, meta.get("noise_rng")


def load_teacher(path: str, hparams: Any) -> torch.nn.Module:
    """The frozen actor of the checkpoint ``path`` (``model.teacher``), checked against the
    privileged observation and the action bounds of the module with ``hparams``."""
    from importlib.resources import files

    where = Path(path)
    if not where.is_file() and not where.is_absolute():
        beside_package = Path(str(files("td3_lightning"))).parent / where
        where = beside_package if beside_package.is_file() else where
    if not where.is_file():
        raise UserInputError(f"model.teacher: checkpoint file not found: {path}; pass an existing .ckpt file")
    checkpointing.check_checkpoint(where)
    teacher = TD3.load_from_checkpoint(where, map_location="cpu")
    shape, want = list(teacher.hparams.obs_shape), list(hparams.critic_obs_shape or [])
    if shape != want:
        raise UserInputError(
            f"model.teacher {path} reads observations of shape {shape}, but the privileged observation has "
            f"shape {want}; give the checkpoint of a policy trained on the privileged observation's env")
    if [list(teacher.hparams.action_low), list(teacher.hparams.action_high)] != [
            list(hparams.action_low), list(hparams.action_high)]:
        raise UserInputError(
            f"model.teacher {path} acts in [{teacher.hparams.action_low}, {teacher.hparams.action_high}], this env in "
            f"[{hparams.action_low}, {hparams.action_high}]; give a teacher with the same action space (action_mode)")
    return teacher.actor.requires_grad_(False).eval()


def _noop_closure() -> None:
    return None


def random_shift(images: Tensor, pad: int, generator: torch.Generator | None = None) -> Tensor:
    """DrQ's augmentation: each image ``(C, H, W)`` of the batch padded by ``pad`` pixels (edges
    repeated) and cropped back to ``H x W`` at a random offset in ``[0, 2 * pad]`` per axis.
    Keeps the dtype (``uint8`` frames stay ``uint8``)."""
    n, c, h, w = images.shape
    device = images.device
    padded = torch.nn.functional.pad(images.float(), (pad, pad, pad, pad), mode="replicate")
    dx, dy = torch.randint(0, 2 * pad + 1, (2, n, 1), generator=generator, device=device)
    rows = (torch.arange(h, device=device) + dy)[:, None, :, None]  # (n, 1, h, 1)
    cols = (torch.arange(w, device=device) + dx)[:, None, None, :]  # (n, 1, 1, w)
    batch = torch.arange(n, device=device)[:, None, None, None]
    channel = torch.arange(c, device=device)[None, :, None, None]
    return padded[batch, channel, rows, cols].to(images.dtype)


def _compile(update: Any, mode: str, cuda_graphs: bool) -> Any:
    """``torch.compile`` of the whole update; with CUDA graphs, each call starts a new graph step
    (the outputs of the previous one are then free to be overwritten)."""
    compiled = torch.compile(update, mode=mode)
    if not cuda_graphs:
        return compiled

    def step(*args: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args)

    return step


_UPDATE_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")


def direct_update_possible(trainer: L.Trainer, module: L.LightningModule) -> bool:
    """Whether ``loss.backward()`` and ``optimizer.step()`` do all that Lightning's
    ``manual_backward`` and ``LightningOptimizer.step`` would: one device, 32-bit precision
    (no loss scaling or autocast), no profiler, and no callback or module hook that watches
    backward passes or optimizer steps. Lightning's path costs hook dispatch on every step
    (see ``benchmarks/README.md``)."""
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.profilers import PassThroughProfiler
    from lightning.pytorch.strategies import SingleDeviceStrategy
    from lightning.pytorch.utilities.model_helpers import is_overridden

    strategy = trainer.strategy
    if type(strategy) is not SingleDeviceStrategy or type(strategy.precision_plugin) is not Precision:
        return False
    if not isinstance(trainer.profiler, PassThroughProfiler) or _lightning.runs_under_fabric(module):
        return False
    if any(is_overridden(h, cb, L.Callback) for cb in trainer.callbacks for h in _UPDATE_HOOKS):
        return False
    if any(is_overridden(h, module, L.LightningModule) for h in (*_UPDATE_HOOKS, "backward")):
        return False
    return _lightning.step_counting_hooks_exist(trainer)


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
        (hp["critic_obs_shape"] is None or len(hp["critic_obs_shape"]) == 1,
         f"model.critic_obs_shape must be a 1-D shape (a state vector), got {hp['critic_obs_shape']}"),
        (hp["state_prediction"] >= 0, f"model.state_prediction must be >= 0 (0 = off), got {hp['state_prediction']}"),
        (hp["teacher"] is None or hp["critic_obs_shape"] is not None,
         "model.teacher needs a privileged observation for the teacher to read: set data.privileged_critic true "
         "(with an env that offers info['privileged_obs'])"),
        (hp["teacher_weight"] >= 0, f"model.teacher_weight must be >= 0, got {hp['teacher_weight']}"),
        (hp["preactivation_penalty"] >= 0,
         f"model.preactivation_penalty must be >= 0 (0 = off), got {hp['preactivation_penalty']}"),
        (isinstance(hp["reset_steps"], (list, tuple))
         and all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in hp["reset_steps"]),
         f"model.reset_steps must be training steps >= 1, e.g. [60000], got {hp['reset_steps']}"),
        (hp["random_shift"] >= 0, f"model.random_shift must be >= 0 pixels (0 = off), got {hp['random_shift']}"),
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
