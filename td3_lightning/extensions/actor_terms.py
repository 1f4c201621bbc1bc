"""Actor-loss terms beyond ``-Q_1(s, pi(s))``: the preactivation penalty, state prediction and
states at rest. The teacher's term is in ``teacher.py``."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from td3_lightning.extensions.base import ActorTerm, ActorView


class PreactivationPenalty(ActorTerm):
    """The mean square of the actor's output before the tanh (``model.preactivation_penalty``).
    Always logged as ``train/actor_preactivation``; trained on with a weight above 0."""

    name = "actor_preactivation"

    def forward(self, view: ActorView) -> Tensor:
        return view.preactivation.pow(2).mean()


class StatePrediction(ActorTerm):
    """The mean squared error of a linear head that predicts the privileged observation from the
    actor's encoder features (``model.state_prediction``). The head is not part of the policy."""

    name = "state_prediction_loss"

    def __init__(self, weight: float, features: int, state_dim: int) -> None:
        super().__init__(weight)
        self.head = nn.Linear(features, state_dim)

    def forward(self, view: ActorView) -> Tensor:
        return (self.head(view.features) - view.critic_obs).pow(2).mean()


class RestStates(ActorTerm):
    """``-Q(s0, pi(s0))`` with ``s0`` the replayed observation with its motion features zeroed
    (``model.rest_states``): the actor also ascends the critic at a standing car's states, wherever
    the car drove, which its own data seldom holds."""

    name = "rest_q"

    def __init__(self, weight: float, features: list[int]) -> None:
        super().__init__(weight)
        self.register_buffer("features", torch.tensor(features, dtype=torch.long), persistent=False)

    def forward(self, view: ActorView) -> Tensor:
        if view.actor is None or view.critic is None:
            raise RuntimeError("model.rest_states reads the actor and the critic from the ActorView")
        at_rest = view.batch["obs"].index_fill(1, self.features, 0.0)
        return -view.critic(at_rest, view.actor(at_rest), detach_params=True).mean()
