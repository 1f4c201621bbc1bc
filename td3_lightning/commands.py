"""The subcommands of ``python -m td3_lightning``, and the listing that introduces them.

Kept free of torch and Lightning imports: the listing, the unknown-subcommand error and `<subcommand> --help`
need none (:func:`answer_early`).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from typing import NoReturn

from td3_lightning.errors import UserInputError, did_you_mean

PROG = "python -m td3_lightning"

#: subcommand -> (what it does, an example)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "fit": ("train an agent, with periodic validation and checkpoints",
            "fit --config pendulum.yaml --trainer.max_steps 20000"),
    "validate": ("play the validation episodes with a checkpoint's policy",
                 "validate --config pendulum.yaml --ckpt_path last"),
    "test": ("play the test episodes with a checkpoint's policy and write test_results.json",
             "test --config pendulum.yaml --ckpt_path last --data.test_episodes 100"),
    "export": ("write a checkpoint's policy as a slim checkpoint, TorchScript or ONNX",
               "export --ckpt_path last --out actor.onnx"),
    "tune": ("search hyperparameters with Optuna, each trial a short fit (needs the tune extra)",
             "tune --config pendulum.yaml --n_trials 20 --trainer.max_steps 5000"),
}

#: the subcommands that LightningCLI runs (the Trainer's methods)
TRAINER_SUBCOMMANDS = ("fit", "validate", "test")

FULL = "full"  # `fit --help full`: LightningCLI's help, every option


def plain_text(doc: str) -> str:
    """A docstring as ``--help`` shows it: ``code`` as `code`, :class:`~pkg.Name` as Name."""
    doc = re.sub(r":\w+:`~?(?:[\w.]*\.)?(\w+)`", r"\1", doc)
    return re.sub(r"``(.+?)``", r"`\1`", doc, flags=re.DOTALL)


def listing() -> str:
    """Every subcommand with one line of what it does and an example."""
    width = max(map(len, SUBCOMMANDS))
    lines = [
        f"usage: {PROG} <subcommand> [--config <yaml>] [options]",
        "",
        "TD3 reinforcement learning as a PyTorch Lightning trainer.",
        "",
        "subcommands:",
    ]
    for name, (what, example) in SUBCOMMANDS.items():
        lines.append(f"  {name:<{width}}  {what}")
        lines.append(f"  {'':<{width}}    e.g. {PROG} {example}")
    lines += [
        "",
        f"`{PROG} <subcommand> --help` lists the options of a subcommand. --config takes a YAML file",
        "or the name of a bundled config (pendulum.yaml, lunar.yaml, bipedal.yaml, car.yaml, ...); every",
        "option of the config can be overridden on the command line, e.g. --model.actor_lr 1e-3.",
    ]
    return "\n".join(lines)


def unknown_subcommand(name: str) -> str:
    """The one-line error for a first argument that names no subcommand."""
    hint = did_you_mean(name, list(SUBCOMMANDS), cutoff=0.6)
    return (f"unknown subcommand '{name}'{hint}; the subcommands are {', '.join(SUBCOMMANDS)} "
            f"({PROG} --help describes them)")


def no_subcommand() -> str:
    return f"no subcommand given; start with one of {', '.join(SUBCOMMANDS)}, e.g. {PROG} fit --config pendulum.yaml"


def answer_early(argv: list[str]) -> list[str]:
    """What needs no parser, answered before torch and Lightning are imported: the listing of the
    subcommands (no argument, ``--help``), an unknown subcommand, and ``<subcommand> --help``. Exits
    after answering; otherwise returns the arguments to run (``--help full`` as LightningCLI's ``--help``)."""
    if not argv or argv[0] in ("-h", "--help"):
        print(listing(), file=sys.stdout if argv else sys.stderr)
        if not argv:
            print(f"error: {no_subcommand()}", file=sys.stderr)
        sys.exit(0 if argv else 2)
    if not argv[0].startswith("-") and argv[0] not in SUBCOMMANDS:
        print(f"error: {unknown_subcommand(argv[0])}", file=sys.stderr)
        sys.exit(2)
    if argv[0] not in TRAINER_SUBCOMMANDS:
        return argv
    which = requested(argv[1:])
    if which == "short":
        print(short_help(argv[0]), end="")
        if any(a == "--config" or a.startswith("--config=") for a in argv[1:]):  # its values are not shown above
            values = shlex.join(["python", "-m", "td3_lightning", *(a for a in argv if a not in ("-h", "--help")),
                                 "--print_config"])
            print(f"note: the defaults above are the package's; the values this command runs with: {values}",
                  file=sys.stderr)
        sys.exit(0)
    return [argv[0], *without_full(argv[1:])] if which == "full" else argv


def requested(argv: list[str]) -> str | None:
    """``"short"``, ``"full"`` or None: which help the arguments of a Trainer subcommand ask for."""
    if not ({"-h", "--help"} & set(argv)):
        return None
    return "full" if FULL in argv else "short"


def without_full(argv: list[str]) -> list[str]:
    """``argv`` for LightningCLI's own help: the ``full`` after ``--help`` removed."""
    return [a for i, a in enumerate(argv) if not (a == FULL and i > 0 and argv[i - 1] in ("-h", "--help"))]


def short_help(subcommand: str) -> str:
    """The stored first screen of ``<subcommand> --help`` (no torch or Lightning import)."""
    from td3_lightning._usage_text import HELP  # generated by td3_lightning.usage

    return HELP[subcommand]


class OneLineParser(argparse.ArgumentParser):
    """The argparse parser of a subcommand of its own (``export``, ``tune``): a parse error is raised as one line
    (:class:`UserInputError`) that names the option and what it takes, instead of the usage and exit."""

    def error(self, message: str) -> NoReturn:
        raise UserInputError(f"{self.one_line(message)}; {self.prog} --help lists the options")

    def one_line(self, message: str) -> str:
        """argparse's ``message`` said with the option first and what it takes."""
        option = re.match(r"argument (?:\S+/)?(\S+?): (.*)", message)
        if option:
            name, problem = option.groups()
            choice = re.match(r"invalid choice: (.*) \(choose from (.*)\)", problem)
            if choice:
                return f"{name} must be one of {choice.group(2).replace(chr(39), '')}, got {choice.group(1)}"
            typed = re.match(r"invalid (\w+) value: (.*)", problem)
            if typed:
                kind = typed.group(1)
                return f"{name} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {typed.group(2)}"
            explicit = re.match(r"ignored explicit argument (.*)", problem)
            if explicit:
                return f"{name} takes no value (it is a switch), got {explicit.group(1)}"
            return f"{name}: {problem} ({self._help(name)})"
        required = re.match(r"the following arguments are required: (.*)", message)
        if required:
            name = required.group(1).split(",")[0].split("/")[-1].strip()
            return f"{name} is required: {self._help(name)}"
        unknown = re.match(r"unrecognized arguments: (\S+)", message)
        if unknown:
            token = unknown.group(1).split("=", 1)[0]
            if token.startswith("-"):
                close = did_you_mean(token, self._options())
                return f"unknown option {token}{close or self.unknown_option_hint(token)}"
            return f"unexpected argument {token!r}: a value follows the option it belongs to, e.g. --out policy.ckpt"
        return message

    def unknown_option_hint(self, token: str) -> str:
        """What to say after ``unknown option <token>`` when no option is close (a subclass says why)."""
        return ""

    def actions(self) -> list[argparse.Action]:
        """Every option of this parser but ``--help`` (for tests that walk them)."""
        return [a for a in self._actions if a.option_strings and a.dest != "help"]

    def _options(self) -> list[str]:
        return [o for action in self.actions() for o in action.option_strings if o.startswith("--")]

    def _help(self, name: str) -> str:
        action = next((a for a in self.actions() if name in a.option_strings), None)
        return (action.help or "") if action is not None else ""
