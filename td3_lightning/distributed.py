"""Per-process state under data parallelism (DDP).

Every process (rank) has its own environments and its own replay buffer; the networks are
the same on all ranks (their gradients are averaged).  A checkpoint therefore holds the
networks once and the per-rank parts (replay, env-loop counters, random streams) once per
rank: rank 0's at the top level, as in a single-process checkpoint, and the others' in
``other_ranks``.  A run resumes them with the same number of processes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import lightning as L
import torch
import torch.distributed as dist

from td3_lightning.errors import UserInputError


def is_distributed(trainer: L.Trainer | None) -> bool:
    return trainer is not None and trainer.world_size > 1 and dist.is_available() and dist.is_initialized()


def pack_rank_states(trainer: L.Trainer | None, state: dict[str, Any]) -> dict[str, Any]:
    """Collective (every rank calls it): rank 0 gets its own ``state`` with the other ranks'
    under ``other_ranks``; the other ranks get their own (only rank 0 writes checkpoints)."""
    if not is_distributed(trainer):
        return state
    assert trainer is not None
    gathered: list[Any] | None = [None] * trainer.world_size if trainer.global_rank == 0 else None
    dist.gather_object(state, gathered, dst=0)
    if gathered is None:
        return state
    return {**gathered[0], "world_size": trainer.world_size, "other_ranks": gathered[1:]}


def check_same_processes(saved: int, world: int, what: str = "replay buffer") -> None:
    """A checkpoint's per-rank state (saved by ``saved`` processes) resumes only with as many (``world``)."""
    if saved != world:
        raise UserInputError(
            f"the checkpoint's {what} was saved by {saved} process(es), this run has {world}: resume with the same "
            "number of processes (trainer.devices x trainer.num_nodes)"
        )


def one_process_only(option: str, needs: str, devices: int, resumed: bool = False) -> None:
    """One :class:`UserInputError` line for ``model.<option>``, which ``needs`` one process, on ``devices`` processes
    (more than one); a ``resumed`` run keeps the option, so only the other fix is told."""
    if devices > 1:
        other = ", as its checkpoint was trained" if resumed else f", or model.{option} false"
        raise UserInputError(f"model.{option} {needs} ({devices} devices or nodes): set trainer.devices 1{other}")


def unpack_rank_state(trainer: L.Trainer | None, state: dict[str, Any], what: str) -> dict[str, Any]:
    """This rank's part of a state written by :func:`pack_rank_states`."""
    world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
    check_same_processes(int(state.get("world_size", 1)), world, what)
    if rank == 0:
        return {k: v for k, v in state.items() if k not in ("world_size", "other_ranks")}
    return state["other_ranks"][rank - 1]


def average_gradients(trainer: L.Trainer, module: torch.nn.Module) -> None:
    """Average the gradients of ``module`` over all ranks (one all-reduce of a flat buffer)."""
    if not is_distributed(trainer):
        return
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    flat = trainer.strategy.reduce(flat, reduce_op="mean")
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def largest_over_ranks(trainer: L.Trainer | None) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """Under DDP, a function that returns a tensor's elementwise maximum over all ranks (one all-reduce, no barrier:
    every rank calls it at the same point of its update); else None."""
    if not is_distributed(trainer):
        return None

    def largest(tensor: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor

    return largest


def without_reducer_sync(trainer: L.Trainer) -> None:
    """Switch off DistributedDataParallel's gradient reducer for the coming backward passes.

    Under DDP every rank samples its own replay, and each of the two losses of a training step has
    its own backward: the reducer (one synchronised backward per forward, every parameter used)
    does not fit. :func:`average_gradients` averages each optimizer's gradients before its step
    instead. A no-op without DDP.
    """
    model = trainer.model
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        model.require_backward_grad_sync = False


def device_count(devices: Any, cuda: bool) -> int:
    """How many devices ``trainer.devices`` asks for (``auto`` and -1: every GPU on CUDA, one CPU process)."""
    if isinstance(devices, (list, tuple)):
        return len(devices)
    text = str(devices).strip()
    if text in ("auto", "-1"):
        return torch.cuda.device_count() if cuda else 1
    if "," in text:
        return len([d for d in text.split(",") if d.strip()])
    return int(text) if text.lstrip("-").isdigit() else 1


def wants_cuda(trainer: Mapping[str, Any]) -> bool:
    """Whether parsed ``trainer`` options run on CUDA here (``accelerator`` auto, gpu or cuda, and a GPU present)."""
    accelerator = trainer.get("accelerator") or "auto"
    return isinstance(accelerator, str) and accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
