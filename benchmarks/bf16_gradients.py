"""How far bf16-mixed moves each loss and gradient of a trained run: for replay batches of a checkpoint's buffer, the
SALE encoder's, the critics' and the actor's loss and gradient computed in float32 and under bfloat16 autocast
(what ``--trainer.precision bf16-mixed`` runs), compared.

    python benchmarks/bf16_gradients.py <last.ckpt of a TD7-set run> [--batches 6] [--encoder-float32]

``--encoder-float32`` runs SALE's encoder (``z_s``, ``z_sa``) in float32 under autocast, to see what it leaves.
Prints, per part: the float32 loss, the loss's relative change, the cosine of the two gradients and the relative
size of their difference, averaged over the batches; beside it, for scale, the relative difference between the
float32 gradients of two different batches (the sampling noise every step has anyway).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from torch import Tensor

from td3_lightning.embeddings import SALEEncoder
from td3_lightning.module import TD3

KEYS = ("obs", "action", "reward", "next_obs", "terminated")


def encoder_in_float32() -> None:
    """SALE's ``z_s`` and ``z_sa`` computed in float32 also under autocast."""
    zs, zsa = SALEEncoder.zs, SALEEncoder.zsa

    def zs32(self: SALEEncoder, obs: Tensor) -> Tensor:
        with torch.autocast("cpu", enabled=False):
            return zs(self, obs.float())

    def zsa32(self: SALEEncoder, z: Tensor, action: Tensor) -> Tensor:
        with torch.autocast("cpu", enabled=False):
            return zsa(self, z.float(), action.float())

    SALEEncoder.zs, SALEEncoder.zsa = zs32, zsa32  # type: ignore[method-assign]


def batch_of(replay: dict[str, Tensor], index: Tensor) -> dict[str, Tensor]:
    """The replay's transitions at ``index`` as new tensors (the fixed encoder's ``z_s`` cache does not carry over
    from one pass to the next), with ``index``: the critics' loss is LAP's, as in training with ``sampler lap``."""
    return {**{k: replay[k][index].clone() for k in KEYS}, "index": index}


def loss_and_gradient(loss_of: Callable[[], Tensor], params: list[torch.nn.Parameter], bf16: bool
                      ) -> tuple[float, Tensor]:
    for p in params:
        p.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = loss_of()
    loss.backward()
    return float(loss.detach()), torch.cat([p.grad.flatten() for p in params if p.grad is not None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--encoder-float32", action="store_true")
    args = parser.parse_args()
    if args.encoder_float32:
        encoder_in_float32()
    replay = torch.load(args.checkpoint, weights_only=False, map_location="cpu")["ReplayDataModule"]["replay"]
    model = TD3.load_from_checkpoint(args.checkpoint, map_location="cpu").train()
    encoder = model.extensions.auxiliary_losses["embedding"]
    parts = {
        "encoder": (encoder, list(encoder.encoder.parameters())),
        "critic": (lambda b: model.critic_loss(b, torch.zeros_like(b["action"]))[0],
                   [p for p in model.critic.parameters() if p.requires_grad]),
        "actor": (lambda b: model.actor_loss(b, {}), [p for p in model.actor.parameters() if p.requires_grad]),
    }
    size = int(replay["size"])
    for name, (loss_fn, params) in parts.items():
        loss32 = change = cosine = difference = between = 0.0
        previous = None
        for i in range(args.batches):
            index = torch.randint(size, (256,), generator=torch.Generator().manual_seed(i))
            l32, g32 = loss_and_gradient(lambda: loss_fn(batch_of(replay, index)), params, bf16=False)
            l16, g16 = loss_and_gradient(lambda: loss_fn(batch_of(replay, index)), params, bf16=True)
            loss32 += l32 / args.batches
            change += abs(l16 - l32) / abs(l32) / args.batches
            cosine += float(torch.nn.functional.cosine_similarity(g32, g16, dim=0)) / args.batches
            difference += float((g16 - g32).norm() / g32.norm()) / args.batches
            if previous is not None:
                between += float((g32 - previous).norm() / g32.norm()) / (args.batches - 1)
            previous = g32
        print(f"{name:8s} loss {loss32:10.4g}   relative change {change:.1e}   gradient cosine {cosine:.4f}   "
              f"relative difference {difference:.3f}   (batch to batch in float32: {between:.2f})")


if __name__ == "__main__":
    main()
