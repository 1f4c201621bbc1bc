"""Plain ``nn.Module`` networks: a bounded actor, a batched critic ensemble and a CNN
encoder for image observations.

All are independent of Lightning and of any environment: the actor maps an observation
to an action inside the env's bounds by itself (its encoder, if any, then tanh and the
``action_scale`` and ``action_bias`` buffers), so a saved or exported actor needs
nothing else.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from td3_lightning.batch_renorm import WARMUP_STEPS, BatchRenorm, set_warmup
from td3_lightning.distributional import ValueHistogram
from td3_lightning.embeddings import FixedEncoder, SALEEncoder, SALEStateActionInput, SALEStateInput
from td3_lightning.normalization import ObservationNormalizer


def mlp(sizes: Sequence[int], activation: type[nn.Module] = nn.ReLU, layer_norm: bool = False,
        batch_renorm: bool = False) -> nn.Sequential:
    """Linear layers of the given sizes with ``activation`` between them (none after the last), each
    hidden layer's output normalised by a LayerNorm first with ``layer_norm``; with ``batch_renorm`` a
    :class:`~td3_lightning.batch_renorm.BatchRenorm` on the input and after each activation (CrossQ's places)."""
    layers: list[nn.Module] = [BatchRenorm(sizes[0])] if batch_renorm else []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out))
        if i < len(sizes) - 2:
            layers.extend([nn.LayerNorm(n_out), activation()] if layer_norm else [activation()])
            layers.extend([BatchRenorm(n_out)] if batch_renorm else [])
    return nn.Sequential(*layers)


ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": torch.relu, "elu": F.elu}


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


def half_range(action_low: Sequence[float], action_high: Sequence[float]) -> tuple[Tensor, Tensor]:
    """Half the width and the centre of each action's bounds, ``((high - low) / 2, (high + low) / 2)``, in float32."""
    low = torch.as_tensor(action_low, dtype=torch.float32)
    high = torch.as_tensor(action_high, dtype=torch.float32)
    return (high - low) / 2, (high + low) / 2


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
        layer_norm: a LayerNorm on every hidden layer (before its activation).
        normalizer: applied to observations first (:class:`~td3_lightning.normalization.ObservationNormalizer`).
        batch_renorm: batch renormalisation of the MLP's input and of every hidden layer (after its activation).
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
        layer_norm: bool = False,
        normalizer: nn.Module | None = None,
        batch_renorm: bool = False,
    ) -> None:
        super().__init__()
        scale, bias = half_range(action_low, action_high)
        self.normalizer = normalizer
        self.encoder = encoder
        self.detach_encoder = detach_encoder
        in_dim = encoder.out_dim if encoder is not None else obs_dim
        self.net = mlp([in_dim, *hidden_dims, scale.numel()], layer_norm=layer_norm, batch_renorm=batch_renorm)
        self.register_buffer("action_scale", scale)
        self.register_buffer("action_bias", bias)

    def forward(self, obs: Tensor) -> Tensor:
        return self.act(self.features(obs))

    def features(self, obs: Tensor) -> Tensor:
        """What the policy's MLP reads: the encoder's features, or the (normalised) observation itself."""
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        return encode(self.encoder, obs, self.detach_encoder)

    def act(self, features: Tensor) -> Tensor:
        """The bounded action for :meth:`features`."""
        return self.squash(self.net(features))

    def squash(self, preactivation: Tensor) -> Tensor:
        """The MLP's output (``self.net(features)``) -> the action: tanh, scaled to the bounds."""
        return torch.tanh(preactivation) * self.action_scale + self.action_bias


class ActionRescale(nn.Module):
    """Actions in the env's bounds ``[low, high]`` -> ``[-1, 1]``, ``(a - bias) / scale`` (``normalize_actions``):
    what the critics and SALE's encoder read, as TD7's replay stores them. A fixed bound (``low == high``) reads 0.
    The buffers follow from the options and are not saved."""

    scale: Tensor
    bias: Tensor

    def __init__(self, action_low: Sequence[float], action_high: Sequence[float]) -> None:
        super().__init__()
        scale, bias = half_range(action_low, action_high)
        self.register_buffer("scale", torch.where(scale > 0, scale, torch.ones_like(scale)), persistent=False)
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, action: Tensor) -> Tensor:
        return (action - self.bias) / self.scale


def in_float32(layer: Callable[[Tensor, Tensor, Tensor], Tensor], bias: Tensor, x: Tensor, weight: Tensor) -> Tensor:
    """``layer(bias, x, weight)`` in float32 also under autocast (``trainer.precision bf16-mixed``): the critics' last
    layer, so that Q values, TD errors, LAP's priorities and a distributional critic's logits keep float32's precision
    (bfloat16 holds about 3 significant digits: a Q of 1000 in steps of 8)."""
    if not torch.is_autocast_enabled(x.device.type):
        return layer(bias, x, weight)
    with torch.autocast(x.device.type, enabled=False):
        return layer(bias, x.float(), weight)


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
        input_layer: maps ``(obs, action)`` to each critic's input instead of ``[features, action]``
            (:class:`~td3_lightning.embeddings.SALEStateActionInput`).
        activation: ``relu`` or ``elu`` between the layers.
        layer_norm: a LayerNorm (one per critic) on every hidden layer, before its activation.
        normalizer: applied to observations first (shared with the actor).
        head: a distributional critic's bins: each critic outputs their logits, its Q their expectation.
        action_rescale: applied to actions first (:class:`ActionRescale`, ``normalize_actions``).
        batch_renorm: batch renormalisation (statistics per critic) of each critic's input and of every hidden
            layer (after its activation).
    """

    def __init__(
        self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int] = (256, 256), num_critics: int = 2,
        encoder: nn.Module | None = None, input_layer: nn.Module | None = None, activation: str = "relu",
        layer_norm: bool = False, normalizer: nn.Module | None = None, head: ValueHistogram | None = None,
        action_rescale: ActionRescale | None = None, batch_renorm: bool = False,
    ) -> None:
        super().__init__()
        self.num_critics = num_critics
        self.action_rescale = action_rescale
        self.normalizer = normalizer
        self.encoder = encoder
        self.input_layer = input_layer
        self.head = head
        self.activation = ACTIVATIONS[activation]
        in_dim = encoder.out_dim if encoder is not None else obs_dim
        sizes = [input_layer.out_dim if input_layer is not None else in_dim + action_dim, *hidden_dims,
                 head.bins if head is not None else 1]
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for n_in, n_out in zip(sizes[:-1], sizes[1:]):
            bound = 1 / math.sqrt(n_in)
            # kaiming_uniform(a=sqrt(5)) of nn.Linear reduces to U(-1/sqrt(fan_in), 1/sqrt(fan_in))
            self.weights.append(nn.Parameter(torch.empty(num_critics, n_in, n_out).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(num_critics, 1, n_out).uniform_(-bound, bound)))
        # LayerNorm per critic and hidden layer: gains (num_critics, 1, size) and offsets
        self.norm_gains = nn.ParameterList([nn.Parameter(torch.ones(num_critics, 1, h)) for h in hidden_dims]
                                           if layer_norm else [])
        self.norm_offsets = nn.ParameterList([nn.Parameter(torch.zeros(num_critics, 1, h)) for h in hidden_dims]
                                             if layer_norm else [])
        # batch renormalisation of the input and of each hidden layer, statistics per critic
        self.renorms = nn.ModuleList([BatchRenorm(n, (num_critics,)) for n in sizes[:-1]] if batch_renorm else [])

    def _hidden(self, x: Tensor, i: int, member: int | None = None, detach: bool = False) -> Tensor:
        """Layer ``i``'s output ``x`` -> the next layer's input: (LayerNorm and) the activation."""
        if self.norm_gains:
            gain, offset = self.norm_gains[i], self.norm_offsets[i]
            if member is not None:
                gain, offset = gain[member], offset[member]
            if detach:
                gain, offset = gain.detach(), offset.detach()
            x = F.layer_norm(x, x.shape[-1:]) * gain + offset
        x = self.activation(x)
        return self.renorms[i + 1](x, member, frozen=detach) if self.renorms else x

    def _inputs(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor]:
        """The observation and the action as the first layer reads them: normalised, rescaled."""
        if self.normalizer is not None:
            obs = self.normalizer(obs)
        if self.action_rescale is not None:
            action = self.action_rescale(action)
        return obs, action

    def values(self, out: Tensor) -> Tensor:
        """The last layer's output ``(..., 1)`` or a distributional critic's logits ``(..., bins)`` -> Q ``(...)``."""
        return out.squeeze(-1) if self.head is None else self.head.expectation(out)

    def forward(self, obs: Tensor, action: Tensor, detach_params: bool = False, raw: bool = False) -> Tensor:
        """All critics: ``(num_critics, batch)``; with ``detach_params`` as in :meth:`q1`; ``raw``: the last layer's
        output instead, ``(num_critics, batch, 1 or bins)`` (a distributional critic's logits; :meth:`values`)."""
        obs, action = self._inputs(obs, action)
        if self.input_layer is not None:
            x = self.input_layer(obs, action, detach_params=detach_params)
        else:
            x = torch.cat([encode(self.encoder, obs, detach=detach_params), action], dim=-1)
            x = x.expand(self.num_critics, -1, -1)
        if self.renorms:
            x = self.renorms[0](x, frozen=detach_params)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            if detach_params:
                w, b = w.detach(), b.detach()
            if i < last:
                x = self._hidden(torch.baddbmm(b, x, w), i, detach=detach_params)
            else:
                x = in_float32(torch.baddbmm, b, x, w)
        return x if raw else self.values(x)

    def q1(self, obs: Tensor, action: Tensor, detach_params: bool = False) -> Tensor:
        """The first critic only, ``(batch,)``.

        With ``detach_params`` the critic's weights get no gradient (the actor update only
        needs ``dQ/da``), which saves the weight-gradient kernels.
        """
        obs, action = self._inputs(obs, action)
        if self.input_layer is not None:
            x = self.input_layer(obs, action, member=0, detach_params=detach_params)
        else:
            x = torch.cat([encode(self.encoder, obs, detach=detach_params), action], dim=-1)
        if self.renorms:
            x = self.renorms[0](x, member=0, frozen=detach_params)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            w0, b0 = w[0], b[0]
            if detach_params:
                w0, b0 = w0.detach(), b0.detach()
            if i < last:
                x = self._hidden(torch.addmm(b0, x, w0), i, member=0, detach=detach_params)
            else:
                x = in_float32(torch.addmm, b0, x, w0)
        return self.values(x)


class Networks(NamedTuple):
    """What :func:`build_networks` builds: the actor, the critics, and with embeddings the trained SALE
    encoder and the fixed copy that actor and critics read."""

    actor: Actor
    critic: CriticEnsemble
    embedding: SALEEncoder | None = None
    fixed_embedding: FixedEncoder | None = None
    normalizer: ObservationNormalizer | None = None  # shared by actor, critics and their targets

    def targets(self) -> tuple[Actor, CriticEnsemble]:
        """Frozen copies of actor and critics for the target networks. They share the observation
        normaliser (the same statistics), the critics' value bins (an automatic range) and one copy of the fixed SALE
        encoder, as actor and critics do; everything else is copied for each."""
        shared: dict[int, object] = {id(self.normalizer): self.normalizer, id(self.critic.head): self.critic.head}
        if self.fixed_embedding is not None:
            shared[id(self.fixed_embedding)] = copy.deepcopy(self.fixed_embedding)
        return tuple(copy.deepcopy(net, dict(shared)).requires_grad_(False).eval()  # type: ignore[return-value]
                     for net in (self.actor, self.critic))


def build_networks(hp: Mapping[str, Any]) -> Networks:
    """The actor and the critic ensemble for the module's options ``hp`` (its hyperparameters).

    Image observations with ``encoder`` ``auto`` (or ``cnn``) get a :class:`PixelEncoder`, shared by
    actor and critics with ``shared_encoder`` (the critics train it). With ``critic_obs_shape`` the
    critics are MLPs on that privileged vector and the actor alone has an encoder. With
    ``embedding_dim`` (vector observations) actor and critics read SALE embeddings as TD7 does: the
    actor ``[AvgL1Norm(linear(s)), z_s]``, each critic ``[AvgL1Norm(linear(s, a)), z_sa, z_s]`` with ELU.
    With ``normalize_obs`` (vector observations) both read observations through one
    :class:`~td3_lightning.normalization.ObservationNormalizer`. With ``critic_bins`` each critic is
    distributional over ``critic_range``, fixed or ``auto`` (:class:`~td3_lightning.distributional.ValueHistogram`).
    The critics' hidden layers are ``critic_hidden_dims``, or the actor's ``hidden_dims``. With ``normalize_actions``
    the critics (and through them SALE's ``g``) read actions rescaled to ``[-1, 1]`` (:class:`ActionRescale`).
    """
    obs_shape, action_low, action_high = hp["obs_shape"], hp["action_low"], hp["action_high"]
    hidden_dims, num_critics, layer_norm = hp["hidden_dims"], hp["num_critics"], hp["layer_norm"]
    critic_dims = hp.get("critic_hidden_dims") or hidden_dims
    norm = ObservationNormalizer(int(obs_shape[0])) if hp["normalize_obs"] else None
    bins, value_range = hp["critic_bins"], hp["critic_range"]
    head = None if not bins or value_range is None else (
        ValueHistogram(bins) if value_range == "auto" else ValueHistogram(bins, *value_range))
    obs_dim, action_dim = int(obs_shape[0]), len(action_low)
    rescale = ActionRescale(action_low, action_high) if hp.get("normalize_actions") else None
    if hp["embedding_dim"]:
        width = int(hidden_dims[0])
        sale = SALEEncoder(obs_dim, action_dim, hp["embedding_dim"], width)
        fixed = FixedEncoder(sale)
        actor = Actor(obs_dim, action_low, action_high, hidden_dims, SALEStateInput(obs_dim, width, fixed),
                      layer_norm=layer_norm, normalizer=norm)
        critic_input = SALEStateActionInput(obs_dim, action_dim, int(critic_dims[0]), num_critics, fixed)
        critic = CriticEnsemble(obs_dim, action_dim, critic_dims, num_critics, input_layer=critic_input,
                                activation="elu", layer_norm=layer_norm, normalizer=norm, head=head,
                                action_rescale=rescale)
        return Networks(actor, critic, sale, fixed, norm)
    encoder, features, privileged = hp["encoder"], hp["encoder_features"], hp.get("critic_obs_shape") is not None
    cnn = encoder == "cnn" or (encoder == "auto" and len(obs_shape) == 3)
    critic_encoder = PixelEncoder(obs_shape, features) if cnn and not privileged else None
    share = cnn and hp["shared_encoder"] and not privileged
    if share:
        actor_encoder = critic_encoder
    else:
        actor_encoder = PixelEncoder(obs_shape, features) if cnn else None
    renorm = bool(hp.get("batch_renorm"))
    actor = Actor(obs_dim, action_low, action_high, hidden_dims, actor_encoder, detach_encoder=share,
                  layer_norm=layer_norm, normalizer=norm, batch_renorm=renorm)
    critic_dim = int(hp["critic_obs_shape"][0]) if privileged else obs_dim
    critic = CriticEnsemble(critic_dim, action_dim, critic_dims, num_critics, critic_encoder, layer_norm=layer_norm,
                            normalizer=norm, head=head, action_rescale=rescale, batch_renorm=renorm)
    set_warmup(int(hp.get("batch_renorm_warmup", WARMUP_STEPS)), actor, critic)
    return Networks(actor, critic, normalizer=norm)


def trained_parameters(critic: nn.Module, *actor_parts: nn.Module) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """The parameters the critic optimizer and the actor optimizer train: the critics' own (not a frozen fixed
    encoder), and those of ``actor_parts`` that are not the critics' (an encoder shared with the critics is
    theirs to train)."""
    critic_params = [p for p in critic.parameters() if p.requires_grad]
    shared = {id(p) for p in critic.parameters()}
    return critic_params, [p for part in actor_parts for p in part.parameters() if id(p) not in shared]
