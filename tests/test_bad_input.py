"""Every option of every subcommand given a wrong value: one ``error:`` line that names the option and what it
takes, exit status 2, no traceback, nothing written and every file there before byte-identical.

The cases are generated from the parsers. ``fit``, ``validate`` and ``test``: every ``--model.*``, ``--data.*``,
``--progress_bar.*`` and ``--learning_curve.*`` option of the subcommand's parser gets a value of the wrong type,
and every option with a range gets values below it (zero where zero is out of range, a negative number) and above
it; an option's range is read from its help text (its one-line docstring, e.g. ``(>= 1)``, ``(> 0)``, ``in [0, 1]``)
by :func:`td3_lightning.declarations.parse_range`, the same reading the checks are made of. ``--ckpt_path`` and
``--config`` get files of the wrong kind. ``fit`` also walks every ``--checkpoint.*`` option and the ``--trainer.*``
options this project counts in steps, that take paths, or that a user plausibly breaks (:data:`TRAINER_CASES`).
``export`` and ``tune``: every option of their own parsers, by its type, its choices, the range in its help and its
metavar (``CKPT`` a checkpoint to read, ``FILE`` a file to read, ``OUT`` a file to write, ``FOLDER`` a folder to
write into, ``URL``, ``NAME``); ``tune`` also gets a search space whose bounds leave the range of each ranged fit
option. New options without cases fail the completeness tests below.
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import types
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import tiny_checkpoint

from td3_lightning import _lightning
from td3_lightning.__main__ import main
from td3_lightning.cli import parser_only_cli
from td3_lightning.declarations import Range, parse_range
from td3_lightning.user_input import CONFIG_DIR

#: List options: the range each item must be in (their help names it in words, not as a bound).
RANGE_NOT_IN_HELP = {
    "model.hidden_dims": ">= 1",  # each size
    "model.critic_hidden_dims": ">= 1",  # each size
    "model.reset_steps": ">= 1",  # each step
}
#: Number options whose values are bound to each other, not to a range: their wrong values are in CHOICES.
RELATED_NOT_RANGED = {"model.critic_range": "[low, high], low < high"}
#: Options that take text: values they refuse (from a fixed set, a file name of the wrong form, an unknown env).
CHOICES = {
    "model.encoder": ["bogus"], "model.compile_mode": ["bogus"], "data.vector_mode": ["bogus"],
    "data.video_format": ["avi"], "data.buffer_device": ["bogus"], "data.sampler": ["bogus"],
    "model.actor_q": ["max"], "model.critic_range": ["[1.0, 0.0]", "[1.0]", "[0.0, nan]"],
    "data.env_id": ["NoSuchEnv-v9", "CarRacing-v3"], "learning_curve.filename": ["sub/curve.png", "curve.txt",
                                                                                         "c" * 250 + ".png"],
}
#: The Trainer options this project counts in training steps, that take a path, or that a user plausibly
#: breaks, and ``seed_everything``, with values they refuse.
TRAINER_CASES = {
    "trainer.max_steps": ["-5", "0", "abc", "1.5"],
    "trainer.min_steps": ["-1", "abc"],
    "trainer.val_check_interval": ["0", "-3", "0.5", "abc"],
    "trainer.log_every_n_steps": ["-1", "abc"],
    "trainer.num_sanity_val_steps": ["-5", "abc"],
    "trainer.max_epochs": ["0", "-5", "1"],  # an endless epoch: 1 trained forever without a word
    "trainer.check_val_every_n_epoch": ["0"],
    "trainer.max_time": ["abc", "00:00:00:00", "{secs: 4}", "{hours: -1}"],
    "trainer.devices": ["0", "-2", "abc"],
    "trainer.num_nodes": ["0"],
    "trainer.accelerator": ["bogus"],
    "trainer.strategy": ["bogus"],
    "trainer.precision": ["bogus", "64-true", "16-true", "bf16-true"],  # a float32 replay: a dtype traceback
    "trainer.limit_train_batches": ["-1", "10", "0.5"],
    "trainer.overfit_batches": ["10"],
    "trainer.limit_val_batches": ["-1"],
    "trainer.limit_test_batches": ["-1"],
    "trainer.accumulate_grad_batches": ["0", "2"],
    "trainer.gradient_clip_val": ["1.0"],
    "trainer.fast_dev_run": ["-1"],
    "trainer.profiler": ["bogus"],
    "trainer.logger": ["bogus"],
    "trainer.default_root_dir": "FOLDER",
    "seed_everything": ["-1", "4294967296", "abc"],
}
#: Values only fit refuses: what only training builds (validate and test make no replay buffer).
FIT_ONLY_CASES = {"data.buffer_device": ["cuda:99"], "model.teacher": ["missing.ckpt"],
                  "data.buffer_size": ["1000000000000"],  # more memory than the machine has
                  "trainer.logger": ["{class_path: TensorBoardLogger, init_args: {save_dir: /proc}}"]}
#: Values only validate or test refuses: no episode to play (fit may leave validation out this way).
STAGE_CASES = {"validate": {"trainer.limit_val_batches": ["0", "0.0"]},
               "test": {"trainer.limit_test_batches": ["0", "0.0"]}}
#: ``--checkpoint.*`` options: values they refuse, besides a wrong type (``abc`` for a number or a switch).
CHECKPOINT_CASES = {
    "checkpoint.every_n_train_steps": ["-1"],
    "checkpoint.save_top_k": ["-5"],
    "checkpoint.monitor": ["val/bogus"],
    "checkpoint.mode": ["bogus"],
    "checkpoint.every_n_epochs": ["-1"],
    "checkpoint.train_time_interval": ["abc"],
    "checkpoint.save_last": ["bogus"],
    "checkpoint.dirpath": "FOLDER",
    "checkpoint.filename": ["c" * 240 + "-{step}"],  # 247 bytes or more with .ckpt: no temporary file beside it
}
#: Options that take any value of their type: nothing to refuse.
ANY_VALUE: dict[str, str] = {}
#: Options that validate and test take with any value: what only training reads (said as unused)
PLAYED_ANY_VALUE = {"model.teacher": "read when fitting starts; a played policy needs no teacher"}
#: What each kind of path (an argparse metavar, or :data:`PATH_OPTIONS`) is given, in the work folder of
#: :func:`work_folder`: missing, a folder, a file of another kind, an empty one, below a file, empty text.
PATH_VALUES = {
    "CKPT": ["missing.ckpt", "folder", "notes.txt", "pendulum.yaml", "empty.ckpt", "", "hpc", "file://missing.ckpt"],
    "FILE": ["missing.yaml", "pendulum.yml", "folder", "run.ckpt", "empty.yaml", "bad.yaml", "notes.txt"],
    "OUT": ["nofolder/out.ckpt", "notes.txt/out.ckpt", "folder", "notes.txt", "run.ckpt", ""],
    "FOLDER": ["notes.txt", "notes.txt/sub", "", "/proc/nope/run", "/proc"],  # /proc: exists, cannot be written
    "URL": ["bogus://x", "sqlite:///nofolder/x.db", "sqlite:///notes.txt", ""],
    "NAME": [""],
}
#: Options of ``export``'s and ``tune``'s own parsers: values they refuse besides those of their metavar's kind.
OWN_CASES = {("export", "--out"): ["actor.txt"]}  # a suffix that names no format, without --format
#: The path options of fit, validate and test, by kind.
PATH_OPTIONS = {"ckpt_path": "CKPT", "config": "FILE"}
#: What a line that says what an option takes contains.
ACCEPTS = re.compile(r"expected|must|at least|>=|> 0|in \[|in \(|one of|takes|pass |give |choose|set |use |"
                     r"available|can be|should be|has to be|is required|another |e\.g\.", re.I)

#: how an error line names an option whose name it does not repeat as it is
NAMED_AS = {"config": r"config file|--config", "--config": r"config file|--config", "--space": r"space (file|entry)",
            "ckpt_path": r"--ckpt_path"}

#: the option groups of the project walked for fit, validate and test
WALKED = ("--model.", "--data.", "--selection.", "--progress_bar.", "--learning_curve.")
#: the arguments every case of a subcommand starts with (its own option replaces one of these)
BASE = {
    "fit": ["--config", "pendulum.yaml"],
    "validate": ["--config", "pendulum.yaml", "--ckpt_path", "run.ckpt"],
    "test": ["--config", "pendulum.yaml", "--ckpt_path", "run.ckpt"],
    "export": ["--ckpt_path", "run.ckpt", "--out", "new.ckpt"],
    "tune": ["--config", "pendulum.yaml", "--n_trials", "1"],
}
OMIT = None  # a required option left out


# ------------------------------------------------------------------------------ the options, read from the parsers
def subcommand_options(subcommand: str) -> dict[str, tuple[Any, str]]:
    """``name`` (without dashes) -> (type hint, help) of every option of ``subcommand``'s parser."""
    cli = parser_only_cli(subcommand)
    options = _lightning.cli_option_types(cli, [subcommand])
    return {o[2:]: th for o, th in options.items() if not o.endswith(("+", ".help"))}


def own_options(subcommand: str) -> list[argparse.Action]:
    """The options of ``export``'s or ``tune``'s own parser."""
    from td3_lightning import export, tune

    return {"export": export, "tune": tune}[subcommand]._parser().actions()


def _number_type(hint: Any) -> tuple[type | None, bool]:
    """``int`` or ``float`` for a (possibly optional, possibly list-of) number option, and whether it is a list."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        hint = args[0]
    if typing.get_origin(hint) is list and typing.get_args(hint)[0] in (int, float):
        return typing.get_args(hint)[0], True
    return (hint, False) if hint in (int, float) else (None, False)


def _is_bool(hint: Any) -> bool:
    return hint is bool or (typing.get_origin(hint) in (typing.Union, types.UnionType)
                            and {a for a in typing.get_args(hint)} == {bool, type(None)})


def _is_mapping(hint: Any) -> bool:
    return any(typing.get_origin(a) is dict for a in (hint, *typing.get_args(hint)))


def declared_range(name: str, help_text: str) -> Range | None:
    """The range the help text declares (:func:`td3_lightning.declarations.parse_range`, what the checks read), or
    :data:`RANGE_NOT_IN_HELP`'s."""
    if re.match(r"must be 0\b", help_text):
        return Range(0.0, True, 0.0, True)
    return parse_range(f"({RANGE_NOT_IN_HELP[name]})" if name in RANGE_NOT_IN_HELP else help_text)[0]


def _fmt(value: float, kind: type) -> str:
    return str(int(value)) if kind is int else repr(float(value))


def out_of_range(bounds: Range, kind: type) -> list[float]:
    """The nearest value below the range, zero and a negative number where they are out of it, one above it."""
    low, high = bounds.low, bounds.high
    values = []
    if low is not None:
        values += [low - 1 if kind is int or bounds.low_in else low, 0, -1]
    if high is not None:
        values.append(high + 1)
    return sorted({v for v in values if v not in bounds})


def inside(bounds: Range) -> float:
    """A value inside the range."""
    low, low_in, high, high_in = bounds.low, bounds.low_in, bounds.high, bounds.high_in
    if low is not None and low_in:
        return low
    if high is not None and high_in:
        return high
    if low is not None and high is not None:
        return (low + high) / 2
    return (low or 0) + 1


def typed_cases(name: str, hint: Any, help_text: str) -> list[str]:
    """Wrong values for a typed option: the wrong type, and values out of the range its help declares."""
    kind, is_list = _number_type(hint)
    cases = []
    if _is_bool(hint) or kind is not None:
        cases.append("abc")
    if kind is int and not is_list:
        cases.append("1.5")
    if _is_mapping(hint):
        cases += ["abc", "{bogus: 1}", "{bogus: 1"]  # not a mapping; an argument the env does not take; no }
    cases += CHOICES.get(name, [])
    if kind is None:
        return cases
    bounds = declared_range(name, help_text)
    if bounds is None:
        return cases  # test_every_numeric_option_declares_its_range names it
    for value in out_of_range(bounds, kind):
        cases.append(f"[{_fmt(value, kind)}]" if is_list else _fmt(value, kind))
    if kind is float:
        cases.append("nan")
    return cases


def _table(table: dict[str, Any]) -> list[tuple[str, str]]:
    return [(name, v) for name, values in table.items() for v in (PATH_VALUES[values] if isinstance(values, str)
                                                                    else values)]


def trainer_subcommand_cases(subcommand: str) -> list[tuple[str, str, Any]]:
    options = subcommand_options(subcommand)
    cases = [(name, v) for name, (hint, help_text) in sorted(options.items())
             if f"--{name}".startswith(WALKED) and hint is not None for v in typed_cases(name, hint, help_text)]
    cases += [(name, v) for name, kind in PATH_OPTIONS.items() for v in PATH_VALUES[kind]]
    if subcommand == "fit":
        cases += _table(TRAINER_CASES) + _table(FIT_ONLY_CASES)
        for name, (hint, _help) in sorted(options.items()):
            if name.startswith("checkpoint.") and (_is_bool(hint) or _number_type(hint)[0] is not None):
                cases.append((name, "abc"))
        cases += _table(CHECKPOINT_CASES)
    cases += _table(STAGE_CASES.get(subcommand, {}))
    return [(subcommand, name, value) for name, value in cases]


def own_parser_cases(subcommand: str) -> list[tuple[str, str, Any]]:
    cases: list[tuple[str, Any]] = []
    for action in own_options(subcommand):
        name = action.option_strings[-1]
        if action.required:
            cases.append((name, OMIT))
        if action.nargs == 0:  # a switch
            cases.append((name, "=yes"))
        if action.choices:
            cases.append((name, "bogus"))
        if action.type in (int, float):
            cases += [(name, "abc")] + ([(name, "1.5")] if action.type is int else [])
            bounds = declared_range(name, action.help or "")
            cases += [(name, _fmt(v, action.type)) for v in out_of_range(bounds, action.type)] if bounds else []
        cases += [(name, v) for v in PATH_VALUES.get(action.metavar, [])]
        cases += [(name, v) for v in OWN_CASES.get((subcommand, name), [])]
    return [(subcommand, name, value) for name, value in cases]


def space_cases() -> list[tuple[str, str, Any]]:
    """A search space for every ranged number option of fit, whose bounds leave the range (one bound inside)."""
    cases = []
    for name, (hint, help_text) in sorted(subcommand_options("fit").items()):
        kind, is_list = _number_type(hint)
        bounds = declared_range(name, help_text)
        if not f"--{name}".startswith(WALKED) or kind is None or is_list or bounds is None:
            continue
        within, outside = kind(inside(bounds)), [kind(v) for v in out_of_range(bounds, kind)]
        for value in {min(outside), max(outside)}:  # the space leaves the range below it, above it
            low, high = sorted((value, within))
            cases.append(("tune", "--space", {name: {"type": kind.__name__, "low": low, "high": high}}))
    return cases


CASES = [*trainer_subcommand_cases("fit"), *trainer_subcommand_cases("validate"), *trainer_subcommand_cases("test"),
         *own_parser_cases("export"), *own_parser_cases("tune"), *space_cases()]


def _id(case: tuple[str, str, Any]) -> str:
    subcommand, name, value = case
    if isinstance(value, dict):
        ((option, entry),) = value.items()
        return f"{subcommand}:space:{option}=[{entry['low']},{entry['high']}]"
    return f"{subcommand}:{name}" + ("(omitted)" if value is OMIT else value if value.startswith("=") else f"={value}")


def command(case: tuple[str, str, Any]) -> list[str]:
    """The arguments of ``case``: the subcommand's base arguments with the option's value replaced (or left out)."""
    subcommand, name, value = case
    option = name if name.startswith("-") else f"--{name}"
    base = list(BASE[subcommand])
    if option in base:
        i = base.index(option)
        del base[i:i + 2]
    if value is OMIT:
        return [subcommand, *base]
    if isinstance(value, dict):
        return [subcommand, *base, option, "space.yaml"]
    if value.startswith("="):
        return [subcommand, *base, option + value]
    return [subcommand, *base, option, value]


# ------------------------------------------------------------------------------ completeness
def test_every_numeric_option_declares_its_range():
    fit = subcommand_options("fit")
    unranged = [name for name, (hint, help_text) in fit.items() if f"--{name}".startswith(WALKED)
                and _number_type(hint)[0] is not None and declared_range(name, help_text) is None
                and name not in RELATED_NOT_RANGED]
    unranged += [a.option_strings[-1] for sub in ("export", "tune") for a in own_options(sub)
                 if a.type in (int, float) and declared_range("", a.help or "") is None]
    assert unranged == []  # name the range in the option's docstring or help, e.g. "(>= 1)", and check it


def test_every_option_gets_a_wrong_value():
    walked = {(sub, name) for sub, name, _ in CASES}
    missing = []
    for sub in ("fit", "validate", "test"):
        for name, (hint, _help) in subcommand_options(sub).items():
            ours = f"--{name}".startswith(WALKED) and hint is not None
            checkpoint = sub == "fit" and name.startswith("checkpoint.")
            steps_or_path = sub == "fit" and name.startswith("trainer.") and (
                re.search(r"steps|interval|_dir|path", name) or "Path" in str(hint))
            played_any = sub != "fit" and name in PLAYED_ANY_VALUE
            if (ours or checkpoint or steps_or_path) and (sub, name) not in walked and name not in ANY_VALUE \
                    and not played_any:
                missing.append(f"{sub} --{name}")
    for sub in ("export", "tune"):
        missing += [f"{sub} {a.option_strings[-1]}" for a in own_options(sub)
                    if (sub, a.option_strings[-1]) not in walked]
    assert missing == []  # add a wrong value of the option to this file's tables (or its metavar's kind)


def test_the_walk_covers_the_cases_of_the_issue():
    for case in [("trainer.max_steps", "-5"), ("trainer.max_steps", "0"), ("trainer.val_check_interval", "0"),
                 ("data.batch_size", "0"), ("data.buffer_size", "0"), ("data.warmup_steps", "-1"),
                 ("data.eval_episodes", "0"), ("data.num_envs", "0"), ("data.utd_ratio", "0.0"),
                 ("data.steps_per_batch", "0"), ("data.n_step", "0"), ("checkpoint.every_n_train_steps", "-1"),
                 ("trainer.log_every_n_steps", "-1"), ("model.gamma", "2.0"), ("model.actor_lr", "0.0"),
                 ("data.env_kwargs", "{bogus: 1}"), ("data.train_env_kwargs", "{bogus: 1}"),
                 ("data.buffer_size", "1000000000000"), ("trainer.default_root_dir", "/proc")]:
        assert ("fit", *case) in CASES, case
    for case in [("validate", "model.gamma", "2.0"), ("test", "data.test_episodes", "0"),
                 ("test", "ckpt_path", "notes.txt"), ("export", "--out", "run.ckpt"),
                 ("export", "--out", "nofolder/out.ckpt"), ("export", "--format", "bogus"),
                 ("export", "--out", "actor.txt"),
                 ("tune", "--n_trials", "0"), ("tune", "--n_trials", "abc"), ("tune", "--space", "bad.yaml"),
                 ("tune", "--space", {"model.gamma": {"type": "float", "low": -1.0, "high": 0.0}}),
                 ("tune", "--space", {"model.gamma": {"type": "float", "low": 0.0, "high": 2.0}}),
                 ("tune", "--space", {"model.actor_lr": {"type": "float", "low": -1.0, "high": 1.0}})]:
        assert case in CASES, case
    subcommands = {sub: len({name for s, name, _ in CASES if s == sub}) for sub in BASE}
    assert subcommands["fit"] > 90 and subcommands["validate"] > 60 and subcommands["export"] == 5, subcommands


# ------------------------------------------------------------------------------ the walk
@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A small Pendulum checkpoint: what validate, test and export are given."""
    return tiny_checkpoint(tmp_path_factory.mktemp("ckpt") / "run.ckpt")


@pytest.fixture
def work_folder(tmp_path, monkeypatch, checkpoint) -> Path:
    """The current folder: a config, a checkpoint and files of other kinds, that must stay byte-identical."""
    shutil.copy(CONFIG_DIR / "pendulum.yaml", tmp_path / "pendulum.yaml")
    shutil.copy(checkpoint, tmp_path / "run.ckpt")
    (tmp_path / "notes.txt").write_text("notes\n")
    (tmp_path / "empty.ckpt").write_bytes(b"")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "bad.yaml").write_text("model: {gamma: [0.9\n")
    (tmp_path / "folder").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _snapshot(folder: Path) -> dict[Path, bytes | None]:
    return {p: p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_a_wrong_value_is_one_line_and_writes_nothing(case, work_folder, capsys, monkeypatch):
    from td3_lightning import tune

    monkeypatch.setattr(tune, "run_study", lambda *a: pytest.fail("tune would run trials"))
    subcommand, name, value = case
    if isinstance(value, dict):
        (work_folder / "space.yaml").write_text(yaml.safe_dump(value))
    before = _snapshot(work_folder)
    with pytest.raises(SystemExit) as exit_info:
        main(command(case))
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    named = re.escape(next(iter(value))) if isinstance(value, dict) else NAMED_AS.get(name, re.escape(name))
    assert re.search(named, lines[0]) and ACCEPTS.search(lines[0]), lines[0]
    if isinstance(value, dict):  # the bound that leaves the range is named
        entry = next(iter(value.values()))
        assert re.search(rf"(low|high) {re.escape(repr(entry['low']))}|(low|high) {re.escape(repr(entry['high']))}",
                         lines[0]), lines[0]
    assert "Traceback" not in captured.out + captured.err
    assert _snapshot(work_folder) == before  # no new file or folder, none changed


# ------------------------------------------------------------------------------ the helpers of the walk
def test_the_walk_goes_below_and_above_each_declared_range():
    assert declared_range("x", "must be 0: the buffer lives in the main process") == Range(0.0, True, 0.0, True)
    assert declared_range("x", "env seed of the first episode.") is None
    assert out_of_range(Range(2.0, True), int) == [-1, 0, 1]
    assert out_of_range(Range(0.0, False, 1.0, True), float) == [-1, 0, 2.0]
    assert out_of_range(Range(0.0, True, 0.0, True), int) == [-1, 1]
    assert out_of_range(Range(2.0, True, zero_off=True), int) == [-1, 1]  # 0 is off, 1 is refused
    assert not math.isnan(out_of_range(Range(0.0, True), float)[0])
    assert inside(Range(0.0, False, 1.0, True)) == 1.0 and inside(Range(0.0, False)) == 1.0
    assert inside(Range(2.0, True)) == 2.0


def test_a_case_replaces_the_base_value_of_its_option():
    assert command(("export", "--out", "folder")) == ["export", "--ckpt_path", "run.ckpt", "--out", "folder"]
    assert command(("export", "--out", OMIT)) == ["export", "--ckpt_path", "run.ckpt"]
    assert command(("export", "--overwrite", "=yes"))[-1] == "--overwrite=yes"
    assert command(("test", "ckpt_path", "")) == ["test", "--config", "pendulum.yaml", "--ckpt_path", ""]
    assert command(("tune", "--space", {"model.tau": {}}))[-2:] == ["--space", "space.yaml"]


def test_ctrl_c_while_torch_and_lightning_load_is_one_line_and_exit_130(monkeypatch, capsys):
    import td3_lightning.cli

    def interrupted(args):  # where a Ctrl-C lands in the first seconds: inside an import
        raise KeyboardInterrupt

    monkeypatch.setattr(td3_lightning.cli, "main", interrupted)
    with pytest.raises(SystemExit) as info:  # before: a KeyboardInterrupt traceback of the imports
        main(["fit", "--config", "pendulum.yaml"])
    assert info.value.code == 130 and capsys.readouterr().err == "stopped by SIGINT (Ctrl-C)\n"
