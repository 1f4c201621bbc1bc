"""TD3 (Fujimoto et al., 2018) as a LightningModule: the networks, their optimizers and the update.

The module never touches an environment: the ``EnvLoop`` callback steps the envs and fills the
replay buffer, and ``training_step`` receives replay batches. What is not the paper plugs in at
named seams (``extensions/``: actor-loss terms, auxiliary losses, batch transforms, step hooks) or wraps the update
from outside: the optimizer-stepping paths and ``torch.compile`` (``stepping.py``), the non-finite
guard (``guards.py``), training statistics (``stats.py``), schedules (``schedules.py``).
Every option is explained in ``docs/options.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, NamedTuple

import lightning as L
import torch
from torch import Tensor

from td3_lightning import checkpointing
from td3_lightning.batch_renorm import WARMUP_STEPS, training_pass
from td3_lightning.distributed import without_reducer_sync
from td3_lightning.distributional import watch_range
from td3_lightning.errors import NonFiniteError
from td3_lightning.extensions import ActorView, build_extensions, critic_view
from td3_lightning.extensions.policy_checkpoints import policy_checkpoint
from td3_lightning.guards import check_finite_weights
from td3_lightning.hparams import check_hparams
from td3_lightning.metrics import EpisodeMetrics
from td3_lightning.networks import CriticEnsemble, build_networks, trained_parameters
from td3_lightning.random_stream import RandomStream
from td3_lightning.samplers import lap_loss
from td3_lightning.schedules import Schedules, run_length
from td3_lightning.stats import TrainingStatistics
from td3_lightning.stepping import ACTOR, AUXILIARY, COMPILE_MODES, CRITIC, CompileMode, Stepper

__all__ = ["TD3", "NonFiniteError", "COMPILE_MODES", "UpdateResult"]
COUNTS = ("num_critic_updates", "num_actor_updates")  # saved in the checkpoint's td3_lightning section


class UpdateResult(NamedTuple):
    """What one update hands on: its losses and Q values ``(critics, batch)``, for the statistics and the guard; the
    values of the auxiliary losses and actor-loss terms by name (``train/<name>``); a prioritised batch's priorities."""

    critic_loss: Tensor
    q: Tensor
    actor_loss: Tensor | None
    terms: dict[str, Tensor]
    priority: Tensor | None


def ascended_q(critic: CriticEnsemble, actor_q: str, obs: Tensor, action: Tensor) -> Tensor:
    """The Q the actor ascends (``actor_q``), the critics' weights held fixed: the first critic's (TD3), every critic's
    (``mean``, TD7: the loss averages them) or their minimum (``min``, CrossQ's TD3 variant)."""
    if actor_q == "first":
        return critic.q1(obs, action, detach_params=True)
    q = critic(obs, action, detach_params=True)
    return q.min(dim=0).values if actor_q == "min" else q


def smoothed_next_action(actor: torch.nn.Module, batch: dict[str, Tensor], noise: Tensor, hp: Any) -> Tensor:
    """``clip(pi(s') + clip(eps, -c, c), low, high)``: TD3's target policy smoothing, ``noise`` standard-normal."""
    scale, bias = actor.action_scale, actor.action_bias
    eps = (noise * hp.policy_noise).clamp(-hp.noise_clip, hp.noise_clip) * scale
    return torch.clamp(actor(batch["next_obs"]) + eps, bias - scale, bias + scale)


def bootstrap(module: TD3, batch: dict[str, Tensor], next_q: Tensor) -> Tensor:
    """``r + gamma * (1 - terminated) * next_q`` (clipped with value_clipping): a time limit (truncated) still
    bootstraps; the discount is n-step's where the batch has one."""
    return module.extensions.target_value(batch["reward"], discounts(module, batch), next_q)


def discounts(module: TD3, batch: dict[str, Tensor]) -> Tensor:
    """Each transition's bootstrap factor: ``gamma`` (n-step's ``gamma^k`` where the batch has one), 0 where
    terminated."""
    return batch.get("discount", module.hparams.gamma) * (1.0 - batch["terminated"].float())


def observe_rewards(module: TD3, batch: dict[str, Tensor]) -> None:
    """An automatic value range (``critic_range auto``) takes in the batch's rewards, over every process under DDP,
    before any Q is read; a no-op otherwise (nothing computed)."""
    if module.critic.head is not None and module.critic.head.auto:
        module.critic.head.observe(batch["reward"], discounts(module, batch), module.stepper.largest_over_ranks)


def joint_pass(module: TD3, batch: dict[str, Tensor], noise: Tensor | None) -> tuple[Tensor, Tensor]:
    """Without target networks (CrossQ): the critics read ``(s, a)`` and ``(s', a')``, ``a'`` the actor's smoothed
    action, as one batch (so batch renormalisation sees both); -> the last layer's output for ``(s, a)`` and
    ``y = r + gamma * (1 - terminated) * min_i Q_i(s', a')``, no gradient through ``y``."""
    noise = module.random_stream.standard_normal(batch["action"]) if noise is None else noise
    with torch.no_grad():
        next_action = smoothed_next_action(module.actor, batch, noise, module.hparams)
    obs = torch.cat([critic_view(batch), critic_view(batch, next_obs=True)])
    out, next_out = module.critic(obs, torch.cat([batch["action"], next_action]), raw=True).chunk(2, dim=1)
    return out, bootstrap(module, batch, module.critic.values(next_out.detach()).min(0).values)


class TD3(L.LightningModule):
    """Twin Delayed DDPG: one ``training_step`` is one critic update per replay batch; every
    ``policy_freq`` of them the actor steps and the targets follow (see ``docs/options.md``).

    Args:
        obs_shape: shape of one observation (linked from the env by the CLI).
        action_low: lower action bounds (linked from the env by the CLI).
        action_high: upper action bounds (linked from the env by the CLI).
        critic_obs_shape: shape of the critics' privileged observation (linked from data.privileged_critic).
        hidden_dims: hidden layer sizes of the actor, and of every critic unless critic_hidden_dims.
        critic_hidden_dims: hidden layer sizes of every critic, e.g. [1024, 1024] for wide critics (null = hidden_dims).
        layer_norm: a LayerNorm on every hidden layer of the actor and the critics.
        batch_renorm: batch renormalisation of the input and every hidden layer of the actor and the critics (CrossQ).
        batch_renorm_warmup: training passes of each layer as plain batch normalisation before renormalising (>= 0).
        normalize_obs: standardise vector observations by running statistics, kept in the actor (and its exports).
        normalize_actions: the critics and SALE's encoder read actions rescaled to [-1, 1], as TD7 does.
        embedding_dim: length of SALE state and state-action embeddings fed to actor and critics (>= 0; 0 = off).
        embedding_lr: Adam learning rate of the SALE encoder (> 0).
        num_critics: number of critics; the target takes the minimum over all of them (>= 2; clipped double-Q).
        critic_bins: bins of each critic's value distribution, learnt by HL-Gauss cross-entropy (0 = off, else >= 2).
        critic_range: the interval [low, high] the bins cover, or auto: grown to hold every TD target the rewards allow.
        gamma: discount factor, in [0, 1].
        tau: Polyak rate of the target networks, in (0, 1] (1 = hard copy).
        target_networks: false: no targets; the critics read s and s' in one batch, pi(s') from the actor (CrossQ).
        target_update_every: hard copies into the targets every N training steps, not Polyak (>= 0; 0 = Polyak).
        value_clipping: clamp the target's next value to the range of targets before the last hard update (TD7).
        actor_q: the actor ascends the first critic's Q (first, TD3), the mean of all (mean, TD7) or the min (CrossQ).
        policy_checkpoints: evaluate, test and export the policy with the best worst training episode (TD7).
        checkpoint_episodes: episodes a policy is assessed on from checkpoint_after on (>= 1).
        checkpoint_after: training steps of one-episode assessments before checkpoint_episodes (>= 0).
        policy_noise: std of the target-policy smoothing noise, relative to half the action range (>= 0).
        noise_clip: clip of that noise, relative to half the action range (>= 0).
        policy_freq: the actor and the targets are updated every policy_freq critic updates (>= 1).
        exploration_noise: std of the exploration noise, relative to half the action range (>= 0).
        actor_lr: Adam learning rate of the actor (> 0).
        critic_lr: Adam learning rate of the critics (> 0).
        adam_beta1: decay of Adam's first moment for the actor and the critics, in [0, 1) (CrossQ: 0.5).
        exploration_noise_final: exploration noise at the end of schedule_steps (>= 0; null = constant).
        lr_final_factor: both learning rates decay linearly to lr * lr_final_factor over schedule_steps (> 0).
        schedule_steps: length of both schedules in training steps (>= 1; null = trainer.max_steps).
        preactivation_penalty: weight of the actor's mean squared output before the tanh (>= 0; 0 = off).
        reset_steps: training steps after which the networks start over, the buffer kept ([] = never).
        encoder: auto (a CNN for images (C, H, W)), cnn or none.
        encoder_features: length of the CNN encoder's feature vector (>= 1).
        shared_encoder: the actor uses the critics' CNN encoder (trained by the critics only).
        state_prediction: weight of the actor encoder's prediction of the privileged observation (>= 0; 0 = off).
        teacher: checkpoint of a policy that the actor imitates, on the privileged observation if any (null = off).
        teacher_weight: weight of the teacher's term (>= 0).
        random_shift: DrQ random shift of image batches, in pixels (>= 0; 0 = off).
        flush_denormal: treat float32 values below 1.2e-38 as zero on the CPU (faster; process-wide).
        compile_mode: none, a torch.compile mode (default, reduce-overhead, max-autotune, ...) or cudagraphs (captured).
    """

    def __init__(
        self, obs_shape: list[int], action_low: list[float], action_high: list[float],  # the env's, linked by the CLI
        critic_obs_shape: list[int] | None = None,
        hidden_dims: list[int] = [256, 256],  # noqa: B006 - list default shows in --help
        critic_hidden_dims: list[int] | None = None, layer_norm: bool = False, batch_renorm: bool = False,
        batch_renorm_warmup: int = WARMUP_STEPS, normalize_obs: bool = False,
        normalize_actions: bool = False, embedding_dim: int = 0, embedding_lr: float = 3e-4,
        num_critics: int = 2, critic_bins: int = 0, critic_range: list[float] | Literal["auto"] | None = None,
        gamma: float = 0.99, tau: float = 0.005, target_networks: bool = True,
        target_update_every: int = 0, value_clipping: bool = False, actor_q: Literal["first", "mean", "min"] = "first",
        policy_checkpoints: bool = False, checkpoint_episodes: int = 20, checkpoint_after: int = 750000,
        policy_noise: float = 0.2, noise_clip: float = 0.5, policy_freq: int = 2,
        exploration_noise: float = 0.1, actor_lr: float = 3e-4, critic_lr: float = 3e-4, adam_beta1: float = 0.9,
        exploration_noise_final: float | None = None, lr_final_factor: float = 1.0, schedule_steps: int | None = None,
        preactivation_penalty: float = 0.0,
        reset_steps: list[int] = [],  # noqa: B006 - list default shows in --help
        encoder: Literal["auto", "cnn", "none"] = "auto", encoder_features: int = 50, shared_encoder: bool = True,
        state_prediction: float = 0.0, teacher: str | None = None, teacher_weight: float = 1.0,
        random_shift: int = 0, flush_denormal: bool = True, compile_mode: CompileMode = "none",
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        check_hparams(self.hparams, TD3)
        self.automatic_optimization = False
        if flush_denormal:  # before the networks: CPU threads started later inherit the setting
            torch.set_flush_denormal(True)
        networks = build_networks(self.hparams)
        self.actor, self.critic = networks.actor, networks.critic
        self.extensions = build_extensions(self.hparams, networks)  # what is beyond the paper, by seam
        self.actor_target, self.critic_target = networks.targets() if target_networks else (None, None)
        self.policy_checkpoint = policy_checkpoint(self.actor, self.hparams)  # TD7's (None when off)
        self.schedules = Schedules(exploration_noise, exploration_noise_final, lr_final_factor, schedule_steps)
        self.num_critic_updates = self.num_actor_updates = 0
        self.random_stream = RandomStream()  # target noise, shifts, reset seeds; saved in checkpoints
        self.stepper, self.stats = Stepper(), TrainingStatistics()
        self.episode_metrics, self.test_episodes = EpisodeMetrics(), {}  # the last test's episodes, for TestReport
        self._compiled: Any | None = None  # the compiled or captured td3_update (compile_mode)

    # ================================================================== the TD3 update (Algorithm 1)
    @torch.no_grad()
    def td_target(self, batch: dict[str, Tensor], noise: Tensor | None = None) -> Tensor:
        """``y = r + gamma * (1 - terminated) * min_i Q'_i(s', clip(pi'(s') + clip(eps, -c, c), low, high))``;
        ``noise``: standard-normal draws shaped like the actions (drawn here if None)."""
        noise = self.random_stream.standard_normal(batch["action"]) if noise is None else noise
        next_action = smoothed_next_action(self.actor_target, batch, noise, self.hparams)  # target policy smoothing
        next_q = self.critic_target(critic_view(batch, next_obs=True), next_action).min(0).values  # clipped double Q
        return bootstrap(self, batch, next_q)

    def critic_loss(self, batch: dict[str, Tensor], noise: Tensor | None = None, terms: dict[str, Tensor] | None = None
                    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """``sum_i mean (Q_i(s, a) - y)^2`` (LAP's on a batch with ``index``; HL-Gauss's with critic_bins, the share of
        ``y`` outside the range into ``terms``), the Q values ``(critics, batch)`` and LAP's ``max_i |Q_i - y|``."""
        observe_rewards(self, batch)  # critic_range auto: the range first takes in the batch's rewards
        out, y = (joint_pass(self, batch, noise) if self.critic_target is None  # CrossQ: no target networks
                  else (self.critic(critic_view(batch), batch["action"], raw=True), self.td_target(batch, noise)))
        q = self.critic.values(out)
        td = q - y
        priority = td.detach().abs().max(dim=0).values if "index" in batch else None  # for LAP's sampler
        if self.critic.head is not None:  # distributional critics: each learns y's histogram (critic_bins)
            return self.critic.head.loss(out, y, terms), q, priority
        return (td.pow(2).mean(dim=1).sum() if priority is None else lap_loss(td)), q, priority

    def actor_loss(self, batch: dict[str, Tensor], terms: dict[str, Tensor] | None = None) -> Tensor:
        """``-mean Q_1(s, pi(s))`` (or of every Q_i, or of their min) with the critics held fixed, plus the actor-loss
        terms, whose values go into ``terms`` (None: into the training statistics)."""
        features = self.actor.features(batch["obs"])
        preactivation = self.actor.net(features)
        action = self.actor.squash(preactivation)
        loss = -ascended_q(self.critic, self.hparams.actor_q, critic_view(batch), action).mean()
        view = ActorView(batch, features, preactivation, action, self.actor.action_scale)
        loss, values = self.extensions.actor_terms(loss, view)  # e.g. the teacher's term
        if terms is None:
            self.stats.add_terms(values)
        else:
            terms.update(values)
        return loss

    def update_targets(self) -> None:
        """The targets follow: Polyak ``theta' <- (1 - tau) theta' + tau theta``, or hard copies
        (target_update_every)."""
        self.extensions.target_sync.after_actor_update(self)

    def td3_update(self, batch: dict[str, Tensor], noise: Tensor, update_actor: bool) -> UpdateResult:
        """One TD3 update in the paper's order; the same code runs eager, compiled and captured (compile_mode)."""
        terms = {}
        for i, auxiliary in enumerate(self.extensions.auxiliary_losses.values()):  # e.g. SALE's encoder
            terms[auxiliary.name] = loss = auxiliary(batch)
            self.stepper.step(self, AUXILIARY + i, loss, (auxiliary,))
        # critic: regress every Q_i(s, a) on the target y (clipped double Q, smoothed target policy)
        critic_loss, q, priority = self.critic_loss(batch, noise, terms)
        self.stepper.step(self, CRITIC, critic_loss, (self.critic,))
        actor_loss = None
        if update_actor:
            # delayed policy update: ascend Q_1(s, pi(s)), then the targets follow their networks
            actor_loss = self.actor_loss(batch, terms)
            self.stepper.step(self, ACTOR, actor_loss, (self.actor, self.extensions.actor_terms))
            self.update_targets()
        detached = {name: value.detach() for name, value in terms.items()}
        return UpdateResult(critic_loss.detach(), q.detach(), None if actor_loss is None else actor_loss.detach(),
                            detached, priority)

    # ================================================================== the training step around it
    def training_step(self, batch: dict[str, Tensor] | Iterable[dict[str, Tensor]], batch_idx: int) -> None:
        """One TD3 update per replay batch (a chunk of ``data.steps_per_batch`` batches: one per batch)."""
        self.stepper.optimizers = self.optimizers()  # type: ignore[assignment]
        without_reducer_sync(self.trainer)  # each loss has its own backward; see average_gradients
        update = self._compiled or self.td3_update
        for one in (batch,) if isinstance(batch, dict) else batch:
            step = self.global_step  # training steps taken before this one
            self.stepper.step_taken = step + 1
            self.extensions.before_step(self, step)  # e.g. network resets
            one = self.extensions.transform(one, self.random_stream.generator(self.device))  # e.g. n-step returns
            self.schedules.set_learning_rates(self.stepper.optimizers, [self.hparams.critic_lr, self.hparams.actor_lr],
                                              step, run_length(self))
            update_actor = (self.num_critic_updates + 1) % self.hparams.policy_freq == 0
            with training_pass():  # batch renormalisation reads the batch (model.batch_renorm)
                result = update(one, self.random_stream.standard_normal(one["action"]), update_actor)
            self.stepper.after_update(result.critic_loss, result.actor_loss,
                                      [result.terms[a.name] for a in self.extensions.auxiliary_losses.values()])
            self.num_critic_updates += 1
            self.num_actor_updates += int(update_actor)
            self.stats.add_terms(result.terms)
            self.track_statistics(result.critic_loss, result.q, result.actor_loss)
            if result.priority is not None:  # LAP: the replay's next draws take the new priorities
                self.trainer.datamodule.update_priorities(one["index"], result.priority)

    def track_statistics(self, critic_loss: Tensor, q: Tensor, actor_loss: Tensor | None) -> None:
        """Keep the step's losses and Q values on the device; log their means every ``log_every_n_steps``."""
        self.stats.add(critic_loss, q[0], actor_loss)
        if self.global_step % max(1, self.trainer.log_every_n_steps) == 0:
            self.stepper.guard.raise_recorded()  # the deferred loss check, at the logging sync
            means = watch_range(self.stats.means(), self.critic.head)  # warns once if critic_range is too small
            self.log_dict({**means, **self.schedules.metrics(self.global_step, run_length(self))})

    def on_fit_start(self) -> None:  # the teacher is read, then the random stream seeded (a fixed order of draws)
        self.extensions.on_fit_start(self)
        self.random_stream.generator(self.device)

    def on_train_start(self) -> None:
        self.extensions.on_train_start(self)
        self.stepper.configure(self.trainer, self)
        if self.hparams.compile_mode != "none":  # the compiled or captured update
            self._compiled, self.stats.copy_outputs = self.stepper.compile(self, self.hparams.compile_mode)

    def exploration_noise_at(self, step: int) -> float:  # relative to half the action range
        return self.schedules.exploration_noise_at(step, run_length(self))

    def act(self, obs: Tensor) -> Tensor:  # the actor's action for exploration (one CUDA graph with cudagraphs)
        return getattr(self._compiled, "act", self.actor)(obs)

    @property
    def policy(self) -> torch.nn.Module:  # what validation, test and export run: the actor or its checkpoint
        return self.actor if self.policy_checkpoint is None else self.policy_checkpoint.actor

    def wants_episodes(self, episode_in_progress: bool) -> bool:  # collect on, no update: TD7's assessment goes on
        return self.policy_checkpoint is not None and (episode_in_progress or self.policy_checkpoint.assessing)

    def training_episode_end(self, episode_return: float) -> dict[str, float]:
        """A training episode of the actor ended (policy checkpoints assess it) -> what to log with it."""
        if self.policy_checkpoint is None:
            return {}
        self.policy_checkpoint.episode_end(episode_return, self.actor, self.global_step)
        return self.policy_checkpoint.metrics()

    # ------------------------------------------------------------------ the guard, evaluation (a batch is an episode)
    def check_finite(self, state_dict: dict[str, Tensor] | None = None, action: str = "") -> None:
        """Raise :class:`NonFiniteError` for a non-finite loss since the last check or a non-finite weight."""
        self.stepper.guard.raise_recorded(action)
        check_finite_weights(state_dict if state_dict is not None else self.state_dict(), self.global_step, action)

    on_train_end = check_finite
    def on_validation_start(self) -> None:
        self.check_finite(action="; not evaluating them")

    on_test_start = on_validation_start

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.episode_metrics.update_validation(batch)
        self.log("val/return", self.episode_metrics.val_return, on_step=False, on_epoch=True, prog_bar=True)
        self.log("val/episode_length", self.episode_metrics.val_length, on_step=False, on_epoch=True)
        self.log("val/terminated", self.episode_metrics.val_terminated, on_step=False, on_epoch=True)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.episode_metrics.update_test(batch)

    def on_test_epoch_end(self) -> None:
        metrics, self.test_episodes = self.episode_metrics.compute_test()
        self.log_dict(metrics)

    # ------------------------------------------------------------------ optimizers and state
    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        # the critic's first: its steps are the ones global_step counts; fused Adam on CPU and CUDA
        impl = {"fused": True} if self.device.type in ("cpu", "cuda") else {"foreach": True}
        critic_params, actor_params = trained_parameters(self.critic, self.actor, self.extensions.actor_terms)
        betas = (self.hparams.adam_beta1, 0.999)
        return [torch.optim.Adam(critic_params, lr=self.hparams.critic_lr, betas=betas, **impl),
                torch.optim.Adam(actor_params, lr=self.hparams.actor_lr, betas=betas, **impl),
                *(torch.optim.Adam(a.parameters(), lr=a.lr, **impl) for a in self.extensions.auxiliary_losses.values())]

    def train(self, mode: bool = True) -> TD3:
        super().train(mode)
        [target.eval() for target in (self.actor_target, self.critic_target) if target is not None]  # never trained
        return self

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:  # never one with non-finite weights
        self.check_finite(checkpoint.get("state_dict"), f"; the checkpoint at step {self.global_step} was not written")
        counts = dict(zip(COUNTS, (self.num_critic_updates, self.num_actor_updates)))
        checkpointing.write_td3_section(checkpoint, **counts, noise_rng=self.random_stream.get_state())

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        meta = checkpointing.check_checkpoint_meta(checkpoint)
        self.num_critic_updates, self.num_actor_updates = (int(meta.get(k, 0)) for k in COUNTS)
        self.random_stream.set_state(meta.get("noise_rng"))
