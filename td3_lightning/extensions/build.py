"""The module's hyperparameters -> its extensions: which part each option switches on, and their checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from td3_lightning.extensions.actor_terms import PreactivationPenalty, StatePrediction
from td3_lightning.extensions.base import ActorTerms, BatchTransform, StepHook
from td3_lightning.extensions.batch_transforms import NStepReturn, ObservationStatistics, RandomShift
from td3_lightning.extensions.resets import NetworkResets
from td3_lightning.extensions.sale import SALETraining
from td3_lightning.extensions.targets import HardTargetCopies, PolyakAveraging, TargetSync
from td3_lightning.extensions.value_clipping import ClippedTargetValue, TargetValue
from td3_lightning.extensions.teacher import Teacher
from td3_lightning.networks import Networks
from td3_lightning.rules import Rule, check_rules


class Extensions(nn.Module):
    """The parts beyond the paper a module is built with, by seam: actor-loss terms and auxiliary losses
    (modules: their parameters are trained and saved), batch transforms, step hooks, how the critics'
    target combines the reward with the next value (``target_value``: clipped with ``value_clipping``), and how
    the targets follow their networks (``target_sync``: Polyak, or hard copies with ``target_update_every``)."""

    def __init__(self, actor_terms: ActorTerms, auxiliary_losses: nn.ModuleDict,
                 batch_transforms: list[BatchTransform], step_hooks: list[StepHook],
                 target_value: TargetValue, target_sync: TargetSync) -> None:
        super().__init__()
        self.actor_terms, self.auxiliary_losses = actor_terms, auxiliary_losses
        self.batch_transforms, self.step_hooks = batch_transforms, step_hooks
        self.target_value = target_value  # r + discount * next value (clipped: TD7)
        self.target_sync = target_sync  # how the targets follow their networks (Polyak, or hard copies: a step hook)

    def transform(self, batch: dict[str, Tensor], generator: torch.Generator) -> dict[str, Tensor]:
        """``batch`` through every batch transform, in order."""
        for transform in self.batch_transforms:
            batch = transform(batch, generator)
        return batch

    def before_step(self, module: Any, step: int) -> None:
        for hook in self.step_hooks:
            hook.before_step(module, step)

    def on_fit_start(self, module: Any) -> None:
        for term in self.actor_terms.values():
            term.on_fit_start(module)

    def on_train_start(self, module: Any) -> None:
        for hook in self.step_hooks:
            hook.on_train_start(module)


def build_extensions(hp: Mapping[str, Any], networks: Networks) -> Extensions:
    """The extensions that ``hp`` (the module's hyperparameters) switch on, for its ``networks``."""
    terms = ActorTerms({"preactivation_penalty": PreactivationPenalty(hp["preactivation_penalty"])})
    actor_encoder = networks.actor.encoder
    if hp["critic_obs_shape"] is not None and actor_encoder is not None and hp["state_prediction"] > 0:
        terms["state_prediction"] = StatePrediction(hp["state_prediction"], actor_encoder.out_dim,
                                                    int(hp["critic_obs_shape"][0]))
    if hp["teacher"]:
        terms["teacher"] = Teacher(hp["teacher_weight"], hp["teacher"])
    transforms: list[BatchTransform] = [NStepReturn(hp["gamma"])]
    if networks.normalizer is not None:
        transforms.insert(0, ObservationStatistics(networks.normalizer))
    if hp["random_shift"]:
        transforms.append(RandomShift(hp["random_shift"]))
    hooks: list[StepHook] = [NetworkResets(hp["reset_steps"])] if hp["reset_steps"] else []
    auxiliary = nn.ModuleDict()
    if networks.embedding is not None:
        auxiliary["embedding"] = SALETraining(networks.embedding, hp["embedding_lr"], networks.normalizer,
                                                  networks.critic.action_rescale)
    target_value = ClippedTargetValue() if hp.get("value_clipping") else TargetValue()
    target_sync: TargetSync = PolyakAveraging(hp["tau"]) if hp.get("target_networks", True) else TargetSync()
    if hp["target_update_every"]:
        target_sync = HardTargetCopies(hp["target_update_every"], networks.fixed_embedding, networks.embedding,
                                       target_value)
        hooks.append(target_sync)
    return Extensions(terms, auxiliary, transforms, hooks, target_value, target_sync)


#: what the env's observations (``obs_shape``, ``critic_obs_shape``) allow of the extensions
SPACE_RULES: dict[str, Rule] = {
    "embeddings of vector observations": Rule(
        lambda o: not o["embedding_dim"] or (len(o["obs_shape"]) == 1 and o["critic_obs_shape"] is None),
        lambda o: "model.embedding_dim needs vector observations and no privileged critic; set model.embedding_dim 0"),
    "running statistics of vector observations": Rule(
        lambda o: not o["normalize_obs"] or (len(o["obs_shape"]) == 1 and o["critic_obs_shape"] is None),
        lambda o: "model.normalize_obs standardises vector observations (images are scaled by the encoder) and needs "
                  "no privileged critic; set model.normalize_obs false"),
}

#: the options that would do nothing on the env's observations (a new run's)
ACTING_RULES: dict[str, Rule] = {
    "shifts of images": Rule(
        lambda o: not o["random_shift"] or len(o["obs_shape"]) == 3,
        lambda o: f"model.random_shift shifts image observations, and these are vectors of shape "
                  f"{tuple(o['obs_shape'])}; set model.random_shift 0"),
    "predictions of the privileged observation from images": Rule(
        lambda o: not o["state_prediction"] or (len(o["obs_shape"]) == 3 and o["critic_obs_shape"] is not None),
        lambda o: "model.state_prediction trains the actor's CNN to predict the privileged observation: it needs "
                  "image observations and data.privileged_critic true; set model.state_prediction 0"),
}


def check_extension_spaces(hp: Mapping[str, Any]) -> None:
    """One clear line for an extension that the env's observations do not allow (:data:`SPACE_RULES`)."""
    check_rules(SPACE_RULES, hp)


def check_extensions_act(hp: Mapping[str, Any]) -> None:
    """One clear line for an option that would do nothing on the env's observations (:data:`ACTING_RULES`; checked
    for a new run; a checkpoint that has one is still played and resumed as it was)."""
    check_rules(ACTING_RULES, hp)
