"""How a loss becomes an optimizer step: around Lightning's hooks where they would do nothing,
through them otherwise (precision plugins, DDP, callbacks), and the compiled update."""

from __future__ import annotations

import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal

import lightning as L
import torch
from torch import Tensor

from td3_lightning import _lightning
from td3_lightning.captured import CapturedUpdate
from td3_lightning.distributed import average_gradients, largest_over_ranks
from td3_lightning.errors import UserInputError
from td3_lightning.guards import LossGuard

CompileMode = Literal["none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "cudagraphs"]
COMPILE_MODES: tuple[str, ...] = typing.get_args(CompileMode)
CRITIC, ACTOR, AUXILIARY = 0, 1, 2  # optimizer indices (the critic's steps are the ones global_step counts)
_UPDATE_HOOKS = ("on_before_backward", "on_after_backward", "on_before_optimizer_step")


class Stepper:
    """``zero_grad``, backward and step of the critic (``CRITIC``) or actor (``ACTOR``) optimizer.

    On a plain single-device 32-bit run (``direct``) the backward and the step go around
    Lightning's hooks; otherwise through them (``manual_backward``, the strategy's optimizer step).
    Only the critic's steps advance ``global_step``, so that it counts training steps. Every loss
    is checked before its backward (``check_each_loss``, the CPU default) or recorded on the device.
    """

    def __init__(self) -> None:
        self.direct = False
        self.check_each_loss = True
        self.guard = LossGuard()
        self.optimizers: list[Any] = []  # the LightningOptimizers of the training step being taken
        self.step_taken = 0  # its number (global_step + 1)
        self.largest_over_ranks: Callable[[Tensor], Tensor] | None = None  # a maximum over the DDP processes

    def configure(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        """Choose the paths when training starts, by what the run needs."""
        self.direct = direct_update_possible(trainer, module)
        self.largest_over_ranks = largest_over_ranks(trainer)
        self.check_each_loss = checks_each_loss(module.device)

    def compile(self, module: Any, mode: str) -> tuple[Any, bool]:
        """``module.td3_update`` compiled with ``torch.compile`` mode ``mode``, or captured as CUDA graphs
        (``cudagraphs``: :class:`~td3_lightning.captured.CapturedUpdate`), after :meth:`configure`; and whether
        it replays CUDA graphs (its outputs are then overwritten by the next call)."""
        if not self.direct:
            raise UserInputError(
                f"model.compile_mode {mode} compiles the whole training step, which needs one device, 32-bit "
                "precision and no callback that watches backward passes or optimizer steps; set "
                "model.compile_mode none")
        self.check_each_loss = False  # a host sync inside the step would break the graph
        if mode == "cudagraphs":
            captured = CapturedUpdate.for_module(module)
            return captured, captured.capture
        graphs = self.graphs_replayed(mode, module.device)
        return compile_update(module.td3_update, mode, cuda_graphs=graphs), graphs

    @staticmethod
    def graphs_replayed(mode: str, device: torch.device) -> bool:
        """Whether the compiled update replays CUDA graphs (its outputs are then overwritten by the next call)."""
        return mode in ("reduce-overhead", "max-autotune") and device.type == "cuda"

    def step(self, module: L.LightningModule, which: int, loss: Tensor, trained: tuple[torch.nn.Module, ...]) -> None:
        """One optimizer step on ``loss``; under DDP the gradients of the ``trained`` modules are averaged."""
        if self.check_each_loss:
            self.guard.check_now(which, loss, self.step_taken)  # else recorded after the update (after_update)
        optimizer = self.optimizers[which]
        optimizer.zero_grad(set_to_none=True)
        if self.direct:
            loss.backward()
            optimizer.optimizer.step()
            return
        module.manual_backward(loss)
        average_gradients(module.trainer, torch.nn.ModuleList(trained))  # no-op in one process
        if which == CRITIC:
            optimizer.step()  # counted
        else:
            module.trainer.strategy.optimizer_step(optimizer.optimizer, _noop_closure, model=module)

    def after_update(self, critic_loss: Tensor, actor_loss: Tensor | None, auxiliary: Sequence[Tensor] = ()) -> None:
        """Count a step taken around ``LightningOptimizer.step``; record the losses not checked yet (outside
        the update: a compiled or captured update holds no host-side step number)."""
        if self.direct:
            _lightning.count_optimizer_step(self.optimizers[CRITIC])
        if not self.check_each_loss:
            self.guard.record(CRITIC, critic_loss, self.step_taken)
            if actor_loss is not None:
                self.guard.record(ACTOR, actor_loss, self.step_taken)
            for loss in auxiliary:
                self.guard.record(AUXILIARY, loss, self.step_taken)


def _noop_closure() -> None:
    return None


def compile_update(update: Any, mode: str, cuda_graphs: bool) -> Any:
    """``torch.compile`` of the whole update; with CUDA graphs each call starts a new graph step
    (the outputs of the previous one are then free to be overwritten)."""
    compiled = torch.compile(update, mode=mode)
    if not cuda_graphs:
        return compiled

    def step(*args: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args)

    return step


def checks_each_loss(device: torch.device) -> bool:
    """Whether every loss is checked before its backward: on the CPU, where the host sync is nearly free (elsewhere
    the losses are recorded on the device and checked at the syncs that happen anyway; ``guards.py``)."""
    return device.type == "cpu"


def direct_update_possible(trainer: L.Trainer, module: L.LightningModule) -> bool:
    """Whether ``loss.backward()`` and ``optimizer.step()`` do all that Lightning's
    ``manual_backward`` and ``LightningOptimizer.step`` would: one device, 32-bit precision
    (no loss scaling or autocast), no profiler, and no callback or module hook that watches
    backward passes or optimizer steps."""
    from lightning.pytorch.plugins.precision import Precision
    from lightning.pytorch.profilers import PassThroughProfiler
    from lightning.pytorch.strategies import SingleDeviceStrategy
    from lightning.pytorch.utilities.model_helpers import is_overridden

    strategy = trainer.strategy
    if type(strategy) is not SingleDeviceStrategy or type(strategy.precision_plugin) is not Precision:
        return False
    if not isinstance(trainer.profiler, PassThroughProfiler) or _lightning.runs_under_fabric(module):
        return False
    if any(is_overridden(h, cb, L.Callback) for cb in trainer.callbacks for h in _UPDATE_HOOKS):
        return False
    if any(is_overridden(h, module, L.LightningModule) for h in (*_UPDATE_HOOKS, "backward")):
        return False
    return _lightning.step_counting_hooks_exist(trainer)
