"""Every option of ``fit`` given a wrong value: one ``error:`` line that names the option, exit status 2,
nothing written.

The cases are generated from the parser: every ``--model.*``, ``--data.*``, ``--progress_bar.*`` and
``--learning_curve.*`` option gets a value of the wrong type, and every option with a range gets values
below it (zero where zero is out of range, a negative number) and above it. An option's range is read from its help text (its one-line docstring, e.g.
``(>= 1)``, ``(> 0)``, ``in [0, 1]``), so ``--help`` shows what the check enforces; a new numeric option
without a range in its help fails :func:`test_every_numeric_option_declares_its_range`.
"""

from __future__ import annotations

import math
import re
import shutil
import types
import typing
from pathlib import Path

import pytest

from td3_lightning import _lightning
from td3_lightning.cli import CONFIG_DIR, TD3CLI, cli_kwargs, main
from td3_lightning.data import ReplayDataModule
from td3_lightning.module import TD3

#: List options: the range each item must be in (their help names it in words, not as a bound).
RANGE_NOT_IN_HELP = {
    "model.hidden_dims": ">= 1",  # each size
    "model.reset_steps": ">= 1",  # each step
}
#: Options that take text from a fixed set, with a value outside it.
CHOICES = {
    "model.encoder": "bogus", "model.compile_mode": "bogus", "data.vector_mode": "bogus",
    "data.video_format": "avi", "data.buffer_device": "bogus", "data.sampler": "bogus",
}
#: The Trainer and checkpoint options this project counts in training steps, with values it refuses.
TRAINER_CASES = {
    "trainer.max_steps": ["-5", "0", "abc", "1.5"],
    "trainer.val_check_interval": ["0", "-3", "0.5", "abc"],
    "trainer.log_every_n_steps": ["-1", "abc"],
    "checkpoint.every_n_train_steps": ["-1", "abc"],
}
# a line that says what the option accepts
ACCEPTS = re.compile(r"expected|must|at least|>=|> 0|in \[|in \(|one of")


#: the option groups walked: the module's, the datamodule's and the project's callbacks'
WALKED = ("--model.", "--data.", "--progress_bar.", "--learning_curve.")


class _ParseOnly(TD3CLI):
    def instantiate_classes(self) -> None:  # the options only: no env, model or Trainer
        pass


def _fit_options() -> dict[str, tuple[typing.Any, str]]:
    cli = _ParseOnly(TD3, ReplayDataModule, args=["--config", str(CONFIG_DIR / "pendulum.yaml")], run=False,
                     **cli_kwargs())
    types = _lightning.cli_option_types(cli, [])
    return {o[2:]: th for o, th in types.items()
            if o.startswith(WALKED) and not o.endswith("+") and th[0] is not None}


def _number_type(hint: typing.Any) -> tuple[type | None, bool]:
    """``int`` or ``float`` for a (possibly optional, possibly list-of) number option, and whether it is a list."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        hint = args[0]
    if typing.get_origin(hint) is list and typing.get_args(hint)[0] in (int, float):
        return typing.get_args(hint)[0], True
    return (hint, False) if hint in (int, float) else (None, False)


def declared_range(name: str, help_text: str) -> tuple[float | None, bool, float | None, bool] | None:
    """(low, low included, high, high included) from the help text or :data:`RANGE_NOT_IN_HELP`."""
    text = RANGE_NOT_IN_HELP.get(name, help_text)
    number = r"(-?\d+(?:\.\d+)?(?:e-?\d+)?)"
    if interval := re.search(rf"in ([\[(]){number}, {number}([\])])", text):
        return float(interval[2]), interval[1] == "[", float(interval[3]), interval[4] == "]"
    if low := re.search(rf"(?<![<>=!])(>=?) {number}", text):
        return float(low[2]), low[1] == ">=", None, False
    if re.match(r"must be 0\b", text):
        return 0.0, True, 0.0, True
    return None


def _fmt(value: float, kind: type) -> str:
    return str(int(value)) if kind is int else repr(float(value))


def out_of_range(low: float | None, low_in: bool, high: float | None, high_in: bool, kind: type) -> list[float]:
    values = []
    if low is not None:
        below = low - 1 if kind is int or low_in else low  # the nearest value below the range
        values += [v for v in (below, 0, -1) if v < low or (v == low and not low_in)]
    if high is not None:
        values.append(high + 1)
    return sorted(set(values))


def _cases() -> list[tuple[str, str]]:
    cases = []
    for name, (hint, help_text) in sorted(_fit_options().items()):
        kind, is_list = _number_type(hint)
        if hint is bool or kind is not None:
            cases.append((name, "abc"))
        if kind is int and not is_list:
            cases.append((name, "1.5"))
        if kind is None:
            if name in CHOICES:
                cases.append((name, CHOICES[name]))
            continue
        bounds = declared_range(name, help_text)
        if bounds is None:
            continue  # test_every_numeric_option_declares_its_range names it
        for value in out_of_range(*bounds, kind):
            cases.append((name, f"[{_fmt(value, kind)}]" if is_list else _fmt(value, kind)))
        if kind is float:
            cases.append((name, "nan"))
    for name, values in TRAINER_CASES.items():
        cases += [(name, v) for v in values]
    return cases


CASES = _cases()


def test_every_numeric_option_declares_its_range():
    unranged = [name for name, (hint, help_text) in _fit_options().items()
                if _number_type(hint)[0] is not None and declared_range(name, help_text) is None]
    assert unranged == []  # name the range in the option's docstring, e.g. "(>= 1)", and check it


def test_the_walk_covers_the_cases_of_the_issue():
    for case in [("trainer.max_steps", "-5"), ("trainer.max_steps", "0"), ("trainer.val_check_interval", "0"),
                 ("data.batch_size", "0"), ("data.buffer_size", "0"), ("data.warmup_steps", "-1"),
                 ("data.eval_episodes", "0"), ("data.num_envs", "0"), ("data.utd_ratio", "0.0"),
                 ("data.steps_per_batch", "0"), ("data.n_step", "0"), ("checkpoint.every_n_train_steps", "-1"),
                 ("trainer.log_every_n_steps", "-1"), ("model.gamma", "2.0"), ("model.actor_lr", "0.0")]:
        assert case in CASES, case
    assert len({name for name, _ in CASES}) > 50


@pytest.fixture
def work_folder(tmp_path, monkeypatch) -> Path:
    """The current folder, holding a config the command reads: it must stay byte-identical."""
    shutil.copy(CONFIG_DIR / "pendulum.yaml", tmp_path / "pendulum.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("option, value", CASES, ids=[f"{n}={v}" for n, v in CASES])
def test_a_wrong_value_is_one_line_and_writes_nothing(option, value, work_folder, capsys):
    before = {p: p.read_bytes() for p in work_folder.rglob("*")}
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", f"--{option}", value])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert option in lines[0] and ACCEPTS.search(lines[0]), lines[0]
    assert "Traceback" not in captured.out + captured.err
    assert {p: p.read_bytes() for p in work_folder.rglob("*")} == before  # no new file or folder, none changed


def test_declared_ranges_are_read_from_the_help():
    assert declared_range("x", "discount factor, in [0, 1].") == (0.0, True, 1.0, True)
    assert declared_range("x", "Polyak rate, in (0, 1] (1 = hard copy).") == (0.0, False, 1.0, True)
    assert declared_range("x", "number of critics (>= 2).") == (2.0, True, None, False)
    assert declared_range("x", "updates per transition (> 0); max_steps still counts") == (0.0, False, None, False)
    assert declared_range("x", "must be 0: the buffer lives in the main process") == (0.0, True, 0.0, True)
    assert declared_range("x", "env seed of the first episode.") is None
    assert out_of_range(2.0, True, None, False, int) == [-1, 0, 1]
    assert out_of_range(0.0, False, 1.0, True, float) == [-1, 0, 2.0]
    assert out_of_range(0.0, True, 0.0, True, int) == [-1, 1]
    assert not math.isnan(out_of_range(0.0, True, None, False, float)[0])
