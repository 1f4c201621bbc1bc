"""Plain ``nn.Module`` networks: a bounded actor, a batched critic ensemble and a CNN
encoder for image observations.

All are independent of Lightning and of any environment: the actor maps an observation
to an action inside the env's bounds by itself (its encoder, if any, then tanh and the
``action_scale`` and ``action_bias`` buffers), so a saved or exported actor needs
nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn


def mlp(sizes: Sequence[int], activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    """Linear layers of the given sizes with ``activation`` between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


#: smallest image height and width the encoder's convolutions take
MIN_IMAGE_SIZE = 36


class PixelEncoder(nn.Module):
    """``uint8`` images ``(C, H, W)`` (e.g. stacked frames) to a feature vector.

    Pixels are scaled to ``[0, 1]``, then three convolutions (32 8x8 stride 4, 64 4x4
    stride 2, 64 3x3 stride 1, ReLU: the DQN encoder), a linear layer to ``features``,
    LayerNorm and tanh (bounded features, as in pixel-based SAC/TD3 agents).

    Args:
        obs_shape: ``(C, H, W)``; H and W at least ``MIN_IMAGE_SIZE``.
        features: length of the output vector.
    """

    def __init__(self, obs_shape: Sequence[int], features: int = 50) -> None:
        super().__init__()
        c, h, w = (int(x) for x in obs_shape)
        if min(h, w) < MIN_IMAGE_SIZE:
            raise ValueError(f"images of {h}x{w} pixels are too small for the CNN encoder: it needs at least "
                             f"{MIN_IMAGE_SIZE}x{MIN_IMAGE_SIZE}")
        self.convs = nn.Sequential(
            nn.Conv2d(c, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n_conv = self.convs(torch.zeros(1, c, h, w)).shape[1]
        self.head = nn.Sequential(nn.Linear(n_conv, features), nn.LayerNorm(features), nn.Tanh())
        self.out_dim = int(features)

    def forward(self, obs: Tensor) -> Tensor:
        return self.head(self.convs(obs.float() / 255.0))


def encode(encoder: nn.Module | None, obs: Tensor, detach: bool = False) -> Tensor:
    """``encoder(obs)`` (no gradient into the encoder with ``detach``), or the float observation."""
    if encoder is None:
        return obs.float()
    if detach:
        with torch.no_grad():
            return encoder(obs)
    return encoder(obs)


class Actor(nn.Module):
    """Deterministic policy ``obs -> action`` with every action inside ``[low, high]``.

    Args:
        obs_dim: length of the observation vector (ignored with an encoder).
        action_low: lower bound of each action dimension.
        action_high: upper bound of each action dimension.
        hidden_dims: sizes of the hidden layers.
        encoder: maps observations to features first (e.g. :class:`PixelEncoder`).
        detach_encoder: the actor's loss does not train the encoder (an encoder shared with
            the critics, which train it).
    """

    action_scale: Tensor
    action_bias: Tensor

    def __init__(
        self,
        obs_dim: int,
        action_low: Sequence[float],
        action_high: Sequence[float],
        hidden_dims: Sequence[int] = (256, 256),
        encoder: nn.Module | None = None,
        detach_encoder: bool = False,
    ) -> None:
        super().__init__()
        low = torch.as_tensor(action_low, dtype=torch.float32)
        high = torch.as_tensor(action_high, dtype=torch.float32)
        self.encoder = encoder
        self.detach_encoder = detach_encoder
        in_dim = encoder.out_dim if encoder is not None else obs_dim
        self.net = mlp([in_dim, *hidden_dims, low.numel()])
        self.register_buffer("action_scale", (high - low) / 2)
        self.register_buffer("action_bias", (high + low) / 2)

    def forward(self, obs: Tensor) -> Tensor:
        return self.act(self.features(obs))

    def features(self, obs: Tensor) -> Tensor:
        """What the policy's MLP reads: the encoder's features, or the observation itself."""
        return encode(self.encoder, obs, self.detach_encoder)

    def act(self, features: Tensor) -> Tensor:
        """The bounded action for :meth:`features`."""
        return self.squash(self.net(features))

    def squash(self, preactivation: Tensor) -> Tensor:
        """The MLP's output (``self.net(features)``) -> the action: tanh, scaled to the bounds."""
        return torch.tanh(preactivation) * self.action_scale + self.action_bias


class CriticEnsemble(nn.Module):
    """``num_critics`` independent Q-networks ``Q_i(obs, action)`` evaluated as one batched MLP.

    The weights of layer ``l`` are one tensor of shape ``(num_critics, in, out)``, so all
    critics run in a single ``baddbmm`` per layer instead of a Python loop over modules.
    Each member is initialised exactly like an ``nn.Linear`` of the same size.

    Args:
        obs_dim: length of the observation vector (ignored with an encoder).
        action_dim: length of the action vector.
        hidden_dims: sizes of the hidden layers.
        num_critics: ensemble size (TD3 uses 2).
        encoder: maps observations to features first, once for all critics.
    """

    def __init__(
        self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int] = (256, 256), num_critics: int = 2,
        encoder: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.num_critics = num_critics
        self.encoder = encoder
        in_dim = encoder.out_dim if encoder is not None else obs_dim
        sizes = [in_dim + action_dim, *hidden_dims, 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            bound = 1 / math.sqrt(n_in)
            # kaiming_uniform(a=sqrt(5)) of nn.Linear reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            self.weights.append(nn.Parameter(torch.empty(num_critics, n_in, n_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num_critics, 1, n_out).uniform_(-bound, bound)))

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        """All critics: ``(num_critics, batch)``."""
        x = torch.cat([encode(self.encoder, obs), action], dim=-1).expand(self.num_critics, -1, -1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = torch.relu(x)
        return x.squeeze(-1)

    def q1(self, obs: Tensor, action: Tensor, detach_params: bool = False) -> Tensor:
        """The first critic only, ``(batch,)``.

        With ``detach_params`` the critic's weights get no gradient (the actor update only
        needs ``dQ/da``), which saves the weight-gradient kernels.
        """
        x = torch.cat([encode(self.encoder, obs, detach=detach_params), action], dim=-1)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            w0, b0 = w[0], b[0]
            if detach_params:
                w0, b0 = w0.detach(), b0.detach()
            x = torch.addmm(b0, x, w0)
            if i < last:
                x = torch.relu(x)
        return x.squeeze(-1)
