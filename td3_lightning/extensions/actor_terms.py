"""Actor-loss terms beyond ``-Q_1(s, pi(s))``: the preactivation penalty and state prediction.
The teacher's term is in ``teacher.py``."""

from __future__ import annotations

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
