"""Network resets (``model.reset_steps``; Nikishin et al., 2022, the primacy bias): the actor, the
critics and their targets start over at given training steps, the replay buffer is kept."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from td3_lightning.extensions.base import StepHook


class NetworkResets(StepHook):
    """Calls :func:`reset_networks` before the training step that follows each of ``steps``."""

    def __init__(self, steps: list[int]) -> None:
        self.steps = frozenset(steps)

    def on_train_start(self, module: Any) -> None:
        max_steps = module.trainer.max_steps
        late = sorted(k for k in self.steps if max_steps is not None and 0 < max_steps <= k)
        if late:
            rank_zero_warn(f"model.reset_steps {late} lie at or after trainer.max_steps ({max_steps}): "
                           "those resets never happen")

    def before_step(self, module: Any, step: int) -> None:
        if step in self.steps:
            reset_networks(module)

#: what a reset keeps besides the buffer: the policy checkpoint and the return it was assessed on, value clipping's
#: bounds, the observation statistics and an automatic value range (the data's, not learned): the fresh networks read
#: what the old ones did
KEPT = ("policy_checkpoint.", "extensions.target_value.")
KEPT_PARTS = (".normalizer.", ".head.bounds")


def _kept(name: str) -> bool:
    return name.startswith(KEPT) or any(part in name for part in KEPT_PARTS)


def reset_networks(module: Any) -> None:
    """Fresh weights for the actor, the critics and their targets, as a new module would draw them,
    and zeroed Adam states; what :data:`KEPT` and :data:`KEPT_PARTS` name is kept.

    The weights are copied into the existing tensors, so optimizers and compiled steps keep working
    on them. The fresh module is built from the saved hyperparameters. Its seed comes from the
    module's own random stream (saved in checkpoints), so a resumed run resets to the same weights;
    under DDP every rank takes rank 0's draw."""
    gen = module.random_stream.generator(module.device)
    seed = int(torch.randint(2**62, (1,), generator=gen, device=gen.device).item())
    seed = module.trainer.strategy.broadcast(seed, src=0)
    hparams = {k: v for k, v in module.hparams.items() if not k.startswith("_")}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fresh = type(module)(**{**hparams, "teacher": None, "flush_denormal": False})
    mine, new = module.state_dict(), fresh.state_dict()
    with torch.no_grad():
        for name, tensor in mine.items():
            if name in new and tensor.is_floating_point() and not _kept(name):
                tensor.copy_(new[name])
    for optimizer in module.optimizers():
        for state in optimizer.optimizer.state.values():
            for value in state.values():
                if torch.is_tensor(value):
                    value.zero_()
    module.print(f"step {module.global_step}: networks drawn afresh and Adam states zeroed (model.reset_steps); "
                 "the replay buffer is kept")
