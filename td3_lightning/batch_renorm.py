"""Batch renormalisation (Ioffe, 2017) for the actor and the critics (``model.batch_renorm``), as CrossQ (Bhatt et al.,
2024) normalises both networks.

Training normalises each feature by the batch's own mean and standard deviation, corrected towards the running ones:
``y = (x - mean_B) / std_B * r + d`` with ``r = clip(std_B / std, 1 / R_MAX, R_MAX)`` and ``d = clip((mean_B - mean)
/ std, -D_MAX, D_MAX)`` held fixed (no gradient), then a learnt scale and offset. For the first ``warmup`` training
passes of a layer (``model.batch_renorm_warmup``, CrossQ's :data:`WARMUP_STEPS`) ``r = 1`` and ``d = 0`` (plain
batch normalisation), while the running statistics settle. A training pass is a forward pass with gradients, in
training mode, inside :func:`training_pass` (the update, ``TD3.training_step``). Everything else (acting,
validation, the target's next action, the critics in the actor's loss, a network called directly) reads the running
statistics, so one observation is normalised as the batches were.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from td3_lightning.distributed import one_process_only
from td3_lightning.errors import UserInputError

#: training passes of plain batch normalisation before the corrections r and d start (CrossQ's; the default)
WARMUP_STEPS = 100_000
#: the bounds of the corrections (CrossQ's)
R_MAX, D_MAX = 3.0, 5.0
#: weight of a batch's statistics in the running ones
MOMENTUM = 0.01
EPS = 1e-3
_IN_TRAINING_PASS = [False]


@contextlib.contextmanager
def training_pass() -> Iterator[None]:
    """Within it, batch renormalisation layers in training mode with gradients enabled use (and update) the batch's
    statistics: the update's passes. Outside it every layer reads its running statistics."""
    before, _IN_TRAINING_PASS[0] = _IN_TRAINING_PASS[0], True
    try:
        yield
    finally:
        _IN_TRAINING_PASS[0] = before


class BatchRenorm(nn.Module):
    """Batch renormalisation over the batch dimension (``-2``) of ``(*members, batch, features)`` inputs, with
    statistics, scale and offset per member (``members``: each critic of an ensemble its own; ``()`` for one net).

    Batch statistics are used, and the running ones updated, only in a training pass (:func:`training_pass`, training
    mode, gradients enabled) with ``frozen`` False; the running statistics otherwise.
    """

    mean: Tensor
    var: Tensor
    steps: Tensor

    def __init__(self, features: int, members: tuple[int, ...] = (), warmup: int = WARMUP_STEPS) -> None:
        super().__init__()
        self.warmup = warmup
        shape = (*members, 1, features) if members else (features,)
        self.scale = nn.Parameter(torch.ones(shape))
        self.offset = nn.Parameter(torch.zeros(shape))
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("steps", torch.zeros((), dtype=torch.float64))  # float: a network reset restarts it

    def forward(self, x: Tensor, member: int | None = None, frozen: bool = False) -> Tensor:
        """``x`` normalised; ``member``: ``x`` is that member's alone (its statistics, scale and offset); ``frozen``:
        the running statistics and no gradient into the scale and offset (the critics in the actor's loss)."""
        scale, offset, mean, var = self.scale, self.offset, self.mean, self.var
        if member is not None:
            scale, offset, mean, var = scale[member], offset[member], mean[member], var[member]
        if frozen:
            scale, offset = scale.detach(), offset.detach()
        x = x.float()
        if frozen or not (_IN_TRAINING_PASS[0] and self.training and torch.is_grad_enabled()):
            a = scale / torch.sqrt(var + EPS)
            return torch.addcmul(offset - mean * a, x, a)  # (x - mean) / std * scale + offset, one pass over x
        batch_mean, batch_var = _moments(x)
        batch_std = torch.sqrt(batch_var + EPS)
        with torch.no_grad():
            std = torch.sqrt(var + EPS)
            warm = self.steps >= self.warmup
            r = torch.where(warm, (batch_std / std).clamp(1 / R_MAX, R_MAX), torch.ones_like(std))
            d = torch.where(warm, ((batch_mean - mean) / std).clamp(-D_MAX, D_MAX), torch.zeros_like(std))
            mean.lerp_(batch_mean.reshape(mean.shape), MOMENTUM)  # views of the buffers: updated in place
            var.lerp_(batch_var.reshape(var.shape), MOMENTUM)
            self.steps.add_(1)
        # ((x - mean_B) / std_B * r + d) * scale + offset as x * a + c: one pass over x, the gradient the same
        a = r * scale / batch_std
        return torch.addcmul((d - batch_mean * r / batch_std) * scale + offset, x, a)

    def extra_repr(self) -> str:
        return f"features={self.scale.shape[-1]}, members={tuple(self.scale.shape[:-2])}, warmup={self.warmup}"


def _moments(x: Tensor) -> tuple[Tensor, Tensor]:
    """The mean and the (biased) variance over dim ``-2``, from sums about the first row (so no cancellation where the
    mean is far from 0): a few times faster on a CPU than ``Tensor.var`` over a middle dimension."""
    shift = x[..., :1, :].detach()
    centred, n = x - shift, x.shape[-2]
    mean = centred.sum(dim=-2, keepdim=True) / n
    var = ((centred * centred).sum(dim=-2, keepdim=True) / n - mean * mean).clamp_min(0.0)
    return mean + shift, var


def set_warmup(warmup: int, *nets: nn.Module) -> None:
    """Every :class:`BatchRenorm` layer in ``nets`` starts its corrections after ``warmup`` training passes."""
    for layer in (m for net in nets for m in net.modules() if isinstance(m, BatchRenorm)):
        layer.warmup = warmup


def running_statistics(*nets: nn.Module) -> list[Tensor]:
    """The running means and variances of every :class:`BatchRenorm` layer in ``nets``, in a fixed order (what the
    target networks take from their networks, as they take the weights)."""
    return [t for net in nets for m in net.modules() if isinstance(m, BatchRenorm) for t in (m.mean, m.var)]


def check_batch(model: Any, batch_size: int) -> None:
    """One :class:`UserInputError` line for ``model.batch_renorm`` over batches of one transition: their variance is
    0, every normalised layer puts out 0 and the running variance decays to 0."""
    if model.get("batch_renorm") and batch_size < 2:
        raise UserInputError(f"model.batch_renorm normalises over the transitions of a batch, and data.batch_size "
                             f"{batch_size} holds one (its variance is 0): set data.batch_size 2 or more (e.g. 256), "
                             "or model.batch_renorm false")


def check_processes(model: Any, devices: int, resumed: bool = False) -> None:
    """One :class:`UserInputError` line for ``model.batch_renorm`` under several processes: each would keep
    statistics of its own batches, and the ranks' networks would drift apart."""
    if model.get("batch_renorm"):
        one_process_only("batch_renorm", "keeps the statistics of one process's batches", devices, resumed)
