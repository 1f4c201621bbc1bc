"""What the machine must give a fit, checked before anything is built: memory for the replay buffer, disk for its
checkpoints (the folders it writes: ``trainer_options.check_folder_option``), cores for its processes, and bfloat16
arithmetic for ``trainer.precision bf16-mixed`` on the CPU. One line with the figures."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import torch
from lightning.pytorch.utilities import rank_zero_warn

from td3_lightning.errors import MachineRefusal, UserInputError


def gigabytes(n: float) -> str:
    """``n`` bytes as the user reads them: ``3.7 GB``, ``120 MB``, ``300 kB``."""
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


class MemoryRefusedError(MachineRefusal):
    """The GPU or the machine had no memory for an allocation during a run, told as one line."""


def memory_refusal(err: BaseException) -> MemoryRefusedError | None:
    """``err`` as one line where the GPU or the machine had no memory for an allocation (torch's
    ``OutOfMemoryError``, its CPU allocator's or numpy's refusal); else None."""
    text = " ".join(str(err).split())
    gpu = isinstance(err, torch.OutOfMemoryError) or (isinstance(err, RuntimeError) and "MPS backend out of memory"
                                                       in text)
    cpu = isinstance(err, MemoryError) or (isinstance(err, RuntimeError) and "DefaultCPUAllocator" in text)
    if not (gpu or cpu):
        return None
    gist = ". ".join(text.split(". ")[:2]).rstrip(".")[:200]
    if gpu:
        return MemoryRefusedError(f"the GPU ran out of memory ({gist}): lower data.batch_size or the networks' sizes, "
                                  "keep the replay buffer in the machine's memory (data.buffer_device cpu), or free "
                                  "the GPU of other processes")
    asked = re.search(r"DefaultCPUAllocator: .* allocate (\d+) bytes", text)
    gist = f"{gigabytes(int(asked.group(1)))} more could not be allocated" if asked else gist.split(" for an array")[0]
    return MemoryRefusedError(f"the machine ran out of memory ({gist}): lower data.buffer_size or data.batch_size, or "
                              "close other programs")


def available_memory() -> int | None:
    """Bytes of memory that can be allocated without swapping (Linux's MemAvailable), or None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_cores() -> int | None:
    """The CPU cores this process may run on (its affinity), or None where unknown."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def check_replay_memory(needed: int, buffer_size: int, available: int | None, where: str = "memory",
                        processes: int = 1) -> None:
    """Refuse a replay buffer of ``needed`` bytes (``buffer_size`` transitions), one in each of ``processes``, that
    ``available`` bytes of ``where`` cannot hold (None: not known, not checked)."""
    if available is None or needed * processes <= available:
        return
    per = needed / max(buffer_size, 1)
    fits = int(available * 0.9 / processes / per)  # a tenth left for the networks and the envs
    each = f", in each of {processes} processes" if processes > 1 else ""
    raise UserInputError(
        f"the replay buffer needs {gigabytes(needed * processes)} (data.buffer_size {buffer_size} x {per:.0f} bytes "
        f"per transition{each}), more than the {gigabytes(available)} of {where} available; lower data.buffer_size "
        f"to at most {fits}")


def nearest_existing(path: Path) -> Path:
    """``path``, or its nearest parent that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def warn_if_disk_short(folder: str, needed: int, what: str) -> None:
    """Warn (with the figures) when the disk holding ``folder`` has less free space than ``needed`` bytes."""
    base = nearest_existing(Path(folder).expanduser().absolute())
    try:
        free = shutil.disk_usage(base).free
    except OSError:
        return
    if needed > free:
        rank_zero_warn(f"the run's checkpoints will need about {gigabytes(needed)} ({what}) and {base} has "
                       f"{gigabytes(free)} free: free space, or lower data.buffer_size, or set data.save_replay false "
                       "(a resume then refills the buffer)")


def warn_if_cores_short(processes: int, cores: int | None) -> None:
    """Warn when a fit runs more CPU processes than the machine has cores (each then runs far slower)."""
    if cores is not None and processes > cores:
        rank_zero_warn(f"trainer.devices asks for {processes} processes on {cores} CPU cores: they slow each other "
                       f"down; use at most {cores} (or a GPU)")


def native_bfloat16() -> bool | None:
    """Whether this CPU multiplies bfloat16 in hardware (AVX512-BF16 or AMX), or None where torch cannot tell."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if not all(callable(probe) for probe in probes):  # torch's own probes (private: this is their one use)
        return None
    return any(bool(probe()) for probe in probes)


def bfloat16_emulated_warning(precision: str, native: bool | None) -> tuple[str, ...]:
    """The warning of a CPU fit in ``precision`` (a bfloat16 autocast: bf16-mixed, or 16-mixed, which the CPU runs as
    bf16-mixed) on a CPU that has no bfloat16 arithmetic (``native`` False): torch emulates it, far slower."""
    if native is not False or str(precision) in ("32", "32-true"):
        return ()
    return (f"trainer.precision {precision} on a CPU with no bfloat16 arithmetic (neither AVX512-BF16 nor AMX): torch "
            "emulates it, and the networks train several times slower than in 32-true; leave --trainer.precision "
            "out (or give 32-true) on this machine",)
