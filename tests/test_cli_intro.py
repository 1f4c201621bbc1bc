"""`python -m td3_lightning` introduces its subcommands; `predict` is not one of them."""

from __future__ import annotations

import re
import subprocess
import sys

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


def test_the_fit_example_parses(capsys):
    example = _listed(_exit(["--help"], capsys)[1])["fit"].split()[3:]
    code, out, _ = _exit([*example, "--print_config"], capsys)
    assert code in (0, None)
    assert re.search(r"^  max_steps: 20000$", out, re.MULTILINE) and "env_id: Pendulum-v1" in out
