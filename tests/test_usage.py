"""``fit|validate|test --help``: the project's options first, one line each, without importing torch;
``--help full``: LightningCLI's help with every option."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from td3_lightning import usage as short
from td3_lightning._usage_text import HELP
from td3_lightning.cli import main
from td3_lightning import commands
from td3_lightning.commands import TRAINER_SUBCOMMANDS


@pytest.fixture(scope="module")
def parser_options() -> dict[str, str]:
    return short._parser_options()[0]


@pytest.mark.parametrize("subcommand", TRAINER_SUBCOMMANDS)
def test_the_stored_help_is_the_parser_s(subcommand):
    assert short.build_short_help(subcommand) == HELP[subcommand], (
        "the stored help is out of date: run `python -m td3_lightning.usage`")


def test_the_options_table_of_the_docs_is_the_declarations():
    docs = Path(__file__).parents[1] / "docs" / "options.md"
    table = short.options_table()
    assert table in docs.read_text(), "docs/options.md's table is out of date: run `python -m td3_lightning.usage`"
    rows = table.splitlines()[3:-1]
    assert "| `model.gamma` | `0.99` | discount factor, in [0, 1]. |" in rows
    assert "| `data.sampler` | `uniform` |" in "\n".join(rows)
    assert rows[-1].startswith("| `checkpoint.save_top_k` | `1` |")
    assert len(rows) == len({row.split("|")[1] for row in rows}) >= 75  # each option once


def test_every_project_option_has_one_line_and_lightning_only_the_chosen(parser_options):
    lines = {line.split()[0]: line for line in HELP["fit"].splitlines() if line.startswith("  --")}
    project = [o for o, text in parser_options.items()
               if o.startswith(tuple(short.GROUPS)) and not o.endswith("+") and short.LINKED not in text]
    assert len(project) > 50
    assert [o for o in project if o not in lines] == []
    assert "--model.obs_shape" not in lines  # set from the env
    trainer = sorted(o for o in lines if o.startswith(("--trainer.", "--checkpoint.")))
    assert trainer == sorted(short.LIGHTNING_LINES)
    assert set(short.LIGHTNING_LINES) <= set(parser_options)  # the chosen ones exist
    assert lines["--model.gamma"].endswith("discount factor, in [0, 1]. (default: 0.99)")
    assert lines["--trainer.max_steps"].endswith("(default: 100000)")  # the project's Trainer default
    assert "--ckpt_path" in lines and "last" in lines["--ckpt_path"]
    assert HELP["fit"].index("--model.hidden_dims") < HELP["fit"].index("--trainer.max_steps")


@pytest.mark.parametrize("subcommand", ["validate", "test"])
def test_the_help_of_playing_a_checkpoint_lists_what_it_reads(subcommand):
    lines = {line.split()[0]: line for line in HELP[subcommand].splitlines() if line.startswith("  --")}
    assert sorted(o for o in lines if o.startswith(("--data.", "--trainer."))) == sorted([
        "--data.env_id", "--data.env_kwargs", "--data.eval_episodes", "--data.eval_seed", "--data.test_episodes",
        "--data.test_seed", "--data.record_val", "--data.record_test", "--data.video_format", "--data.frame_stack",
        "--data.privileged_critic", "--trainer.accelerator", "--trainer.devices", "--trainer.precision",
        "--trainer.default_root_dir"])
    assert lines["--model.*"].endswith("read from the checkpoint, which is played as it was trained (but "
                                       "compile_mode and flush_denormal; fit --help lists them).")
    assert "--model.gamma" not in lines and "--data.buffer_size" not in lines and "--selection.episodes" not in lines


def _help_in_a_fresh_process(subcommand: str, folder: Path) -> subprocess.CompletedProcess:
    """``<subcommand> --help`` in a new interpreter in ``folder``; its output ends with ``EXIT <code> <whether torch
    was imported> <whether Lightning was>``."""
    code = ("import sys\nfrom td3_lightning.__main__ import main\n"
            f"try:\n    main(['{subcommand}', '--help'])\nexcept SystemExit as e:\n"
            "    print('EXIT', e.code, 'torch' in sys.modules, 'lightning' in sys.modules)\n")
    return subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=60,
                          check=False)


def test_help_prints_the_short_help_without_importing_torch(tmp_path):
    proc = _help_in_a_fresh_process("fit", tmp_path)
    assert proc.stderr == ""
    assert proc.stdout == HELP["fit"] + "EXIT 0 False False\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("subcommand", ["tune", "export"])
def test_the_help_of_tune_and_export_imports_no_torch(subcommand, tmp_path):
    proc = _help_in_a_fresh_process(subcommand, tmp_path)
    assert proc.stderr == "" and f"usage: python -m td3_lightning {subcommand}" in proc.stdout
    assert proc.stdout.endswith("EXIT 0 False False\n"), proc.stdout[-300:]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_after_other_options_is_the_short_help(flag, capsys):
    with pytest.raises(SystemExit) as info:
        main(["test", "--config", "pendulum.yaml", flag])
    assert info.value.code == 0
    assert capsys.readouterr().out == HELP["test"]


def test_help_with_a_config_says_where_its_values_are_shown(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--config", "pendulum.yaml", "--model.gamma", "0.9", "--help"])
    captured = capsys.readouterr()
    assert info.value.code == 0 and captured.out == HELP["fit"]
    assert captured.err == ("note: the defaults above are the package's; the values this command runs with: python -m "
                            "td3_lightning fit --config pendulum.yaml --model.gamma 0.9 --print_config\n")
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    assert capsys.readouterr().err == ""  # no config: the defaults are the values


def test_help_full_is_lightning_s(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fit", "--help", "full"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert "--trainer.gradient_clip_val" in out and "--model.hidden_dims" in out
    assert out.count("\n") > 3 * HELP["fit"].count("\n")


def test_full_is_dropped_only_after_help():
    assert commands.without_full(["--help", "full"]) == ["--help"]
    assert commands.without_full(["--config", "full", "--help"]) == ["--config", "full", "--help"]
    assert commands.requested(["--config", "x.yaml"]) is None
    assert commands.requested(["-h"]) == "short"
    assert commands.requested(["--help", "full"]) == "full"


def test_docstring_markup_becomes_plain_help_text():
    assert commands.plain_text("A ``fit`` of :class:`~td3_lightning.cli.TD3CLI` (:func:`main`, ``a\nb``).") == (
        "A `fit` of TD3CLI (main, `a\nb`).")
    for subcommand in ("export", "tune"):
        out = subprocess.run([sys.executable, "-m", "td3_lightning", subcommand, "--help"], capture_output=True,
                             text=True, timeout=120)
        text = out.stdout
        assert out.returncode == 0 and "usage:" in text
        assert "``" not in text and ":class:" not in text and ":func:" not in text, subcommand
