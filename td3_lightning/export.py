"""Export a trained policy from a checkpoint.

    python -m td3_lightning export --out policy.ckpt                    # the newest run's best checkpoint, slim
    python -m td3_lightning export --ckpt_path last --out policy.ckpt   # the newest run's last.ckpt, slim
    python -m td3_lightning export --ckpt_path last --out actor.pt --format torchscript
    python -m td3_lightning export --ckpt_path path/to/run.ckpt --out actor.onnx

(``python -m td3_lightning.export ...`` is the same command.) ``--ckpt_path`` defaults to ``best``: the
newest run's best checkpoint by ``val/return`` (over the runs it resumed too) under
``./lightning_logs/*/checkpoints/`` (or the one ``--selection.episodes`` chose there); ``last`` is the newest
``last.ckpt`` there; with ``--config`` both are of that config's run (its folders, env, ``env_kwargs`` and model
options, as ``test`` takes them); anything else is a checkpoint file. ``--out`` is a file in an existing folder;
an existing one is replaced only with ``--overwrite``, and never when it is the checkpoint being exported or any
other resumable training checkpoint.

``slim`` keeps only what ``test``, ``validate`` and ``TD3.load_from_checkpoint`` need
(network weights, hyperparameters, the td3_lightning section): no optimizer state, no
replay buffer, no loop state. ``torchscript`` writes the actor alone, a self-contained
``observation -> action`` function (``torch.jit.load(path)(obs)``) that needs only torch.
``onnx`` writes the same function as an ONNX graph with one input ``observation``
(float32, shape ``[batch, *obs_shape]``, any batch size) and one output ``action``
(``[batch, action_dim]``, already scaled to the env's action bounds); it needs the
``onnx`` extra (``pip install -c constraints.txt -e ".[onnx]"``) and runs in onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from typing import TYPE_CHECKING, Any

from td3_lightning.commands import PROG, OneLineParser, plain_text
from td3_lightning.errors import UserInputError, check_checkpoint_file, shipped_path, yaml_problem

if TYPE_CHECKING:  # torch and Lightning are imported when a checkpoint is read: --help and parse errors need none
    import torch
    from torch import Tensor

__all__ = ["SLIM_KEYS", "slim_checkpoint", "export", "export_torchscript", "export_onnx", "check_out", "main"]  # noqa: F822

def _actor_and_example(src: str | Path) -> tuple[torch.nn.Module, Tensor]:
    """The checked checkpoint's actor for inference (eval mode, weights that need no gradient: its
    actions do not require grad), and a zero observation batch (2 rows) to trace it with."""
    import torch

    from td3_lightning.checkpointing import check_checkpoint
    from td3_lightning.module import TD3

    check_checkpoint(src)
    model = TD3.load_from_checkpoint(src, map_location="cpu")
    return model.policy.eval().requires_grad_(False), torch.zeros(2, *model.hparams.obs_shape)


def export_torchscript(src: str | Path, out: str | Path) -> Path:
    """Write the actor of ``src`` as a TorchScript module ``obs -> action``."""
    import torch

    from td3_lightning.checkpointing import atomic_path

    actor, example = _actor_and_example(src)
    scripted = torch.jit.trace(actor, example)
    out = Path(out)
    with atomic_path(out) as tmp:
        scripted.save(str(tmp))
    return out


def export_onnx(src: str | Path, out: str | Path) -> Path:
    """Write the actor of ``src`` as an ONNX graph ``observation -> action`` (dynamic batch)."""
    import torch

    from td3_lightning.checkpointing import atomic_path

    actor, example = _actor_and_example(src)
    try:
        import onnx  # noqa: F401  (the exporter needs it; fail before writing with the fix)
    except ImportError:
        raise UserInputError("ONNX export needs the onnx package, which is not installed: install td3_lightning's "
                             'onnx extra, pip install -c constraints.txt -e ".[onnx]"') from None
    out = Path(out)
    with atomic_path(out) as tmp:
        # the TorchScript-based exporter: a plain MLP needs nothing more, and it writes one self-contained file
        torch.onnx.export(actor, (example,), str(tmp), input_names=["observation"], output_names=["action"],
                          dynamic_axes={"observation": {0: "batch"}, "action": {0: "batch"}}, dynamo=False)
    return out


FORMATS = ("slim", "torchscript", "onnx")


def __getattr__(name: str) -> Any:  # SLIM_KEYS and slim_checkpoint: checkpointing's, imported when asked for
    if name in ("SLIM_KEYS", "slim_checkpoint"):
        from td3_lightning import checkpointing

        return getattr(checkpointing, name)
    raise AttributeError(f"module 'td3_lightning.export' has no attribute {name!r}")


def export(src: str | Path, out: str | Path, fmt: str) -> Path:
    """Write ``src``'s policy to ``out`` in format ``fmt`` (one of :data:`FORMATS`)."""
    from td3_lightning.checkpointing import slim_checkpoint

    return {"slim": slim_checkpoint, "torchscript": export_torchscript, "onnx": export_onnx}[fmt](src, out)


def check_out(src: str | Path, out: str | Path, overwrite: bool = False) -> None:
    """One-line :class:`UserInputError` unless ``out`` may be written: a file in an existing folder; never the
    checkpoint ``src`` itself, never a resumable training checkpoint, and another existing file only with
    ``overwrite``."""
    if str(out) == "":
        raise UserInputError("--out must be the file to write, e.g. --out policy.ckpt; got ''")
    target = Path(out).expanduser()
    if target.is_dir() or str(out).endswith(("/", os.sep)):  # `newdir/`: a folder meant, even one not made yet
        raise UserInputError(f"--out {out} is a folder; give the file to write, e.g. --out {target / 'policy.ckpt'}")
    folder = target.parent
    if not folder.is_dir():
        problem = "is a file, not a folder" if folder.exists() else "does not exist"
        raise UserInputError(f"--out {out}: the folder {folder} {problem}; --out must be a file in an existing "
                             "folder (create the folder first)")
    _check_writable(folder, out)
    if not (target.exists() or target.is_symlink()):
        return
    if target.exists() and Path(src).exists() and os.path.samefile(src, target):
        raise UserInputError(f"--out {out} is the checkpoint being exported (--ckpt_path {src}); "
                             "write the export to another file")
    from td3_lightning.checkpointing import is_training_checkpoint

    if target.is_file() and is_training_checkpoint(target):
        raise UserInputError(f"--out {out} is a resumable training checkpoint (it holds optimizer and loop state), "
                             "which export never replaces, even with --overwrite; choose another --out, or delete "
                             "that file by hand if you no longer need it")
    if not overwrite:
        raise UserInputError(f"--out {out} exists; pass --overwrite to replace it, or choose another --out")


def _check_writable(folder: Path, out: str | Path) -> None:
    """One line unless a file can be written in ``folder`` (read-only, a pseudo file system)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserInputError(f"--out {out}: cannot write in the folder {folder}; choose a folder you can write to")


class _ExportParser(OneLineParser):
    def unknown_option_hint(self, token: str) -> str:
        if token.startswith(("--data.", "--model.", "--trainer.")):
            return (" (export reads the networks and the env's shapes from the checkpoint: no config options; "
                    "--config only chooses the run, and a run trained with options of its own is chosen by its "
                    "lightning_logs/version_N/config.yaml)")
        return ""


#: the file suffix of each format
SUFFIX = {"slim": ".ckpt", "torchscript": ".pt", "onnx": ".onnx"}


def check_format(out: str, fmt: str | None) -> str:
    """``fmt``, or when not given the format ``out``'s suffix names (``.onnx``, ``.ckpt``), else slim for a name
    without a suffix; one line when the suffix names another format (TorchScript in ``actor.onnx``, an ONNX graph in
    ``actor.pt``, an actor in ``policy.ckpt``) or, for a ``.pt`` file or one whose suffix names no format
    (``actor.txt``), none was given (torch.save and torch.jit files both use ``.pt``)."""
    suffix = Path(out).suffix.lower()
    if fmt is None and suffix in (".pt", ".pth"):
        raise UserInputError(f"--out {out}: say what to write: --format torchscript (the actor, for torch.jit.load) "
                             "or --format slim (a checkpoint for test and TD3.load_from_checkpoint)")
    folder = Path(out).expanduser().is_dir() or str(out).endswith(("/", os.sep))  # check_out refuses it
    if fmt is None and suffix not in ("", ".onnx", ".ckpt") and not folder:
        stem = Path(out).stem
        raise UserInputError(f"--out {out}: the suffix {Path(out).suffix} names no format; name it {stem}.ckpt (a slim "
                             f"checkpoint), {stem}.onnx (ONNX) or {stem}.pt with --format torchscript, or give "
                             "--format slim or --format torchscript to keep the name")
    wanted = {".onnx": "onnx", ".ckpt": "slim"}.get(suffix)
    fmt = fmt or wanted or "slim"
    if (wanted is not None and wanted != fmt) or (fmt == "onnx" and suffix != ".onnx"):
        hint = f"add --format {wanted}, or " if wanted else ""
        raise UserInputError(f"--out {out} does not name {'an' if fmt[0] in 'aeiou' else 'a'} {fmt} file "
                             f"(--format {fmt}): {hint}name it "
                             f"{Path(out).stem}{SUFFIX[fmt]}")
    return fmt


def run_config(path: str) -> dict[str, Any]:
    """The sections of a config file (``path``, or a bundled config's name) that tell where its runs are and which
    they are (``trainer``, ``checkpoint``, ``data``, ``model``), each a mapping; one line for a file it cannot be."""
    import yaml

    from td3_lightning.user_input import resolve_config_args

    resolved = resolve_config_args(["--config", path])[1]  # a file or bundled name that is no config: one line
    if not os.path.isfile(resolved):
        raise UserInputError(f"--config {path}: export reads a config file; give a YAML file or a bundled config's "
                             "name")
    with open(resolved, encoding="utf-8") as stream:
        content = yaml.safe_load(stream)
    sections = {}
    for name in ("trainer", "checkpoint", "data", "model"):
        section = content.get(name)
        if isinstance(section, str) and os.path.isfile(file := Path(resolved).parent / section):  # its own file
            try:
                section = yaml.safe_load(file.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, yaml.YAMLError) as err:
                problem = yaml_problem(err) if isinstance(err, yaml.YAMLError) else "not a text file"
                raise UserInputError(f"--config {path}: the file of its {name} section, {file}, is not valid YAML "
                                     f"({problem}); fix it") from None
        sections[name] = dict(section) if isinstance(section, dict) else {}
    sections["model"] = sections["model"].get("init_args", sections["model"])  # class_path / init_args form
    return sections


def _options_of_the_run(model: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model options a config sets away from their defaults and at them, which tell its runs from others of its
    env."""
    from td3_lightning.checkpointing import options_of_the_run
    from td3_lightning.declarations import signature_defaults
    from td3_lightning.module import TD3

    return options_of_the_run(model or {}, signature_defaults(TD3))


YAML_NULLS = ("null", "Null", "NULL", "~")  # what test reads as --ckpt_path null


def _parser() -> OneLineParser:
    parser = _ExportParser(prog=f"{PROG} export", description=plain_text(__doc__), allow_abbrev=False,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt_path", default="best", metavar="CKPT",
                        help="the checkpoint to export from: best (default; also null) or last, the newest run's under "
                        "./lightning_logs, or a .ckpt file that td3_lightning wrote")
    parser.add_argument("--config", metavar="FILE",
                        help="with best or last: take the run of this config (a YAML file or a bundled config's "
                        "name: its env, env_kwargs, model options and folders), as test does")
    parser.add_argument("--out", required=True, metavar="OUT",
                        help="the file to write, in an existing folder; an existing one only with --overwrite, "
                        "never a resumable training checkpoint")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --out if it exists (never the checkpoint being exported, never a training "
                        "checkpoint)")
    parser.add_argument("--format", choices=list(FORMATS), default=None,
                        help="what to write: slim, torchscript or onnx (default: onnx for a .onnx file, slim for a "
                        ".ckpt file or a name without a suffix; given for any other name, e.g. a .pt file)")
    return parser


def main(args: list[str] | None = None) -> None:
    """``python -m td3_lightning export``: bad input is one ``error:`` line, exit status 2, nothing written."""
    try:
        ns = _parser().parse_args(args)
        fmt = check_format(ns.out, ns.format)
        if ns.ckpt_path in YAML_NULLS:  # null, as test reads it: the default
            ns.ckpt_path = "best"
        if ns.ckpt_path not in ("best", "last"):
            ns.ckpt_path = shipped_path(ns.ckpt_path)  # a shipped driver's path works from any folder
            check_checkpoint_file(ns.ckpt_path)  # before torch is imported
        from td3_lightning.checkpointing import check_checkpoint, find_run_checkpoint

        ckpt = ns.ckpt_path
        config = run_config(ns.config) if ns.config is not None else {}
        if ckpt in ("best", "last"):
            away = _options_of_the_run(config.get("model"))[0] if ns.config is not None else {}
            ckpt = find_run_checkpoint(config, ckpt, run_options=False, model_options=away)  # no --model.*: test's
        elif ns.config is not None:
            raise UserInputError(f"--config chooses the run that --ckpt_path best or last takes; with the file "
                                 f"{ckpt}, leave --config out")
        check_checkpoint(ckpt)
        check_out(ckpt, ns.out, ns.overwrite)
        if ns.ckpt_path in ("best", "last"):  # said once the input passed every check
            print(f"checkpoint: {ckpt} (--ckpt_path {ns.ckpt_path})")
        out = Path(export(ckpt, Path(ns.out).expanduser(), fmt))
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:  # writing failed after the checks (a full disk); the atomic write left nothing there
        print(f"error: --out {ns.out}: could not be written ({err.strerror or err}); free space or choose another "
              "--out", file=sys.stderr)
        sys.exit(2)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
