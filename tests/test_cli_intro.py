"""`python -m td3_lightning` introduces its subcommands; `predict` is not one of them."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from td3_lightning.cli import TD3CLI, main
from td3_lightning.commands import SUBCOMMANDS

EXPECTED = ["fit", "validate", "test", "export", "tune"]


def _listed(text: str) -> dict[str, str]:
    """subcommand -> its example, from the listing."""
    found = re.findall(r"^  (\w+) +\S.*\n +e\.g\. (python -m td3_lightning .+)$", text, re.MULTILINE)
    return dict(found)


def _exit(args, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_subcommand_with_an_example(flag, capsys):
    code, out, err = _exit([flag], capsys)
    assert code == 0 and err == ""
    listed = _listed(out)
    assert list(listed) == EXPECTED
    for name, example in listed.items():
        assert example.startswith(f"python -m td3_lightning {name} --")
    assert "predict" not in out


def test_no_arguments_prints_the_listing_and_exits_2(cli_env, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "td3_lightning"], cwd=tmp_path, env=cli_env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert list(_listed(proc.stderr)) == EXPECTED
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [("error: no subcommand given; start with one of fit, validate, test, export, tune, "
                      "e.g. python -m td3_lightning fit --config pendulum.yaml")]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, line",
    [
        (["predict", "--config", "pendulum.yaml"], ("error: unknown subcommand 'predict'; the subcommands are fit, "
         "validate, test, export, tune (python -m td3_lightning --help describes them)")),
        (["--config", "pendulum.yaml", "predict"], ("error: unknown subcommand 'predict'; the subcommands are fit, "
         "validate, test, export, tune (python -m td3_lightning --help describes them)")),
        (["fitt"], ("error: unknown subcommand 'fitt' (did you mean fit?); the subcommands are fit, validate, test, "
         "export, tune (python -m td3_lightning --help describes them)")),
    ],
)
def test_unknown_subcommand_is_one_line(args, line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _out, err = _exit(args, capsys)
    assert code == 2 and err.strip() == line
    assert list(tmp_path.iterdir()) == []


def test_lightning_cli_offers_no_predict():
    assert set(TD3CLI.subcommands()) == {"fit", "validate", "test"}
    assert set(SUBCOMMANDS) == set(EXPECTED)


@pytest.mark.parametrize("subcommand", ["fit", "validate", "test"])
def test_a_command_builds_the_parser_of_its_subcommand_only(subcommand):
    from td3_lightning._lightning import cli_option_names
    from td3_lightning.cli import parser_only_cli

    cli = parser_only_cli(subcommand)
    assert list(cli.subcommands()) == [subcommand] and list(TD3CLI.subcommands()) == ["fit", "validate", "test"]
    options = cli_option_names(cli, [subcommand])
    assert "--ckpt_path" in options and "--model.gamma" in options and "--trainer.max_steps" in options


def test_the_fit_example_parses(capsys):
    example = _listed(_exit(["--help"], capsys)[1])["fit"].split()[3:]
    code, out, _ = _exit([*example, "--print_config"], capsys)
    assert code in (0, None)
    assert re.search(r"^  max_steps: 20000$", out, re.MULTILINE) and "env_id: Pendulum-v1" in out


def _readme_commands(section: str) -> list[list[str]]:
    """The ``python -m td3_lightning`` commands of the first bash block after ``section``, in order, as written."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = text[text.index(section):].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if words[:3] == ["python", "-m", "td3_lightning"]:
            commands.append(words[3:])
        if "&&" in words:
            commands.append(words[words.index("&&") + 4:])
    return commands


#: what each command gets besides its own words here: budgets small enough for a test
BUDGETS = {
    "fit": ["--trainer.max_steps", "200", "--data.warmup_steps", "100", "--trainer.val_check_interval", "100",
            "--data.eval_episodes", "1", "--model.hidden_dims", "[16]"],
    "test": ["--data.test_episodes", "2"],
    "tune": ["--n_trials", "1", "--trainer.max_steps", "100", "--trainer.val_check_interval", "100",
             "--data.warmup_steps", "100", "--data.eval_episodes", "1"],
}


def test_the_readmes_lines_run_in_its_order_in_one_folder(tmp_path, cli_env):
    """The fresh clone's car run, then the Quickstart top to bottom (small budgets added), then the car's test line:
    each test and resume takes the checkpoint of its own config's env, never the newest of another."""
    first = _readme_commands("## Fresh clone")
    quickstart = _readme_commands("## Quickstart")
    assert first == [["fit", "--config", "configs/car.yaml"]] and [c[0] for c in quickstart] == [
        "fit", "test", "fit", "test", "tune"]
    repo = Path(__file__).resolve().parents[1]
    (tmp_path / "configs").symlink_to(repo / "configs")  # the README's lines run in a clone's folder
    lines = []
    for command in [*first, *quickstart, ["test", "--config", "configs/car.yaml"]]:
        budget = BUDGETS[command[0]] if "car_taught.yaml" not in command else ["--data.test_episodes", "1"]
        if command[0] == "fit" and "car.yaml" in command[2]:  # the car: a small buffer, one selection track
            budget = [*budget, "--data.buffer_size", "1000", "--selection.episodes", "1", "--model.reset_steps", "[]"]
        if command[0] == "fit" and "--ckpt_path" in command:  # the resume goes on past the fit's 200 steps
            budget = ["--trainer.max_steps", "300", *budget[2:]]
        if command[0] == "tune" and importlib.util.find_spec("optuna") is None:
            continue
        proc = subprocess.run([sys.executable, "-m", "td3_lightning", *command, *budget], cwd=tmp_path, env=cli_env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (command, proc.stderr[-3000:])
        lines.append(next((line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("checkpoint:")),
                          ""))
    runs = tmp_path / "lightning_logs"
    car, pendulum = runs / "version_0/checkpoints", runs / "version_1/checkpoints"
    assert lines[2].startswith(f"checkpoint: {pendulum}/best-step") and "(--ckpt_path best" in lines[2]
    assert lines[3] == f"checkpoint: {pendulum}/last.ckpt (--ckpt_path last)"
    assert lines[-1].startswith(f"checkpoint: {car}/best-step") and "(--ckpt_path best" in lines[-1]
