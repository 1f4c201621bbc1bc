"""The subcommands of ``python -m td3_lightning``, and the listing that introduces them.

Kept free of Lightning imports: the listing and the unknown-subcommand error need none.
"""

from __future__ import annotations

from td3_lightning.errors import did_you_mean

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
