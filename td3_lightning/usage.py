"""The first screen of ``fit|validate|test --help``: the project's options, one line each.

LightningCLI's own help lists every Trainer option before the model's (about 900 lines);
``--help full`` still prints it. The short help is built from the same parser by
:func:`build_short_help` and kept as text in :mod:`td3_lightning._usage_text`, so that ``--help``
prints it without importing torch or Lightning (:func:`td3_lightning.commands.answer_early`).
``tests/test_usage.py`` checks that the text is current; ``python -m td3_lightning.usage`` rewrites it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from td3_lightning.commands import PROG, SUBCOMMANDS, TRAINER_SUBCOMMANDS

LINKED = "linked from"  # the help of options the command line sets from the env (not shown)

#: The Trainer and ModelCheckpoint options a user of this project reaches for, in this project's words
#: (Lightning's own descriptions run to a paragraph each).
LIGHTNING_LINES: dict[str, str] = {
    "--trainer.max_steps": "training steps, one per env step after the warm-up (>= 1; -1: no limit).",
    "--trainer.val_check_interval": "validate every N training steps (>= 1).",
    "--trainer.max_time": "stop after this wall time too, e.g. 00:02:00:00 (DD:HH:MM:SS).",
    "--trainer.accelerator": "cpu, gpu or auto.",
    "--trainer.devices": "devices to run on; several run DDP, each rank with its own envs and buffer.",
    "--trainer.precision": "32-true (the default), bf16-mixed or 16-mixed (run as bf16-mixed on a CPU).",
    "--trainer.default_root_dir": "the folder that holds lightning_logs/version_N/ (default: the current folder).",
    "--trainer.log_every_n_steps": "TensorBoard scalars every N training steps (>= 0; 0: none).",
    "--trainer.enable_model_summary": "print the networks' summary when training starts.",
    "--checkpoint.every_n_train_steps": "also checkpoint every N training steps, not only at validations "
                                        "(>= 0; 0 = off).",
    "--checkpoint.save_top_k": "how many best checkpoints by val/return to keep (>= -1; -1 = all).",
}

#: The options of every Trainer subcommand that are not the classes' arguments.
GENERAL_LINES: dict[str, str] = {
    "--config": "a YAML file or a bundled config's name (pendulum.yaml, car.yaml, ...).",
    "--seed_everything": "seed of every random stream (an integer; true = a random one).",
    "--print_config": "print the resolved configuration (with --ckpt_path, the checkpoint's model options) and exit.",
}

#: ``--ckpt_path`` as each subcommand reads it
CKPT_PATH: dict[str, str] = {
    "fit": "resume: last (the newest last.ckpt of the runs in lightning_logs/ most like this command: env, "
           "env_kwargs, --model.*), best, or a file.",
    "validate": "the policy to play: best (default: the newest run's best or selected checkpoint), last, "
                "or a checkpoint file.",
    "test": "the policy to play: best (default: the newest run's best or selected checkpoint), last, "
            "or a checkpoint file.",
}

#: what validate and test read besides the checkpoint, whose model options they play
PLAYING_OPTIONS = ("--data.env_id", "--data.env_kwargs", "--data.eval_episodes", "--data.eval_seed",
                   "--data.test_episodes", "--data.test_seed", "--data.record_val", "--data.record_test",
                   "--data.video_format", "--data.frame_stack", "--data.privileged_critic", "--trainer.accelerator",
                   "--trainer.devices", "--trainer.precision", "--trainer.default_root_dir")
PLAYING_MODEL = ("given, they choose the run that best and last take; read from the checkpoint, which is played as "
                 "it was trained (but compile_mode and flush_denormal; fit --help lists them).")

#: option groups shown in full, with their headings
GROUPS: dict[str, str] = {
    "--model.": "TD3 (--model.*; docs/options.md has the why of each)",
    "--data.": "environments, replay buffer and evaluation (--data.*; docs/options.md)",
    "--selection.": "choosing best among the kept checkpoints when fit ends (--selection.*)",
    "--progress_bar.": "the progress line (--progress_bar.*)",
    "--learning_curve.": "the learning-curve plot (--learning_curve.*)",
}


def _default_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _one_line(text: str) -> str:
    return " ".join((text or "").split())


def build_short_help(subcommand: str) -> str:
    """The first screen of ``<subcommand> --help``, from the live parser: every option of the project's
    groups with its help and default, then the Trainer and checkpoint options of :data:`LIGHTNING_LINES`."""
    options, defaults = _parser_options()
    lines: list[tuple[str, str]] = [("--ckpt_path", CKPT_PATH[subcommand])]
    lines += [(name, text) for name, text in GENERAL_LINES.items()]
    sections: list[tuple[str, list[tuple[str, str]]]] = [("options", lines)]
    playing = subcommand != "fit"  # validate, test: a checkpoint played, nothing trained
    if playing:
        sections.append(("the model", [("--model.*", PLAYING_MODEL)]))
    for prefix, heading in GROUPS.items():
        group = [(name, f"{_one_line(help_text)} (default: {_default_text(defaults.get(name[2:]))})")
                 for name, help_text in options.items()
                 if name.startswith(prefix) and not name.endswith("+") and LINKED not in help_text
                 and (not playing or name in PLAYING_OPTIONS)]
        if group:
            sections.append((heading, group))
    lightning = [(name, text if defaults.get(name[2:]) is None
                  else f"{text} (default: {_default_text(defaults.get(name[2:]))})")
                 for name, text in LIGHTNING_LINES.items() if not playing or name in PLAYING_OPTIONS]
    sections.append(("Lightning's Trainer and ModelCheckpoint, the options used most", lightning))
    width = max(len(name) for _, group in sections for name, _ in group)
    out = [f"usage: {PROG} {subcommand} [--config <yaml>] [--ckpt_path <ckpt>] [--<group>.<option> <value> ...]",
           "", f"{SUBCOMMANDS[subcommand][0][0].upper()}{SUBCOMMANDS[subcommand][0][1:]}.",
           f"Every option can be set in the config file and overridden here. `{PROG} {subcommand} --help full`",
           f"lists all {len(options)} options, Lightning's Trainer and ModelCheckpoint included."]
    for heading, group in sections:
        out += ["", f"{heading}:"] + [f"  {name:<{width}}  {text}" for name, text in group]
    return "\n".join(out) + "\n"


def _parser_options() -> tuple[dict[str, str], Any]:
    """Every ``--option`` of the command line -> its help text, and the parser's defaults (the
    Trainer subcommands share them: only ``--ckpt_path`` differs, which :data:`CKPT_PATH` describes)."""
    from td3_lightning import _lightning
    from td3_lightning.cli import parser_only_cli

    cli = parser_only_cli()
    options = {name: help_text for name, (_, help_text) in _lightning.cli_option_types(cli, []).items()}
    return options, cli.parser.get_defaults()


def write_help_text(path: Path | None = None) -> Path:
    """Rewrite :mod:`td3_lightning._usage_text` from the live parser."""
    path = path or Path(__file__).with_name("_usage_text.py")
    texts = {sub: build_short_help(sub) for sub in TRAINER_SUBCOMMANDS}
    body = "\n".join(f"    {sub!r}: {text!r}," for sub, text in texts.items())
    path.write_text(f'"""Generated by ``python -m td3_lightning.usage`` from the parser; do not edit."""\n\n'
                    f"HELP = {{\n{body}\n}}\n")
    return path


#: the markers around the generated options table in docs/options.md
TABLE_START, TABLE_END = "<!-- options table: written by python -m td3_lightning.usage -->", "<!-- end of table -->"


def declared_groups() -> dict[str, type]:
    """The option groups whose options a class declares (:mod:`td3_lightning.declarations`), by group name."""
    from td3_lightning.callbacks import RLProgressBar
    from td3_lightning.data import ReplayDataModule
    from td3_lightning.module import TD3
    from td3_lightning.plots import LearningCurve
    from td3_lightning.selection import CheckpointSelection

    return {"model": TD3, "data": ReplayDataModule, "selection": CheckpointSelection, "progress_bar": RLProgressBar,
            "learning_curve": LearningCurve}


def options_table() -> str:
    """Every declared option of the model, the data, the checkpoint selection and the callbacks as a Markdown table
    (option, default, help), from the declarations (:mod:`td3_lightning.declarations`) that the checks read; then
    the Trainer and ModelCheckpoint options of :data:`LIGHTNING_LINES`, in this project's words."""
    from td3_lightning.declarations import options_of

    lines = [(f"{group}.{o.name}", o.default, o.help) for group, cls in declared_groups().items()
             for o in options_of(cls).values() if LINKED not in o.help]
    defaults = _parser_options()[1]  # the Trainer's and ModelCheckpoint's, as this project sets them
    lines += [(name[2:], defaults.get(name[2:]), text) for name, text in LIGHTNING_LINES.items()]
    rows = [f"| `{name}` | `{_default_text(default)}` | {text.replace('|', '&#124;')} |"
            for name, default, text in lines]
    return "\n".join([TABLE_START, "| option | default | what it is |", "|---|---|---|", *rows, TABLE_END])


def write_options_table(path: Path) -> Path:
    """Replace the table between :data:`TABLE_START` and :data:`TABLE_END` in ``path`` (docs/options.md)."""
    text = path.read_text()
    start, end = text.index(TABLE_START), text.index(TABLE_END) + len(TABLE_END)
    path.write_text(text[:start] + options_table() + text[end:])
    return path


if __name__ == "__main__":
    print(f"wrote {write_help_text()}", file=sys.stderr)
    docs = Path(__file__).parents[1] / "docs" / "options.md"
    if docs.is_file():  # a checkout, not an installed package
        print(f"wrote {write_options_table(docs)}", file=sys.stderr)
