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


#: what to do where the GPU or the machine had no memory, by (device, stage): ``new`` a fit that starts over,
#: ``resumed`` a fit that goes on from its checkpoint (whose buffer size and networks it keeps), ``play`` validate/test
MEMORY_FIXES = {
    ("gpu", "new"): "lower data.batch_size or the networks' sizes, keep the replay buffer in the machine's memory "
                    "(data.buffer_device cpu), or free the GPU of other processes",
    ("gpu", "resumed"): "free the GPU of other processes, keep the replay buffer in the machine's memory "
                        "(data.buffer_device cpu), or lower data.batch_size",
    ("gpu", "play"): "free the GPU of other processes, or play on the CPU (--trainer.accelerator cpu)",
    ("cpu", "new"): "lower data.buffer_size or data.batch_size, or close other programs",
    ("cpu", "resumed"): "close other programs, or lower data.batch_size",
    ("cpu", "play"): "close other programs, or play a checkpoint without the replay buffer (a best-*.ckpt, or one "
                     "written by export)",
}


class MemoryRefusedError(MachineRefusal):
    """The GPU or the machine had no memory for an allocation during a run, told as one line: ``what`` happened,
    then what to do on ``device`` (gpu, cpu) in a fit (that goes on from a checkpoint: ``resumable``) or a play."""

    def __init__(self, what: str, go_on: str = "then run the command again", resumable: bool = False,
                 device: str = "cpu", fit: bool = True) -> None:
        stage = "play" if not fit else "resumed" if resumable else "new"
        super().__init__(f"{what}: {MEMORY_FIXES[device, stage]}", go_on)
        self.what, self.device, self.fit = what, device, fit

    def going_on(self, go_on: str, resumable: bool) -> MemoryRefusedError:
        return type(self)(self.what, go_on, resumable, self.device, self.fit)


def memory_refusal(err: BaseException, fit: bool = True) -> MemoryRefusedError | None:
    """``err``, or an exception it was raised from, as one line where the GPU or the machine had no memory for an
    allocation (torch's CUDA or MPS out of memory, its CPU allocator's or numpy's refusal) in a fit (else a
    validate or test); else None."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        text = " ".join(str(err).split())
        runtime = isinstance(err, RuntimeError)
        gpu = isinstance(err, torch.cuda.OutOfMemoryError) or (runtime and "MPS backend out of memory" in text)
        if gpu or isinstance(err, MemoryError) or (runtime and "DefaultCPUAllocator" in text):
            gist = ". ".join(text.split(". ")[:2]).rstrip(".")[:200]
            asked = re.search(r"DefaultCPUAllocator: .* allocate (\d+) bytes", text)
            if asked:
                gist = f"{gigabytes(int(asked.group(1)))} more could not be allocated"
            gist = f" ({gist.split(' for an array')[0]})" if gist else ""
            what = f"the GPU ran out of memory{gist}" if gpu else f"the machine ran out of memory{gist}"
            return MemoryRefusedError(what, device="gpu" if gpu else "cpu", fit=fit)
        err = err.__cause__ or err.__context__
    return None


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
