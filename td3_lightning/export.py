"""Export a trained policy from a checkpoint.

    python -m td3_lightning export --out policy.ckpt                    # the newest run's best checkpoint, slim
    python -m td3_lightning export --ckpt_path last --out policy.ckpt   # the newest run's last.ckpt, slim
    python -m td3_lightning export --ckpt_path last --out actor.pt --format torchscript
    python -m td3_lightning export --ckpt_path path/to/run.ckpt --out actor.onnx --format onnx

(``python -m td3_lightning.export ...`` is the same command.) ``--ckpt_path`` defaults to ``best``: the
newest best checkpoint by ``val/return`` under ``./lightning_logs/*/checkpoints/``; ``last`` is the newest
``last.ckpt`` there; anything else is a checkpoint file. An existing ``--out`` is replaced only with
``--overwrite``, and never when it is the checkpoint being exported.

``slim`` keeps only what ``test``, ``validate`` and ``TD3.load_from_checkpoint`` need
(network weights, hyperparameters, the td3_lightning section): no optimizer state, no
replay buffer, no loop state. ``torchscript`` writes the actor alone, a self-contained
``observation -> action`` function (``torch.jit.load(path)(obs)``) that needs only torch.
``onnx`` writes the same function as an ONNX graph with one input ``observation``
(float32, shape ``[batch, *obs_shape]``, any batch size) and one output ``action``
(``[batch, action_dim]``, already scaled to the env's action bounds); it needs the
``onnx`` extra (``pip install "td3_lightning[onnx]"``) and runs in onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
from torch import Tensor

from td3_lightning.checkpointing import SLIM_KEYS, atomic_path, check_checkpoint, find_run_checkpoint, slim_checkpoint
from td3_lightning.commands import PROG
from td3_lightning.errors import UserInputError

__all__ = ["SLIM_KEYS", "slim_checkpoint", "export_torchscript", "export_onnx", "check_out", "main"]

def _actor_and_example(src: str | Path) -> tuple[torch.nn.Module, Tensor]:
    """The checked checkpoint's actor for inference (eval mode, weights that need no gradient: its
    actions do not require grad), and a zero observation batch (2 rows) to trace it with."""
    from td3_lightning.module import TD3

    check_checkpoint(src)
    model = TD3.load_from_checkpoint(src, map_location="cpu")
    return model.actor.eval().requires_grad_(False), torch.zeros(2, *model.hparams.obs_shape)


def export_torchscript(src: str | Path, out: str | Path) -> Path:
    """Write the actor of ``src`` as a TorchScript module ``obs -> action``."""
    actor, example = _actor_and_example(src)
    scripted = torch.jit.trace(actor, example)
    out = Path(out)
    with atomic_path(out) as tmp:
        scripted.save(str(tmp))
    return out


def export_onnx(src: str | Path, out: str | Path) -> Path:
    """Write the actor of ``src`` as an ONNX graph ``observation -> action`` (dynamic batch)."""
    actor, example = _actor_and_example(src)
    try:
        import onnx  # noqa: F401  (the exporter needs it; fail before writing with the fix)
    except ImportError:
        raise UserInputError('ONNX export needs the onnx package: pip install "td3_lightning[onnx]"') from None
    out = Path(out)
    with atomic_path(out) as tmp:
        # the TorchScript-based exporter: a plain MLP needs nothing more, and it writes one self-contained file
        torch.onnx.export(actor, (example,), str(tmp), input_names=["observation"], output_names=["action"],
                          dynamic_axes={"observation": {0: "batch"}, "action": {0: "batch"}}, dynamo=False)
    return out


EXPORTERS = {"slim": slim_checkpoint, "torchscript": export_torchscript, "onnx": export_onnx}


def check_out(src: str | Path, out: str | Path, overwrite: bool = False) -> None:
    """One-line :class:`UserInputError` unless ``out`` may be written: never the checkpoint ``src``
    itself, never a folder, and an existing file only with ``overwrite``."""
    target = Path(out).expanduser()
    if target.is_dir():
        raise UserInputError(f"--out {out} is a folder; give the file to write, e.g. --out {target / 'policy.ckpt'}")
    if not (target.exists() or target.is_symlink()):
        return
    if target.exists() and Path(src).exists() and os.path.samefile(src, target):
        raise UserInputError(f"--out {out} is the checkpoint being exported (--ckpt_path {src}); "
                             "write the export to another file")
    if not overwrite:
        raise UserInputError(f"--out {out} exists; pass --overwrite to replace it, or choose another --out")


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"{PROG} export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt_path", default="best",
                        help="the checkpoint to export from: best (default) or last, the newest run's under "
                        "./lightning_logs, or a checkpoint file")
    parser.add_argument("--out", required=True, help="the file to write; an existing one only with --overwrite")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out if it exists (never the checkpoint being exported)")
    parser.add_argument("--format", choices=list(EXPORTERS), default="slim", help="what to write (default: slim)")
    ns = parser.parse_args(args)
    try:
        ckpt = ns.ckpt_path
        if ckpt in ("best", "last"):
            ckpt = find_run_checkpoint({}, ckpt)
            print(f"checkpoint: {ckpt} (--ckpt_path {ns.ckpt_path})")
        check_out(ckpt, ns.out, ns.overwrite)
        out = EXPORTERS[ns.format](ckpt, ns.out)
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
