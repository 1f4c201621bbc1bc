"""What the README says, checked against what the program does: the lines it gives to run, and the lines it quotes
from the program's output."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
from conftest import quiet_trainer, tiny_checkpoint

from td3_lightning import errors
from td3_lightning.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def _quoted(pattern: str) -> re.Match:
    found = re.search(pattern, README.read_text())
    assert found, pattern  # the README's line is gone or reworded: update the test with it
    return found


def _as_pattern(quote: str) -> str:
    """A regular expression of a quoted output line: each ``...`` stands for any text, each number for any number."""
    tokens = re.split(r"(\.\.\.|-?\d+(?:\.\d+)?)", quote)
    return "".join(".*" if t == "..." else r"-?\d+(?:\.\d+)?" if re.fullmatch(r"-?\d+(?:\.\d+)?", t) else re.escape(t)
                   for t in tokens)


def test_the_readmes_atomic_checkpoint_line_runs_as_written(tmp_path, cli_env):
    # before: `plugins=[td3_lightning.checkpointing.AtomicCheckpointIO()]`, an AttributeError after `import
    # td3_lightning` (which does not import the submodule)
    found = _quoted(r"with a plain `Trainer` pass `plugins=\[(.*?)\]` \(`(from td3_lightning\S* import .*?)`\)")
    plugin, import_line = found.groups()
    code = (f"{import_line}\nimport lightning as L\n"
            f"trainer = L.Trainer(plugins=[{plugin}], logger=False, enable_progress_bar=False)\n"
            "print(type(trainer.strategy.checkpoint_io).__name__)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["AtomicCheckpointIO"]


def test_the_readmes_editable_installs_keep_the_constraints():
    installs = [line.strip() for line in README.read_text().splitlines() if re.search(r"pip install .*-e\b", line)]
    assert len(installs) >= 4, installs  # the fresh clone, the tests, the tune extra, the mujoco extra
    assert [line for line in installs if "-c constraints.txt" not in line] == []


def test_the_readmes_test_output_is_what_test_prints(tmp_path, monkeypatch, capsys):
    # before: "`test` prints one summary line", with Lightning's table after it
    summary = _quoted(r"`test` prints a summary line \(`(test: .*?)`\) and where\s+it wrote `test_results\.json` "
                      r"\(.*?\), then Lightning's table\.").group(1)
    ckpt = tiny_checkpoint(tmp_path / "run.ckpt")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    main(["test", "--config", "pendulum.yaml", "--data.test_episodes", "2", "--ckpt_path", str(ckpt)])
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert re.fullmatch(_as_pattern(summary), lines[0]), (summary, lines[0])
    assert lines[1] == f"test results written to {tmp_path / 'lightning_logs' / 'version_0' / 'test_results.json'}"
    assert any(line.startswith("test/return ") for line in lines[2:]), lines  # Lightning's table of the metrics


def test_the_readmes_render_warning_is_the_line_the_program_prints(tmp_path):
    # before: quoted as "UserWarning: ...", where the command line prints "warning: ..."
    from lightning.pytorch.loggers import TensorBoardLogger

    from td3_lightning import TD3, ReplayDataModule

    quote = _quoted(r"\*`(warning: Walker2d-v5 cannot render frames here .*?)`\*").group(1)
    L.seed_everything(0)
    dm = ReplayDataModule("td3test/NoDisplay-v0", warmup_steps=20, batch_size=8, buffer_size=200, eval_episodes=1,
                          tensorboard_video_every=1)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8, 8])
    trainer = quiet_trainer(max_steps=20, logger=TensorBoardLogger(tmp_path), val_check_interval=20)
    with pytest.warns(UserWarning, match="cannot render frames here") as caught:
        trainer.fit(model, dm)
    (warning,) = [w for w in caught if "cannot render frames here" in str(w.message)]
    line = errors.said_as_warning(warning.message, warning.category, warning.filename, warning.lineno)  # as printed
    assert re.fullmatch(_as_pattern(quote.replace("Walker2d-v5", "td3test/NoDisplay-v0")), line.strip()), line
