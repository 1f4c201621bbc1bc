"""``model.compile_mode cudagraphs``: the TD3 update captured as CUDA graphs and replayed every step.

On a GPU, TD3's update at the usual sizes (256-256 networks, batch 256) costs what launching its hundred-odd
small kernels costs the CPU. Here the module's own ``td3_update`` (auxiliary losses such as SALE's encoder, the
critic update, and with the delayed actor update the actor and the targets) is captured once as a
``torch.cuda.CUDAGraph`` over static batch buffers, with and without the actor update, and replayed: one launch per
step. The exploration action is one captured call too. The Adam optimizers are capturable, their learning rates
device tensors that the schedules write into. On the CPU (tests) the same static-buffer update runs eagerly,
without the capture. Why and what is refused: ``docs/options.md``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from td3_lightning.distributed import device_count, wants_cuda
from td3_lightning.errors import UserInputError

#: eager updates run (and undone) before a capture: they create Adam's state and settle lazy initialisations
WARMUP_STEPS = 3
CPU_MESSAGE = "model.compile_mode cudagraphs needs a CUDA device (--trainer.accelerator gpu); on the CPU use none"


def can_capture(device: torch.device) -> bool:
    """CUDA graphs need a CUDA device. (The CPU tests patch this to run the static-buffer update eagerly in a fit.)"""
    return device.type == "cuda"


def lr_dtype(device: torch.device) -> torch.dtype:
    """The precision fused Adam computes its learning rate in: double on the CPU, float on CUDA (so a tensor
    learning rate steps exactly as a Python float does)."""
    return torch.float64 if device.type == "cpu" else torch.float32


def make_capturable(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """An Adam made safe to capture: ``capturable``, each learning rate a tensor on ``device``."""
    for group in optimizer.param_groups:
        group["capturable"] = True
        lr = group["lr"]
        if not (torch.is_tensor(lr) and lr.device == device and lr.dtype == lr_dtype(device)):
            group["lr"] = torch.tensor(float(lr), dtype=lr_dtype(device), device=device)


def plain_state_dict(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> dict[str, Any]:
    """A capturable Adam's state dict as a plain Adam's (learning rates as floats, not capturable): a checkpoint
    of this mode loads in every mode. An ``Optimizer.register_state_dict_post_hook``."""
    for group in state_dict["param_groups"]:
        if torch.is_tensor(group["lr"]):
            group["lr"] = group["lr"].item()
        group["capturable"] = False
    return state_dict


class CapturedUpdate:
    """``TD3.td3_update`` over static buffers (its signature and result).

    ``step(batch, noise, update_actor)`` copies the replay batch and the target-policy noise into the static
    buffers and replays the graph of the update with or without the actor. The first step (and one with a batch
    of another layout, or after an optimizer's ``load_state_dict``) warms up with :data:`WARMUP_STEPS` updates,
    restores every weight and Adam state they changed, and captures. With ``capture`` False (the CPU) the same
    update runs eagerly every step. Captured outputs are overwritten by the next step. The module's parameters and
    Adam states must be updated in place (as network resets and hard target updates do); its stepper must step
    ``optimizers`` directly (``Stepper.compile`` sees to it).
    """

    def __init__(self, module: Any, optimizers: Sequence[torch.optim.Optimizer], capture: bool) -> None:
        if capture and module.stepper.check_each_loss:
            raise RuntimeError("a captured update cannot check each loss on the host: Stepper.compile turns it off")
        self.module, self.capture, self.device = module, capture, module.device
        self.optimizers = list(optimizers)  # critic, actor, auxiliary losses' (SALE's encoder)
        for optimizer in self.optimizers:
            make_capturable(optimizer, self.device)
            optimizer.register_state_dict_post_hook(plain_state_dict)
            optimizer.register_load_state_dict_post_hook(self._reload)
        self.batch: dict[str, Tensor] = {}  # the static buffers
        self.noise = torch.empty(0)
        self.ready = False  # warmed up (and captured)
        self._layout: tuple[Any, ...] = ()
        self._statics: list[Tensor] = []  # the static buffers in the batch's order, the noise last
        self._by_dtype: list[list[int]] = []  # their indices, by dtype
        self._graphs: dict[bool, tuple[Any, Any]] | None = None  # update_actor -> (graph, its result)
        self._act: tuple[Tensor, Tensor, Any] | None = None  # static observations, action, graph

    @classmethod
    def for_module(cls, module: Any) -> CapturedUpdate:
        """The captured update of a module being fitted (all its optimizers)."""
        if not can_capture(module.device):
            raise UserInputError(CPU_MESSAGE)
        return cls(module, [o.optimizer for o in module.optimizers()], capture=module.device.type == "cuda")

    # ------------------------------------------------------------------ the update
    def step(self, batch: dict[str, Tensor], noise: Tensor, update_actor: bool) -> Any:
        """One TD3 update -> its ``UpdateResult`` (captured: static tensors the next step overwrites)."""
        self._load(batch, noise)
        if not self.ready:
            self._prepare()
        if self._graphs is None:
            return self.module.td3_update(self.batch, self.noise, update_actor)
        graph, result = self._graphs[update_actor]
        graph.replay()
        return result

    __call__ = step

    def _load(self, batch: dict[str, Tensor], noise: Tensor) -> None:
        """Copy ``batch`` and ``noise`` into the static buffers, one multi-tensor copy per dtype (new buffers, and a
        new capture, for a new layout)."""
        sources = [*batch.values(), noise]
        layout = (*batch, *((t.shape, t.dtype) for t in sources))
        if layout != self._layout:
            self.batch = {k: torch.empty_like(v) for k, v in batch.items()}
            self.noise, self._layout, self.ready = torch.empty_like(noise), layout, False
            self._statics = [*self.batch.values(), self.noise]
            dtypes = [t.dtype for t in sources]
            self._by_dtype = [[i for i, d in enumerate(dtypes) if d == dtype] for dtype in dict.fromkeys(dtypes)]
        for group in self._by_dtype:
            torch._foreach_copy_([self._statics[i] for i in group], [sources[i] for i in group])

    def _prepare(self) -> None:
        """Warm up, undo the warm-up's updates, then capture (on CUDA) the update without and with the actor."""
        self._graphs = None
        saved = self._snapshot()
        self._on_side_stream(self._warm_up)
        self._restore(saved)
        if self.capture:
            self._graphs = {}
            for update_actor in (False, True):
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    result = self.module.td3_update(self.batch, self.noise, update_actor)
                self._graphs[update_actor] = (graph, result)
        self.ready = True

    def _warm_up(self) -> None:
        with warnings.catch_warnings():  # Adam warns that a capturable instance steps uncaptured
            warnings.filterwarnings("ignore", message="This instance was constructed with capturable=True")
            for _ in range(WARMUP_STEPS):
                for update_actor in (False, True):
                    self.module.td3_update(self.batch, self.noise, update_actor)

    def _on_side_stream(self, work: Callable[[], Any]) -> None:
        """``work()`` on a side stream when capturing (torch's recipe for the warm-up before a capture)."""
        if not self.capture:
            work()
            return
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            work()
        torch.cuda.current_stream(self.device).wait_stream(side)

    @torch.no_grad()
    def _snapshot(self) -> tuple[dict[str, Tensor], list[dict[Tensor, dict[str, Tensor]]]]:
        """Copies of the module's floating-point state and of the Adam states (before a warm-up)."""
        module_state = {k: v.clone() for k, v in self.module.state_dict().items() if v.is_floating_point()}
        adam = [{p: {k: v.clone() for k, v in state.items() if torch.is_tensor(v)} for p, state in o.state.items()}
                for o in self.optimizers]
        return module_state, adam

    @torch.no_grad()
    def _restore(self, saved: tuple[dict[str, Tensor], list[dict[Tensor, dict[str, Tensor]]]]) -> None:
        """Write the snapshot back into the same tensors; Adam states the warm-up created become zero (as new)."""
        module_state, adam = saved
        current = self.module.state_dict()
        for name, value in module_state.items():
            current[name].copy_(value)
        for optimizer, before in zip(self.optimizers, adam):
            for p, state in optimizer.state.items():
                for k, v in state.items():
                    if torch.is_tensor(v) and p in before:
                        v.copy_(before[p][k])
                    elif torch.is_tensor(v):
                        v.zero_()

    def _reload(self, optimizer: torch.optim.Optimizer) -> None:
        """After ``optimizer.load_state_dict``: capturable again, captured afresh (its states may be new tensors)."""
        make_capturable(optimizer, self.device)
        self.ready = False

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def act(self, obs: Tensor) -> Tensor:
        """The actor's action for ``obs`` (on the module's device); captured, the next call overwrites it."""
        if not self.capture:
            return self.module.actor(obs)
        if self._act is None or self._act[0].shape != obs.shape or self._act[0].dtype != obs.dtype:
            static = obs.clone()
            self._on_side_stream(lambda: [self.module.actor(static) for _ in range(WARMUP_STEPS)])
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                action = self.module.actor(static)
            self._act = (static, action, graph)
        static, action, graph = self._act
        static.copy_(obs)
        graph.replay()
        return action


def check_capture_options(model: Mapping[str, Any], trainer: Mapping[str, Any]) -> None:
    """One :class:`UserInputError` line for what ``model.compile_mode cudagraphs`` cannot run on: several devices
    or processes, other than 32-bit precision, no CUDA device (the command line, before anything is built)."""
    if model.get("compile_mode") != "cudagraphs":
        return
    accelerator, cuda = trainer.get("accelerator") or "auto", wants_cuda(trainer)
    strategy, nodes = trainer.get("strategy") or "auto", trainer.get("num_nodes") or 1
    distributed = strategy not in ("auto", "single_device")
    if distributed or nodes != 1:
        where = f"trainer.strategy {strategy}" if distributed else f"trainer.num_nodes {nodes}"
        raise UserInputError(f"model.compile_mode cudagraphs captures the update on one device, not distributed "
                             f"({where}); use model.compile_mode none")
    devices = trainer.get("devices") or "auto"
    if device_count(devices, cuda) > 1:
        raise UserInputError(f"model.compile_mode cudagraphs captures the update on one device (trainer.devices "
                             f"{devices}): set trainer.devices 1, or use model.compile_mode none with several")
    precision = trainer.get("precision")
    if precision is not None and str(precision) not in ("32", "32-true"):
        raise UserInputError(f"model.compile_mode cudagraphs needs 32-bit precision (trainer.precision {precision}); "
                             "use model.compile_mode none")
    if isinstance(accelerator, str) and not cuda:
        raise UserInputError(CPU_MESSAGE)
