"""State and state-action embeddings (SALE, Fujimoto et al., 2023, "For SALE: State-Action Representation
Learning for Deep Reinforcement Learning"): an encoder ``f(s) -> z_s``, ``g(z_s, a) -> z_sa`` trained to
predict the next state's embedding, whose outputs feed the actor and the critics.

The actor and the critics read a *fixed* copy of the encoder (:class:`FixedEncoder`), refreshed from the
trained one at each hard target copy (``extensions/targets.py``), so their inputs do not drift between refreshes.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F


def avg_l1_norm(x: Tensor, eps: float = 1e-8) -> Tensor:
    """``x`` divided by the mean of its absolute values over the last dimension (AvgL1Norm)."""
    return x / x.abs().mean(dim=-1, keepdim=True).clamp(min=eps)


class SALEEncoder(nn.Module):
    """``z_s = AvgL1Norm(f(s))`` and ``z_sa = g(z_s, a)``, each a 3-layer ELU MLP.

    Args:
        obs_dim: length of the observation vector.
        action_dim: length of the action vector.
        dim: length of ``z_s`` and ``z_sa``.
        hidden: hidden layer size of ``f`` and ``g``.
    """

    def __init__(self, obs_dim: int, action_dim: int, dim: int = 256, hidden: int = 256) -> None:
        super().__init__()
        self.dim = dim
        self.f = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU(),
                               nn.Linear(hidden, dim))
        self.g = nn.Sequential(nn.Linear(dim + action_dim, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU(),
                               nn.Linear(hidden, dim))

    def zs(self, obs: Tensor) -> Tensor:
        return avg_l1_norm(self.f(obs.float()))

    def zsa(self, zs: Tensor, action: Tensor) -> Tensor:
        return self.g(torch.cat([zs, action], dim=-1))

    def loss(self, obs: Tensor, action: Tensor, next_obs: Tensor) -> Tensor:
        """``mean (g(z_s, a) - z_s')^2``, the next state's embedding ``z_s'`` held fixed."""
        with torch.no_grad():
            target = self.zs(next_obs)
        return F.mse_loss(self.zsa(self.zs(obs), action), target)


class FixedEncoder(nn.Module):
    """A frozen copy of a :class:`SALEEncoder` that the actor and the critics read; it lives beside the
    networks (one object shared by actor and critics) and is refreshed by copying."""

    def __init__(self, encoder: SALEEncoder) -> None:
        super().__init__()
        self.encoder = copy.deepcopy(encoder).requires_grad_(False)
        self._cached: tuple[Tensor, tuple[int, ...], Tensor] | None = None

    @torch.no_grad()
    def refresh(self, source: SALEEncoder) -> None:
        for mine, theirs in zip(self.encoder.parameters(), source.parameters()):
            mine.copy_(theirs)

    def zs(self, obs: Tensor) -> Tensor:
        """``z_s`` of ``obs`` (any float dtype, computed in float32); the last one is kept, since a training
        step asks for it several times (critic, actor, the actor's Q) with the same batch tensor, unchanged,
        and the same weights. Inference tensors (test, validation) are encoded without the cache, and so is a CUDA
        graph's capture (each graph computes its own)."""
        if (torch.jit.is_tracing() or torch.compiler.is_compiling() or obs.is_inference()  # (no version to key on)
                or (obs.is_cuda and torch.cuda.is_current_stream_capturing())):
            return self.encoder.zs(obs.float())
        versions = (obs._version, *(p._version for p in self.encoder.parameters()))
        cached = self._cached
        if cached is not None and cached[0] is obs and cached[1] == versions:
            return cached[2]
        with torch.no_grad():
            zs = self.encoder.zs(obs.float())
        self._cached = (obs, versions, zs)
        return zs


class SALEStateInput(nn.Module):
    """The actor's input: ``[AvgL1Norm(W s + b), z_s]`` with ``z_s`` from the fixed encoder.

    Used as the actor's encoder (``Actor(..., encoder=...)``): it has ``out_dim``.
    """

    def __init__(self, obs_dim: int, hidden: int, fixed: FixedEncoder) -> None:
        super().__init__()
        self.linear = nn.Linear(obs_dim, hidden)
        self.fixed = fixed
        self.out_dim = hidden + fixed.encoder.dim

    def forward(self, obs: Tensor) -> Tensor:
        return torch.cat([avg_l1_norm(self.linear(obs.float())), self.fixed.zs(obs)], dim=-1)


class SALEStateActionInput(nn.Module):
    """Each critic's input: ``[AvgL1Norm(W_i [s, a] + b_i), z_sa, z_s]``, a layer per critic, with the
    embeddings from the fixed encoder. Returns ``(num_critics, batch, out_dim)`` (or one critic's)."""

    def __init__(self, obs_dim: int, action_dim: int, hidden: int, num_critics: int, fixed: FixedEncoder) -> None:
        super().__init__()
        bound = 1 / math.sqrt(obs_dim + action_dim)
        self.weight = nn.Parameter(torch.empty(num_critics, obs_dim + action_dim, hidden).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_critics, 1, hidden).uniform_(-bound, bound))
        self.fixed = fixed
        self.out_dim = hidden + 2 * fixed.encoder.dim

    def forward(self, obs: Tensor, action: Tensor, member: int | None = None, detach_params: bool = False) -> Tensor:
        zs = self.fixed.zs(obs)  # the fixed encoder's weights get no gradient (requires_grad False)
        obs = obs.float()
        embeddings = torch.cat([self.fixed.encoder.zsa(zs, action), zs], dim=-1)  # the actor's step: through z_sa
        sa = torch.cat([obs, action], dim=-1)
        w, b = self.weight, self.bias
        if detach_params:
            w, b = w.detach(), b.detach()
        if member is not None:
            return torch.cat([avg_l1_norm(torch.addmm(b[member], sa, w[member])), embeddings], dim=-1)
        x = avg_l1_norm(torch.baddbmm(b, sa.expand(w.shape[0], -1, -1), w))
        return torch.cat([x, embeddings.expand(w.shape[0], -1, -1)], dim=-1)
