"""The subcommands of ``python -m td3_lightning``, and the listing that introduces them.

Kept free of Lightning imports: the listing and the unknown-subcommand error need none.
"""

from __future__ import annotations

import argparse
import re
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
               "export --ckpt_path last --out actor.onnx --format onnx"),
    "tune": ("search hyperparameters with Optuna, each trial a short fit (needs td3_lightning[tune])",
             "tune --config pendulum.yaml --n_trials 20 --trainer.max_steps 5000"),
}

#: the subcommands that LightningCLI runs (the Trainer's methods)
TRAINER_SUBCOMMANDS = ("fit", "validate", "test")


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
                return f"unknown option {token}{did_you_mean(token, self._options())}"
            return f"unexpected argument {token!r}: a value follows the option it belongs to, e.g. --out policy.ckpt"
        return message

    def actions(self) -> list[argparse.Action]:
        """Every option of this parser but ``--help`` (for tests that walk them)."""
        return [a for a in self._actions if a.option_strings and a.dest != "help"]

    def _options(self) -> list[str]:
        return [o for action in self.actions() for o in action.option_strings if o.startswith("--")]

    def _help(self, name: str) -> str:
        action = next((a for a in self.actions() if name in a.option_strings), None)
        return (action.help or "") if action is not None else ""
