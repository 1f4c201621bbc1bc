"""Bad checkpoints and bad configs: one line on stderr, exit status 2, nothing written;
``--ckpt_path last``."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import types
import warnings
import zipfile
from pathlib import Path

import gymnasium as gym
import pytest
import torch
import yaml

import td3_lightning
from td3_lightning.checkpointing import find_run_checkpoint
from td3_lightning.cli import main
from td3_lightning.errors import UserInputError

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "td3_lightning" / "checkpoints"  # the shipped drivers

RUN = [
    "--config", "pendulum.yaml", "--trainer.max_steps", "60", "--trainer.val_check_interval", "30",
    "--data.warmup_steps", "100", "--data.buffer_size", "5000", "--data.eval_episodes", "1",
    "--model.hidden_dims", "[16, 16]", "--data.batch_size", "16",
]


@pytest.fixture(scope="module")
def real_ckpt(tmp_path_factory) -> Path:
    """A real Pendulum-v1 checkpoint (observation (3,), action (1,) in [-2, 2], buffer 5000)."""
    root = tmp_path_factory.mktemp("run")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        main(["fit", *RUN])
    finally:
        os.chdir(cwd)
    return root / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"


def _error_line(args: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: "), err
    return err


def _edited(src: Path, dst: Path, edit) -> None:
    ckpt = torch.load(src, weights_only=True)
    edit(ckpt)
    torch.save(ckpt, dst)


def _make(name: str, src: Path, dst: Path) -> None:
    data = src.read_bytes()
    if name == "half":
        dst.write_bytes(data[: len(data) // 2])
    elif name == "random":
        dst.write_bytes(random.Random(0).randbytes(4096))
    elif name == "empty":
        dst.write_bytes(b"")
    elif name == "no_section":
        _edited(src, dst, lambda c: c.pop("td3_lightning"))
    elif name == "sac":
        _edited(src, dst, lambda c: c["td3_lightning"].update(algorithm="SAC"))
    elif name == "v2":
        _edited(src, dst, lambda c: c["td3_lightning"].update(format_version=2))
    elif name == "weights_only":
        torch.save({"actor": torch.zeros(3)}, dst)
    elif name == "slim":
        _edited(src, dst, lambda c: [c.pop(k) for k in ("optimizer_states", "loops", "ReplayDataModule")])
    elif name == "bitflip":  # one bit of the replay buffer's largest tensor: torch.load reads it without a word
        with zipfile.ZipFile(src) as archive:
            record = max(archive.infolist(), key=lambda info: info.file_size)
        data = bytearray(data)
        data[record.header_offset + 512 + record.file_size // 2] ^= 1
        dst.write_bytes(bytes(data))
    elif name == "folder":
        dst.mkdir()
    else:
        shutil.copy(src, dst)


CASES = [
    ("half", [], "cannot read checkpoint bad.ckpt: the file is truncated or corrupt, or not a PyTorch checkpoint"),
    ("random", [], "cannot read checkpoint bad.ckpt: the file is truncated or corrupt, or not a PyTorch checkpoint"),
    ("empty", [], "cannot read checkpoint bad.ckpt: the file is empty"),
    ("bitflip", [], "cannot read checkpoint bad.ckpt: the file is corrupt (its record "),
    ("folder", [], "checkpoint file is a folder, not a file: bad.ckpt; pass an existing .ckpt file to --ckpt_path"),
    ("no_section", [], "checkpoint bad.ckpt was not written by td3_lightning (a Lightning checkpoint without the "
                       "'td3_lightning' section)"),
    ("sac", [], "checkpoint bad.ckpt holds a 'SAC' model, not TD3"),
    ("v2", [], "checkpoint bad.ckpt has format version 2; this td3_lightning reads version 1"),
    ("weights_only", [], "checkpoint bad.ckpt is not a Lightning checkpoint (no 'state_dict')"),
    ("real", ["--data.env_id", "CarRacingState-v0"],
     "checkpoint observation shape (3,) != CarRacingState-v0's (43,) (bad.ckpt); use the env (data.env_id, "
     "data.env_kwargs) the checkpoint was trained on: it was trained on Pendulum-v1 with data.env_kwargs {}"),
    ("real", ["--data.env_id", "td3test/TwoActions-v0"],
     "checkpoint action shape (1,) != td3test/TwoActions-v0's (2,) (bad.ckpt); use the env (data.env_id, "
     "data.env_kwargs) the checkpoint was trained on: it was trained on Pendulum-v1 with data.env_kwargs {}"),
    ("real", ["--data.env_id", "td3test/ConstantReward-v0", "--data.env_kwargs", "{obs_dim: 3}"],
     "checkpoint action bounds low=[-2.0] high=[2.0] != td3test/ConstantReward-v0's low=[-1.0] high=[1.0] (bad.ckpt)"),
    ("slim", [], "checkpoint bad.ckpt holds no optimizer or loop state (a slim or weights-only checkpoint): test and "
                 "validate take it; fit resumes from its run's last.ckpt (--ckpt_path last), or trains a new run"),
    ("real", ["--data.buffer_size", "4000"],
     "checkpoint replay buffer capacity 5000 != data.buffer_size 4000 (bad.ckpt); set data.buffer_size 5000 to "
     "resume it"),
]


@pytest.mark.parametrize("subcommand", ["fit", "test"])
@pytest.mark.parametrize(
    "kind, args, message", CASES, ids=[f"{c[0]}-{c[1][1] if c[1] else ''}".strip("-") for c in CASES]
)
def test_bad_checkpoint_one_line_nothing_written(
    subcommand, kind, args, message, real_ckpt, tmp_path, monkeypatch, capsys
):
    if subcommand == "test" and ("--data.buffer_size" in args or kind == "slim"):
        pytest.skip("test takes a checkpoint without optimizer and replay state")
    monkeypatch.chdir(tmp_path)
    _make(kind, real_ckpt, tmp_path / "bad.ckpt")
    err = _error_line([subcommand, *RUN, *args, "--ckpt_path", "bad.ckpt"], capsys)
    assert message in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["bad.ckpt"]  # nothing written


@pytest.mark.parametrize(
    "args, config, message",
    [
        (["--model.gamme", "0.9"], None,
         "error: unknown option --model.gamme (did you mean --model.gamma?); --help lists the options"),
        (["--model.gamma", "abc"], None, "error: invalid value for model.gamma: expected a float, got 'abc'"),
        (["--data.priority_alpha", "nan"], None,
         "error: invalid value for data.priority_alpha: expected a float (a finite number), got 'nan'"),
        (["--trainer.max_steps", "1.5"], None,
         "error: invalid value for trainer.max_steps: expected an int, got '1.5'"),
        (["--trainer.max_steps", "-1", "--trainer.max_time", "00:00:01:00", "--model.lr_final_factor", "0.1"], None,
         "error: model.lr_final_factor schedule over trainer.max_steps, which is -1 (no limit): set "
         "model.schedule_steps to the training steps the schedule takes, or a trainer.max_steps"),
        (["--seed_everything", "abc"], None,
         "error: invalid value for seed_everything: expected one of bool, int, got 'abc' (a whole number, or true "
         "for a random seed)"),
        (["--data.env_kwargs", "g=9.8"], None,
         "error: invalid value for data.env_kwargs: expected one of dict[str, Any], None, got 'g=9.8' (a mapping is "
         "written in braces, e.g. '{a: 1, b: 2}')"),
        (["--trainer.precision", "fp16"], None,  # not Lightning's list, which holds precisions TD3 refuses
         "error: trainer.precision must be 32-true, bf16-mixed or 16-mixed (the env loop and the replay buffer hold "
         "float32, which the networks take); got fp16"),
        (["--model.encoder", "cnn"], None,
         "error: model.encoder cnn needs image observations (C, H, W), got shape (3,); give model.encoder auto (or "
         "none) for these"),
        (["--data.batch_size"], None,
         "error: option --data.batch_size is given without a value: write one after it, e.g. --data.batch_size VALUE "
         "(--help lists its default)"),
        ([], {"model": {"gamme": 0.9}},
         "error: unknown key model.gamme in the configuration (did you mean model.gamma?); --help lists the options"),
        ([], {"data": {"batch_size": "many"}}, "error: invalid value for data.batch_size: expected an int, got 'many'"),
        ([], {"trainer": {"max_stepz": 10}},
         "error: unknown key trainer.max_stepz in the configuration (did you mean trainer.max_steps?); "
         "--help lists the options"),
        (["--modle.gamma", "0.9"], None,
         "error: unknown option --modle.gamma (did you mean --model.gamma?); --help lists the options"),
        ([], {"trainr": {"max_steps": 10}},
         "error: unknown key trainr.max_steps in the configuration (did you mean trainer.max_steps?); "
         "--help lists the options"),
        (["--trainer.max_step", "300"], None,
         "error: unknown option --trainer.max_step (did you mean --trainer.max_steps?); --help lists the options"),
        (["--gamma", "0.9"], None, "error: unknown option --gamma (did you mean --model.gamma?); --help lists the "
                                   "options"),
        (["--seed", "3"], None, "error: unknown option --seed (did you mean --seed_everything or --selection.seed?); "
                                "--help lists the options"),
        (["--model.hidden_dims", "[64,", "64]"], None,
         "error: invalid value for model.hidden_dims: expected a list, got '[64,' (the shell split it at a space: "
         "quote the whole value, e.g. '{a: 1, b: 2}' or '[64, 64]')"),
        (["--model.hidden_dims", "64,64"], None,
         "error: invalid value for model.hidden_dims: expected a list, got '64,64' (a list is written in brackets, "
         "e.g. '[64, 64]')"),
        (["--model.critic_range", "(0, 10)"], None,
         "error: invalid value for model.critic_range: expected one of list[float], 'auto', None, got '(0, 10)' "
         "(a list is written in brackets, e.g. '[0, 10]')"),
        (["--model.critic_range", "autox"], None,  # a word, not numbers: no hint of brackets
         "error: invalid value for model.critic_range: expected one of list[float], 'auto', None, got 'autox'"),
        ([], {"gamma": 0.9}, "error: unknown key gamma in the configuration (did you mean model.gamma? each option "
                             "is under its group); --help lists the options"),
        ([], {"fit": {"trainer": {"max_steps": 10}}},
         "error: unknown key fit.trainer.max_steps in the configuration: the file of a `fit` run holds its options "
         "at the top level (trainer:, model:, ...); remove the `fit:` level, or give the file before the subcommand "
         "(--config FILE fit)"),
        ([], {"trainer": {"model": {"gamma": 0.9}}},
         "error: unknown key trainer.model.gamma in the configuration (did you mean model.gamma? each group is a "
         "section at the top level); --help lists the options"),
        ([], {"model": 5}, "error: config file mine.yaml: `model: 5` is not a section of options; write the model "
                           "options under it (e.g. model: {gamma: 0.98})"),
        ([], {"trainer": [100]}, "error: config file mine.yaml: `trainer: [100]` is not a section of options; write "
                                 "the trainer options under it (e.g. trainer: {max_steps: 20000})"),
        ([], {"data": "abc"}, "error: invalid value for data: 'abc' is neither its options nor a config file that "
                              "exists; write the data options under it (e.g. data: {batch_size: 256})"),
        (["--data.eval_seed", "0"], None,
         "error: the validation episodes (data.eval_seed 0: seeds 0-9) share env seeds with the test episodes "
         "(data.test_seed 0: seeds 0-99), so checkpoints would be chosen on the episodes that test them; move them "
         "apart, e.g. --data.eval_seed 1000"),
        (["--data.test_seed", "995"], None,
         "error: the test episodes (data.test_seed 995: seeds 995-1094) share env seeds with the validation episodes "
         "(data.eval_seed 1000: seeds 1000-1009), so checkpoints would be chosen on the episodes that test them; "
         "move them apart, e.g. --data.test_seed 0"),
        (["--selection.episodes", "3", "--checkpoint.save_top_k", "2", "--selection.seed", "1008"], None,
         "error: the selection episodes (selection.seed 1008: seeds 1008-1010) share env seeds with the validation "
         "episodes (data.eval_seed 1000: seeds 1000-1009), so the selection would replay the validation's own "
         "episodes; move them apart, e.g. --selection.seed 2000000"),
        (["--data.batch_size", "0", "--print_config"], None, "error: data.batch_size must be >= 1, got 0"),
        (["--checkpoint.save_top_k", "3"], {"selection": {"episodes": 3, "seed": None}},
         "error: selection.seed must be an integer >= 0, got null"),
        (["--data.env_kwargs", "{max_torque:2}"], None,
         "error: invalid value for data.env_kwargs: expected one of dict[str, Any], None, got '{max_torque:2}' (YAML "
         "needs a space after each colon, e.g. '{a: 1, b: 2}')"),
        # before: "the shell split it at a space", of a value that has one in it
        (["--data.env_kwargs", "{max_torque: 2"], None,
         "error: invalid value for data.env_kwargs: expected one of dict[str, Any], None, got '{max_torque: 2' (not a "
         "valid YAML or JSON mapping: a { is never closed; add the missing }, e.g. '{a: 1, b: 2}')"),
        (["--model.hidden_dims", "[64, 64"], None,
         "error: invalid value for model.hidden_dims: expected a list, got '[64, 64' (not a valid YAML or JSON list: "
         "a [ is never closed; add the missing ], e.g. '[64, 64]')"),
        (["--data.env_kwargs", "{max_torque:", "2}"], None,
         "error: invalid value for data.env_kwargs: expected one of dict[str, Any], None, got '{max_torque:' (the "
         "shell split it at a space: quote the whole value, e.g. '{a: 1, b: 2}' or '[64, 64]')"),
    ],
    ids=["unknown-option", "wrong-type", "not-finite", "wrong-int", "schedule-without-a-length", "wrong-union",
         "mapping-without-braces", "precision-of-lightning-only", "cnn-on-vectors", "option-without-a-value",
         "config-unknown-key",
         "config-wrong-type", "config-unknown-trainer-key", "misspelt-group", "config-misspelt-group",
         "a-prefix-is-not-the-option", "option-outside-its-group",
         "option-a-prefix-of-others", "unquoted-list", "list-without-brackets", "range-without-brackets",
         "range-a-word", "config-option-outside-its-group",
         "config-subcommand-level", "config-group-inside-another", "config-section-a-number",
         "config-section-a-list", "config-section-no-file", "validation-on-test-seeds", "test-on-validation-seeds",
         "selection-on-validation-seeds", "print-config-checks-first", "selection-seed-none",
         "mapping-without-spaces", "mapping-not-closed", "list-not-closed", "unquoted-mapping"],
)
def test_bad_option_or_config_one_line(args, config, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    extra = []
    if config is not None:
        (tmp_path / "mine.yaml").write_text(yaml.safe_dump(config))
        extra = ["--config", "mine.yaml"]
    err = _error_line(["fit", "--config", "pendulum.yaml", *extra, *args], capsys)
    assert err == message
    assert [p.name for p in tmp_path.iterdir()] == (["mine.yaml"] if config else [])


# ---------------------------------------------------------------------------- --ckpt_path last
def test_ckpt_path_last_without_earlier_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _error_line(["fit", *RUN, "--ckpt_path", "last"], capsys)
    assert err == (
        f"error: --ckpt_path last: no checkpoint matches {tmp_path}/lightning_logs/*/checkpoints/last*.ckpt; "
        "pass a checkpoint file to --ckpt_path, or leave --ckpt_path out to start a new run"
    )
    assert list(tmp_path.iterdir()) == []


def test_ckpt_path_last_after_runs_without_last_ckpt_names_their_newest_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"  # a fit with --checkpoint.save_last false
    folder.mkdir(parents=True)
    for name in ("best-step20.ckpt", "best-step40.ckpt"):
        (folder / name).write_bytes(b"")
    os.utime(folder / "best-step20.ckpt", ns=(2_000_000_000, 2_000_000_000))
    err = _error_line(["fit", *RUN, "--ckpt_path", "last"], capsys)
    assert err == (
        f"error: --ckpt_path last: no checkpoint matches {tmp_path}/lightning_logs/*/checkpoints/last*.ckpt; the runs "
        f"there kept no last.ckpt (checkpoint.save_last false), and the newest checkpoint, {folder}/best-step40.ckpt, "
        "holds what a resume needs: pass it to --ckpt_path")


def test_ckpt_path_last_resumes_the_newest_run(real_ckpt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for version, age in [("version_0", 0), ("version_1", 100), ("version_7", 50)]:  # version_0 is the newest
        path = tmp_path / "lightning_logs" / version / "checkpoints" / "last.ckpt"
        path.parent.mkdir(parents=True)
        shutil.copy(real_ckpt, path)
        os.utime(path, ns=(real_ckpt.stat().st_mtime_ns - age * 10**9,) * 2)
    main(["fit", *RUN, "--trainer.max_steps", "70", "--ckpt_path", "last"])
    run = tmp_path / "lightning_logs" / "version_8"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["ckpt_path"] == str(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == 70 and ckpt["td3_lightning"]["num_critic_updates"] == 70
    assert ckpt["ReplayDataModule"]["replay"]["size"] == 100 + 70  # the warm-up is not repeated


def test_ckpt_path_last_finds_the_newest_last_checkpoint_the_configuration_writes(tmp_path):
    def touch(rel: str, age: int) -> Path:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
        return path

    touch("logs/tb/version_0/checkpoints/last.ckpt", 10)
    newest = touch("logs/tb/version_1/checkpoints/last.ckpt", 5)
    touch("logs/tb/version_1/checkpoints/.last.ckpt.abc123.tmp", 0)  # a write killed midway: not a candidate
    logger = {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
              "init_args": {"save_dir": str(tmp_path / "logs"), "name": "tb"}}
    assert find_run_checkpoint({"trainer": {"logger": logger}, "checkpoint": {}}, "last") == newest

    fixed = touch("ckpts/last-v1.ckpt", 1)  # a second run into a fixed folder writes last-v1.ckpt
    touch("ckpts/last.ckpt", 3)
    assert find_run_checkpoint({"trainer": {}, "checkpoint": {"dirpath": str(tmp_path / "ckpts")}}, "last") == fixed

    no_logger = touch("root/checkpoints/last.ckpt", 1)
    no_logger_config = {"trainer": {"logger": False, "default_root_dir": str(tmp_path / "root")}}
    assert find_run_checkpoint(no_logger_config, "last") == no_logger
    with pytest.raises(UserInputError, match="no checkpoint matches"):
        find_run_checkpoint({"trainer": {"default_root_dir": str(tmp_path / "nowhere")}}, "last")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data.env_id", "CarRacingState-v0", "--ckpt_path", "CKPT"], "checkpoint observation shape (3,) != "),
        (["--model.gamme", "0.9"], "unknown option --model.gamme (did you mean --model.gamma?)"),
    ],
    ids=["shape-mismatch", "unknown-option"],
)
def test_a_real_process_prints_exactly_one_line(args, message, real_ckpt, tmp_path, cli_env):
    """Logging (e.g. "Seed set to 0") and usage text would show in a real terminal, not in capsys."""
    args = [str(real_ckpt) if a == "CKPT" else a for a in args]
    out = subprocess.run(
        [sys.executable, "-m", "td3_lightning", "fit", "--config", "pendulum.yaml", *args],
        cwd=tmp_path, env={**cli_env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"error: {message}"), out.stderr
    assert out.stdout == "" and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------- --ckpt_path best, the default of test
def test_test_without_ckpt_path_takes_the_newest_best_checkpoint(real_ckpt, tmp_path, monkeypatch, lightning_log):
    import json

    run = real_ckpt.parent
    best = sorted(run.glob("best-step*.ckpt"))
    assert len(best) == 1  # the fit's best validation checkpoint (top 1 by val/return)
    monkeypatch.chdir(tmp_path)
    older = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "best-step30.ckpt"
    newer = tmp_path / "lightning_logs" / "version_1" / "checkpoints" / best[0].name
    for path, age in [(older, 100), (newer, 0)]:
        path.parent.mkdir(parents=True)
        shutil.copy(best[0], path)
        os.utime(path, ns=(best[0].stat().st_mtime_ns - age * 10**9,) * 2)
    shutil.copy(real_ckpt, older.parent / "last.ckpt")  # newest of all files, but not a best checkpoint
    main(["test", *RUN, "--data.test_episodes", "2"])
    out = lightning_log.text
    ours = [line for line in out.splitlines() if str(newer) in line and not re.search("Restoring|Loaded", line)]
    assert len(ours) == 1 and ours[0].endswith(f"checkpoint: {newer} (--ckpt_path best, the default of test)")
    config = yaml.safe_load((tmp_path / "lightning_logs" / "version_2" / "config.yaml").read_text())
    assert config["ckpt_path"] == str(newer)
    results = json.loads((tmp_path / "lightning_logs" / "version_2" / "test_results.json").read_text())
    assert results["test/episodes"] == 2.0


def test_test_without_any_best_checkpoint_says_what_to_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _error_line(["test", *RUN], capsys)
    assert err == (
        f"error: --ckpt_path best: no checkpoint matches {tmp_path}/lightning_logs/*/checkpoints/best-step*.ckpt; "
        "pass a checkpoint file to --ckpt_path"
    )
    assert list(tmp_path.iterdir()) == []


def test_test_after_a_fit_with_another_checkpoint_filename_names_the_checkpoint_and_the_run_config(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "lightning_logs" / "version_0"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "mine-20.ckpt").write_bytes(b"")  # fit --checkpoint.filename 'mine-{step}'
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"")
    (folder / "config.yaml").write_text("checkpoint:\n  filename: mine-{step}\n")
    err = _error_line(["test", *RUN], capsys)
    assert err == (
        f"error: --ckpt_path best: no checkpoint matches {tmp_path}/lightning_logs/*/checkpoints/best-step*.ckpt; "
        f"the newest checkpoint there is {folder}/checkpoints/mine-20.ckpt, named by another checkpoint.filename: "
        f"pass it to --ckpt_path, or give --config {folder}/config.yaml (that run's options)"
    )
    assert sorted(p.name for p in folder.rglob("*")) == ["checkpoints", "config.yaml", "last.ckpt", "mine-20.ckpt"]


def test_last_and_best_after_a_fit_with_its_own_checkpoint_dirpath_name_it(tmp_path, monkeypatch, capsys):
    from td3_lightning.export import main as export_main

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "lightning_logs" / "version_0"
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("checkpoint:\n  dirpath: ck\n")  # fit --checkpoint.dirpath ck
    (tmp_path / "ck").mkdir()
    for name in ("last.ckpt", "best-step20.ckpt"):
        (tmp_path / "ck" / name).write_bytes(b"")
    err = _error_line(["test", *RUN, "--ckpt_path", "last"], capsys)
    assert err == (
        f"error: --ckpt_path last: no checkpoint matches {tmp_path}/lightning_logs/*/checkpoints/last*.ckpt; the run "
        f"of {folder}/config.yaml keeps its checkpoints in ck (its checkpoint.dirpath): add --checkpoint.dirpath ck, "
        "or pass ck/last.ckpt to --ckpt_path")
    with pytest.raises(SystemExit):  # export has no --checkpoint.dirpath: only the file is named
        export_main(["--out", "p.ckpt"])
    assert capsys.readouterr().err.strip() == (
        f"error: --ckpt_path best: no checkpoint matches {tmp_path}/lightning_logs/*/checkpoints/best-step*.ckpt; "
        f"the run of {folder}/config.yaml keeps its checkpoints in ck (its checkpoint.dirpath): pass "
        "ck/best-step20.ckpt to --ckpt_path")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["best-step20.ckpt", "ck", "config.yaml", "last.ckpt",
                                                           "lightning_logs", "version_0"]


def test_export_defaults_to_the_newest_best_checkpoint(real_ckpt, tmp_path, monkeypatch, capsys):
    from td3_lightning.export import main as export_main

    best = next(real_ckpt.parent.glob("best-step*.ckpt"))
    monkeypatch.chdir(real_ckpt.parents[3])
    export_main(["--out", str(tmp_path / "policy.ckpt")])
    assert f"checkpoint: {best} (--ckpt_path best)" in capsys.readouterr().out
    slim = torch.load(tmp_path / "policy.ckpt", weights_only=True)
    assert slim["global_step"] == torch.load(best, weights_only=True)["global_step"] and "optimizer_states" not in slim
    export_main(["--ckpt_path", "null", "--out", str(tmp_path / "null.ckpt")])  # null: the default, as in test
    assert f"checkpoint: {best} (--ckpt_path best)" in capsys.readouterr().out
    assert torch.load(tmp_path / "null.ckpt", weights_only=True)["global_step"] == slim["global_step"]


def test_export_with_a_config_takes_that_configs_run(real_ckpt, tmp_path, monkeypatch, capsys):
    """Two runs of one env in one folder: export --config takes the best of the config's run, as test does; without
    it, the newest run's; with a checkpoint file, --config is refused."""
    from td3_lightning.export import main as export_main

    best = next(real_ckpt.parent.glob("best-step*.ckpt"))
    runs = tmp_path / "lightning_logs"
    for i, gamma in enumerate((0.9, 0.99)):  # version_1, the newest, at the default gamma
        folder = runs / f"version_{i}" / "checkpoints"
        folder.mkdir(parents=True)
        _edited(best, folder / best.name, lambda ckpt: ckpt["hyper_parameters"].update(gamma=gamma))
        os.utime(folder / best.name, (1e9 + i, 1e9 + i))
    (tmp_path / "mine.yaml").write_text("data: {env_id: Pendulum-v1}\nmodel: {gamma: 0.9}\n")
    (tmp_path / "split.yaml").write_text("data: {env_id: Pendulum-v1}\nmodel: model.yaml\n")
    (tmp_path / "model.yaml").write_text("hidden_dims: [1,\n")  # before: a yaml ParserError traceback
    monkeypatch.chdir(tmp_path)
    export_main(["--out", "newest.ckpt"])
    assert f"checkpoint: {runs / 'version_1/checkpoints' / best.name} (--ckpt_path best)" in capsys.readouterr().out
    export_main(["--config", "mine.yaml", "--out", "mine.ckpt"])
    assert f"checkpoint: {runs / 'version_0/checkpoints' / best.name} (--ckpt_path best)" in capsys.readouterr().out
    assert torch.load(tmp_path / "mine.ckpt", weights_only=True)["hyper_parameters"]["gamma"] == 0.9
    for args, message in ((["--config", "mine.yaml", "--ckpt_path", str(best)],
                           f"--config chooses the run that --ckpt_path best or last takes; with the file {best}, "
                           "leave --config out"),
                          (["--config", "nothere.yaml"], "config file not found: nothere.yaml; give a path to a YAML "
                           "file or a bundled config (ant_td7.yaml, "),
                          (["--config", "{model: {gamma: 0.9}}"], "--config {model: {gamma: 0.9}}: export reads a "
                           "config file; give a YAML file or a bundled config's name"),
                          (["--config", "split.yaml"], "--config split.yaml: the file of its model section, "
                           "model.yaml, is not valid YAML (expected the node content, but found '<stream end>' at "
                           "line 2, column 1")):
        with pytest.raises(SystemExit) as info:
            export_main([*args, "--out", "refused.ckpt"])
        err = capsys.readouterr().err
        assert info.value.code == 2 and err.startswith(f"error: {message}") and err.count("\n") == 1
        assert not (tmp_path / "refused.ckpt").exists()


def test_a_checkpoint_of_other_env_kwargs_names_the_ones_it_was_trained_with(tmp_path, monkeypatch, capsys):
    """A car run with aid_features (45 features) tested without them (43): the error says which kwargs to give,
    from the full checkpoint and from its slim export alike."""
    from td3_lightning.checkpointing import slim_checkpoint

    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "car.yaml", "--trainer.max_steps", "4", "--data.warmup_steps", "20",
          "--data.eval_episodes", "1", "--trainer.val_check_interval", "4", "--selection.episodes", "0",
          "--model.hidden_dims", "[8]", "--data.batch_size", "4", "--data.env_kwargs.aid_features", "true"])
    ckpt = next(tmp_path.glob("lightning_logs/version_0/checkpoints/last.ckpt"))
    slim = slim_checkpoint(ckpt, tmp_path / "slim.ckpt")
    for path in (ckpt, slim):
        err = _error_line(["test", "--config", "car.yaml", "--data.env_kwargs.aid_features", "false",
                           "--ckpt_path", str(path)], capsys)
        assert err == (f"error: checkpoint observation shape (45,) != CarRacingState-v0's (43,) ({path}); use the env "
                       "(data.env_id, data.env_kwargs) the checkpoint was trained on: it was trained on "
                       'CarRacingState-v0 with data.env_kwargs {action_repeat: 2, action_mode: "steer_throttle", '
                       "aid_features: true}; add --data.env_kwargs.aid_features true")


def test_the_shipped_state_driver_with_car_yaml_is_told_the_option_that_fits_it(tmp_path, monkeypatch, capsys):
    """car.yaml's env has the aid features; the shipped driver was trained without them."""
    monkeypatch.chdir(tmp_path)
    shipped = SHIPPED_DIR / "car_random_tracks.ckpt"
    err = _error_line(["test", "--config", "car.yaml", "--ckpt_path", str(shipped)], capsys)
    assert err == (f"error: checkpoint observation shape (43,) != CarRacingState-v0's (45,) ({shipped}); use the env "
                   "(data.env_id, data.env_kwargs) the checkpoint was trained on: it was trained on CarRacingState-v0 "
                   'with data.env_kwargs {action_repeat: 2, action_mode: "steer_throttle"}; '
                   "add --data.env_kwargs.aid_features false")
    assert list(tmp_path.iterdir()) == []


class TupleDefaultEnv(gym.Env):
    def __init__(self, z_range: tuple[float, float] = (0.8, 2.0), name: str = "walker") -> None:
        self.z_range, self.name = z_range, name


def test_trained_on_gives_the_overrides_back_to_the_checkpoint_s_env():
    from td3_lightning.envs import trained_on

    facts = ("CarRacingState-v0", {"action_repeat": 2, "action_mode": "steer_throttle"})
    said = (': it was trained on CarRacingState-v0 with data.env_kwargs {action_repeat: 2, '
            'action_mode: "steer_throttle"}')
    # a differing value, a key the config adds (its default is the checkpoint's), a string given unquoted
    assert trained_on(facts, "CarRacingState-v0", {"action_repeat": 4, "action_mode": "steer_throttle"}) == (
        said + "; add --data.env_kwargs.action_repeat 2")
    assert trained_on(facts, "CarRacingState-v0", {"action_repeat": 2, "action_mode": "carracing"}) == (
        said + "; add --data.env_kwargs.action_mode steer_throttle")
    assert trained_on(facts, "CarRacingState-v0", {"action_repeat": 2, "action_mode": "steer_throttle",
                                                   "aid_features": True, "lookahead": 3}) == said  # lookahead: no such
    assert trained_on(facts, "CarRacingState-v0", {"aid_features": True}) == (
        said + "; add --data.env_kwargs.action_repeat 2 --data.env_kwargs.action_mode steer_throttle "
        "--data.env_kwargs.aid_features false")
    assert trained_on(facts, "Pendulum-v1", {}) == (
        said + "; use --config car_taught.yaml")  # the bundled config needing fewest: none (car.yaml: one)
    assert trained_on((facts[0], {**facts[1], "aid_features": True}), "Pendulum-v1", {}).endswith(
        "; use --config car.yaml")
    assert trained_on((None, None), "Pendulum-v1", {}) == ""
    # bundled configs of the same env and env_kwargs: the one whose model options the checkpoint's agree with
    hopper = ("Hopper-v5", {})
    plain = {"hidden_dims": [400, 300], "gamma": 0.99, "embedding_dim": 0}
    with_sale = {"hidden_dims": [256, 256], "gamma": 0.99, "embedding_dim": 256, "target_update_every": 250}
    assert trained_on(hopper, "Walker2d-v5", {}, plain).endswith("; use --config hopper.yaml")
    assert trained_on(hopper, "Walker2d-v5", {}, with_sale).endswith("; use --config hopper_td7.yaml")
    # the values as one shell word each that reads back as given; a tuple default equals the stored list
    gym.register("TupleDefault-v0", entry_point=TupleDefaultEnv)
    try:
        other = ("TupleDefault-v0", {"z_range": [0.5, 2.0], "name": "my walker"})
        assert trained_on(other, "TupleDefault-v0", {}).endswith(
            "; add --data.env_kwargs.z_range '[0.5,2.0]' --data.env_kwargs.name 'my walker'")
        assert trained_on(("TupleDefault-v0", {"z_range": [0.8, 2.0]}), "TupleDefault-v0", {}).endswith(
            ", as configured: TupleDefault-v0 itself has changed since")
    finally:
        del gym.registry["TupleDefault-v0"]
    assert trained_on(("CarRacingState-v0", {"action_mode": "true"}), "CarRacingState-v0", {}).endswith(
        """; add --data.env_kwargs.action_mode '"true"'""")


def test_the_same_shapes_from_other_env_kwargs_are_played_with_a_warning_that_names_the_overrides(
        tmp_path, monkeypatch, lightning_log):
    """The whole env_kwargs replaced by a dict without action_repeat: 43 features still, but another env."""
    monkeypatch.chdir(tmp_path)
    shipped = SHIPPED_DIR / "car_random_tracks.ckpt"
    args = ["test", "--config", "car.yaml", "--ckpt_path", str(shipped), "--data.test_episodes", "1"]
    with pytest.warns(UserWarning) as caught:
        main([*args, "--data.env_kwargs", "{aid_features: false, action_mode: steer_throttle}"])
    assert [str(w.message) for w in caught if "trained on" in str(w.message)] == [
        f"checkpoint {shipped} was trained on CarRacingState-v0 with other data.env_kwargs than this test's: add "
        "--data.env_kwargs.action_repeat 2 to play it as it was trained"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # as trained: no such warning
        main([*args, "--data.env_kwargs.aid_features", "false"])
    assert "reset_steps" not in lightning_log.text  # a training note, said by fit only


def test_a_resume_keeps_lap_priorities_and_is_told_other_data_options(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["fit", *RUN, "--data.sampler", "lap", "--data.priority_alpha", "0.5"])
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    resume = ["fit", *RUN, "--trainer.max_steps", "90", "--ckpt_path", "last"]
    assert _error_line(resume, capsys) == (  # the run's config without the command line's sampler
        f"error: checkpoint {last} holds LAP priorities (data.sampler lap, data.priority_alpha 0.5) that this "
        "fit's data.sampler uniform would drop: add --data.sampler lap --data.priority_alpha 0.5 to resume it, or "
        "train a new run")
    assert _error_line([*resume, "--data.sampler", "lap"], capsys).endswith(
        "that this fit's data.priority_alpha 0.4 would misread: add --data.sampler lap --data.priority_alpha 0.5 to "
        "resume it, or train a new run")
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]  # nothing written
    lap = ["--data.sampler", "lap", "--data.priority_alpha", "0.5"]
    with pytest.warns(UserWarning) as caught:
        main([*resume, *lap, "--data.batch_size", "32", "--data.n_step", "2"])
    assert [str(w.message) for w in caught if "other data options" in str(w.message)] == [
        f"checkpoint {last} was trained with other data options than this fit's: data.batch_size 32 (the "
        "checkpoint's: 16), data.n_step 2 (the checkpoint's: 1); add --data.batch_size 16 --data.n_step 1 to go on "
        "as it was trained"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["fit", *RUN, *lap, "--trainer.max_steps", "90", "--ckpt_path", str(last)])
    assert caught and not [w for w in caught if "other data options" in str(w.message)]  # as trained: not told
    from td3_lightning.data import changed_training_options

    uniform = types.SimpleNamespace(batch_size=16, warmup_steps=100, utd_ratio=1.0, n_step=1, sampler="uniform",
                                    priority_alpha=0.7)  # idle in both: not told
    assert changed_training_options({**vars(uniform), "priority_alpha": 0.4}, uniform, "x.ckpt") is None
    assert changed_training_options(None, uniform, "x.ckpt") is None  # a checkpoint from before they were recorded
    other_warmup = {**vars(uniform), "priority_alpha": 0.4, "warmup_steps": 300}
    assert changed_training_options(other_warmup, uniform, "x.ckpt", replay_size=300) is None  # past both warm-ups
    assert changed_training_options(other_warmup, uniform, "x.ckpt", replay_size=299) == (  # 300 adds a random step
        "checkpoint x.ckpt was trained with other data options than this fit's: data.warmup_steps 100 (the "
        "checkpoint's: 300); add --data.warmup_steps 300 to go on as it was trained")


def test_a_resume_is_told_other_training_envs_and_aids_where_its_checkpoint_records_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main(["fit", *RUN, "--data.train_env_kwargs", "{g: 9.0}", "--data.env_kwargs", "{max_episode_steps: 150}"])
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    recorded = torch.load(last, map_location="cpu", weights_only=False)["ReplayDataModule"]["options"]
    assert (recorded["num_envs"], recorded["train_env_kwargs"]) == (1, {"g": 9.0})  # the aids, not env_kwargs
    resume = ["fit", *RUN, "--data.env_kwargs", "{max_episode_steps: 150}", "--ckpt_path", str(last)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main([*resume, "--trainer.max_steps", "90", "--data.train_env_kwargs", '{"g": 9.0}'])  # as trained
    assert caught and not [w for w in caught if "other data options" in str(w.message)]
    with pytest.warns(UserWarning) as caught:
        main([*resume, "--trainer.max_steps", "120", "--data.num_envs", "2", "--data.vector_mode", "sync",
              "--data.train_env_kwargs", "{g: 11.0, max_episode_steps: 150}"])  # an aid equal to env_kwargs': none
    assert [str(w.message) for w in caught if "other data options" in str(w.message)] == [
        f"checkpoint {last} was trained with other data options than this fit's: data.num_envs 2 (the checkpoint's: "
        "1), data.train_env_kwargs {'g': 11.0} (the checkpoint's: {'g': 9.0}); add --data.num_envs 1 "
        """--data.train_env_kwargs '{"g": 9.0}' to go on as it was trained"""]
    from td3_lightning.data import changed_training_options

    ours = types.SimpleNamespace(batch_size=16, warmup_steps=100, utd_ratio=1.0, n_step=1, sampler="uniform",
                                 priority_alpha=0.4, num_envs=4, env_kwargs={}, train_env_kwargs={"g": 9.0})
    older = {name: getattr(ours, name) for name in ("batch_size", "warmup_steps", "utd_ratio", "n_step", "sampler",
                                                   "priority_alpha")}
    assert changed_training_options(older, ours, "x.ckpt") is None  # not recorded: not known, not told


def test_a_resume_its_replay_layout_cannot_continue_is_one_line_before_anything_is_written(tmp_path, monkeypatch,
                                                                                              capsys):
    monkeypatch.chdir(tmp_path)
    main(["fit", *RUN, "--data.n_step", "2"])
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    resume = ["fit", *RUN, "--data.n_step", "2", "--trainer.max_steps", "90", "--ckpt_path", "last"]
    assert _error_line([*resume, "--data.num_envs", "2"], capsys) == (  # before: a ValueError traceback
        f"error: cannot resume {last}: the checkpoint's replay buffer holds the rows of 1 env(s) side by side, this "
        "run steps 2: n-step sums would follow the wrong rows; set data.num_envs to 1 (or data.n_step to 1)")
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]  # nothing written
    from td3_lightning.data import ReplayDataModule

    dm = ReplayDataModule("Pendulum-v1", buffer_size=5000, warmup_steps=100, n_step=2, num_envs=2)
    dm.buffer = dm._make_buffer(torch.device("cpu"))  # a Python user's trainer.fit restores without the CLI's check
    state = torch.load(last, weights_only=True)["ReplayDataModule"]
    with pytest.raises(UserInputError, match=r"^cannot resume: the checkpoint's replay buffer holds the rows of 1 "):
        dm.load_state_dict(state)


@pytest.mark.parametrize("kwargs, error", [
    ("{aid_features: maybe}", "error: data.env_kwargs.aid_features 'maybe': a value that 'CarRacingState-v0' "
                              "refuses: aid_features must be true or false, got 'maybe'; fix it"),
    ("{action_repeat: 0}", "error: data.env_kwargs.action_repeat 0: a value that 'CarRacingState-v0' refuses: "
                           "action_repeat must be an integer >= 1, got 0; fix it"),
])
def test_a_value_the_env_refuses_is_one_line(kwargs, error, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _error_line(["fit", "--config", "car.yaml", "--data.env_kwargs", kwargs], capsys) == error
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, error", [
    (["--config", "pendulum.yaml", "--data.env_kwargs.g", "abc"],
     "error: data.env_kwargs.g 'abc': 'Pendulum-v1' takes a number there (default 10.0); fix it"),
    (["--config", "car.yaml", "--data.train_env_kwargs.off_road_penalty", "abc"],
     "error: data.train_env_kwargs.off_road_penalty 'abc': 'CarRacingState-v0' takes a number there (default 0.0); "
     "fix it"),
    (["--config", "car.yaml", "--data.env_kwargs.track_seed", "abc"],  # int | None = None: the annotation says
     "error: data.env_kwargs.track_seed 'abc': 'CarRacingState-v0' takes a number there (default None); fix it"),
    (["--config", "car_taught.yaml", "--data.train_env_kwargs.max_stall_frames", "abc"],
     "error: data.train_env_kwargs.max_stall_frames 'abc': 'CarRacingState-v0' takes a number there (default None); "
     "fix it"),
    (["--config", "car.yaml", "--data.train_env_kwargs.recovery_starts", "abc"],  # the env's TypeError names no key
     "error: data.train_env_kwargs.recovery_starts 'abc': 'CarRacingState-v0' takes a number there (default 0.0); "
     "fix it"),
])
def test_an_env_keyword_of_another_kind_than_its_default_is_one_line(args, error, tmp_path, monkeypatch, capsys):
    """Pendulum takes any g and fails at its first step; the car env's float('abc') names no keyword, nor does its
    int('abc') of a keyword whose default is None."""
    monkeypatch.chdir(tmp_path)
    assert _error_line(["fit", *args], capsys) == error
    assert list(tmp_path.iterdir()) == []


def test_an_env_keywords_kind_is_what_its_annotation_names_else_its_defaults():
    from td3_lightning.envs import _default_kinds

    assert _default_kinds("Pendulum-v1") == {"render_mode": ("text", None), "g": ("a number", 10.0)}  # Optional[str]
    car = _default_kinds("CarRacingState-v0")
    assert car["track_seed"] == ("a number", None) and car["aid_features"] == ("true or false", False)  # int | None
    pytest.importorskip("mujoco")
    ant = _default_kinds("Ant-v5")
    assert ant["main_body"] == (None, 1) and ant["camera_id"] == ("a number", None)  # Union[int, str]: any


def test_an_env_keyword_annotated_with_several_types_takes_each():
    from td3_lightning.envs import make_env

    pytest.importorskip("mujoco")
    make_env("Ant-v5", {"main_body": "torso"}).close()  # Union[int, str] = 1: text is fine


def test_a_window_without_a_display_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    err = _error_line(["fit", "--config", "pendulum.yaml", "--data.env_kwargs", "{render_mode: human}"], capsys)
    assert err == ("error: data.env_kwargs.render_mode human opens a window, and this machine has no display "
                   "(DISPLAY is unset); leave render_mode unset, or record videos with data.record_val / "
                   "data.record_test")
    assert list(tmp_path.iterdir()) == []


def test_a_misspelt_env_keyword_is_told_the_closest_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    err = _error_line(["fit", "--config", "car.yaml", "--data.env_kwargs.aid_feature", "true"], capsys)
    assert "got an unexpected keyword argument 'aid_feature' (did you mean data.env_kwargs.aid_features?); " in err


def test_a_training_env_keyword_at_fault_is_named_alone(tmp_path, monkeypatch, capsys):
    """data.train_env_kwargs is merged over data.env_kwargs: the error names the key at fault, not the merged dict."""
    monkeypatch.chdir(tmp_path)
    err = _error_line(["fit", "--config", "car.yaml", "--data.train_env_kwargs.max_stall_frames", "-5"], capsys)
    assert err == ("error: data.train_env_kwargs.max_stall_frames -5: a value that 'CarRacingState-v0' refuses: "
                   "max_stall_frames must be None or an integer >= 1, got -5; fix it")
    err = _error_line(["fit", "--config", "car.yaml", "--data.train_env_kwargs.max_stal_frames", "5"], capsys)
    assert err.startswith("error: data.train_env_kwargs.max_stal_frames not accepted by 'CarRacingState-v0': "
                          "CarRacingState.__init__() got an unexpected keyword argument 'max_stal_frames' "
                          "(did you mean data.train_env_kwargs.max_stall_frames?); CarRacingState-v0 takes ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra", [[], ["--data.privileged_critic", "true"]])
def test_the_pixel_driver_with_the_state_config_names_the_observation_shape(extra, tmp_path, monkeypatch, capsys):
    """The real cause, not what follows from it (a teacher without a privileged observation, an env without one)."""
    monkeypatch.chdir(tmp_path)
    pixels = SHIPPED_DIR / "car_pixels.ckpt"
    err = _error_line(["test", "--config", "car.yaml", "--ckpt_path", str(pixels), *extra], capsys)
    assert err == (f"error: checkpoint observation shape (4, 40, 40) != CarRacingState-v0's (45,) ({pixels}); "
                   "use the env (data.env_id, data.env_kwargs) the checkpoint was trained on: it was trained on "
                   'CarRacingPixels-v0 with data.env_kwargs {action_repeat: 2, action_mode: "steer_throttle", '
                   "grayscale: true, resize: 40, frame_stack: 4}; use --config car_pixels.yaml")
    assert list(tmp_path.iterdir()) == []


def test_the_pixel_driver_with_a_privileged_state_of_another_size_names_it(tmp_path, monkeypatch, capsys):
    """The same frames, but the critics' privileged state grew (aid_features): one line naming the override, not
    load_state_dict's size mismatch."""
    monkeypatch.chdir(tmp_path)
    pixels = SHIPPED_DIR / "car_pixels.ckpt"
    err = _error_line(["test", "--config", "car_pixels.yaml", "--ckpt_path", str(pixels),
                       "--data.env_kwargs.aid_features", "true"], capsys)
    assert err == (f"error: checkpoint privileged observation shape (43,) != CarRacingPixels-v0's (45,) ({pixels}); "
                   "use the env (data.env_id, data.env_kwargs) the checkpoint was trained on: it was trained on "
                   'CarRacingPixels-v0 with data.env_kwargs {action_repeat: 2, action_mode: "steer_throttle", '
                   "grayscale: true, resize: 40, frame_stack: 4}; add --data.env_kwargs.aid_features false")
    assert list(tmp_path.iterdir()) == []


def test_a_privileged_critic_on_one_side_only_is_one_line_with_nothing_said_before(tmp_path, monkeypatch, capsys):
    """The checkpoint's critics read the privileged state; the configured run has none. Its warning of an option
    the checkpoint replaces would come first: it is said only once every check has passed."""
    monkeypatch.chdir(tmp_path)
    ckpt = torch.load(SHIPPED_DIR / "car_pixels.ckpt", weights_only=True)
    ckpt["hyper_parameters"]["teacher"] = None
    torch.save(ckpt, tmp_path / "pixels.ckpt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        err = _error_line(["test", "--config", "car_pixels.yaml", "--ckpt_path", "pixels.ckpt",
                           "--data.privileged_critic", "false", "--model.gamma", "0.5"], capsys)
    assert err == ("error: checkpoint pixels.ckpt was trained with data.privileged_critic true (its critics read a "
                   "privileged state); set data.privileged_critic true")
    assert not [w for w in caught if "plays the checkpoint's model" in str(w.message)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pixels.ckpt"]


def _as_the_only_run(ckpt: Path, folder: Path, monkeypatch) -> None:
    """``folder`` (made the current folder) holds one run, whose last.ckpt is a copy of ``ckpt``."""
    checkpoints = folder / "lightning_logs" / "version_0" / "checkpoints"
    checkpoints.mkdir(parents=True)
    shutil.copy(ckpt, checkpoints / "last.ckpt")
    monkeypatch.chdir(folder)


def test_a_bad_value_beside_a_checkpoint_search_is_one_line_with_nothing_said_before(real_ckpt, tmp_path,
                                                                                       monkeypatch, capsys):
    """No run in the folder was trained with pendulum.yaml's hidden_dims: the search's warning of the run it plays
    instead is said only once every check has passed, so a bad value is the one line."""
    _as_the_only_run(real_ckpt, tmp_path, monkeypatch)
    for subcommand in ("validate", "test"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert _error_line([subcommand, "--config", "pendulum.yaml", "--ckpt_path", "last", "--model.gamma", "2"],
                               capsys) == "error: model.gamma must be in [0, 1], got 2.0"
        assert [str(w.message) for w in caught] == []
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["checkpoints", "last.ckpt", "lightning_logs", "version_0"]


def test_a_model_option_the_search_names_is_not_named_again_as_unused(real_ckpt, tmp_path, monkeypatch):
    """validate with --model.gamma 0.9 where no run was trained so: the search's warning names it with the played
    run's value; the warning of given options the checkpoint replaces does not repeat it."""
    _as_the_only_run(real_ckpt, tmp_path, monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["validate", "--config", "pendulum.yaml", "--ckpt_path", "last", "--model.gamma", "0.9",
              "--data.eval_episodes", "1"])
    named = [str(w.message) for w in caught if "model.gamma" in str(w.message)]
    assert len(named) == 1 and named[0].startswith("--ckpt_path last: no Pendulum-v1 run") and named[0].endswith(
        "model.gamma 0.98 (asked: 0.9)"), named


class BrokenEnv(gym.Env):
    def __init__(self, size: int = 1) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        raise ValueError("the model file is corrupt")  # the env's own failure, not about the kwargs


def test_make_env_turns_only_the_env_s_refusal_of_a_given_value_into_one_line():
    from td3_lightning.envs import make_env

    gym.register("BrokenForTest-v0", entry_point=BrokenEnv)
    try:
        with pytest.raises(UserInputError) as info:
            make_env("BrokenForTest-v0", {"size": 0})
        assert str(info.value) == ("data.env_kwargs.size 0: a value that 'BrokenForTest-v0' refuses: size must "
                                   "be >= 1, got 0; fix it")
        with pytest.raises(ValueError, match="the model file is corrupt"):  # not the user's: its own traceback
            make_env("BrokenForTest-v0", {"size": 2})
    finally:
        del gym.registry["BrokenForTest-v0"]
    with pytest.raises(UserInputError) as info:  # gymnasium.make's own keyword is not the misspelt one
        make_env("CarRacingState-v0", {"max_episode_steps": 500, "aid_feature": True})
    assert "(did you mean data.env_kwargs.aid_features?)" in str(info.value)


def test_the_pixel_env_s_keywords_include_those_it_passes_to_the_state_env():
    from td3_lightning.envs import env_overrides, keyword_defaults

    defaults = keyword_defaults("CarRacingPixels-v0")
    assert (defaults["frame_stack"], defaults["action_repeat"], defaults["aid_features"]) == (4, 1, False)
    trained = {"action_repeat": 2, "action_mode": "steer_throttle", "grayscale": True, "resize": 40, "frame_stack": 4}
    assert env_overrides(trained, "CarRacingPixels-v0", {**trained, "action_repeat": 1, "domain_randomize": True}) == [
        "--data.env_kwargs.action_repeat 2", "--data.env_kwargs.domain_randomize false"]


def test_a_missing_last_ckpt_file_is_told_of_ckpt_path_last(tmp_path):
    from td3_lightning.errors import check_checkpoint_file

    with pytest.raises(UserInputError) as info:
        check_checkpoint_file(tmp_path / "last.ckpt")
    assert str(info.value) == (f"checkpoint file not found: {tmp_path / 'last.ckpt'}; pass an existing .ckpt file to "
                               "--ckpt_path (or --ckpt_path last: the newest last checkpoint of the runs here)")
    with pytest.raises(UserInputError) as info:
        check_checkpoint_file(tmp_path / "run.ckpt")
    assert str(info.value) == (f"checkpoint file not found: {tmp_path / 'run.ckpt'}; pass an existing .ckpt file to "
                               "--ckpt_path")
    for typed, meant in (("lats", "last"), ("bset", "best"), ("Last", "last"), ("BEST", "best")):  # misspelt: meant
        with pytest.raises(UserInputError) as info:
            check_checkpoint_file(typed)
        assert str(info.value) == (f"checkpoint file not found: {typed}; pass an existing .ckpt file to --ckpt_path "
                                   f"(or --ckpt_path {meant}: the newest {meant} checkpoint of the runs here)")
    for typed in ("run", "runs/lats", "lats.ckpt"):  # not a name of last or best
        with pytest.raises(UserInputError) as info:
            check_checkpoint_file(typed)
        assert str(info.value).endswith("pass an existing .ckpt file to --ckpt_path")


def _without(ckpt: Path, out: Path, group: str, key: str) -> Path:
    """A copy of ``ckpt`` as a version before option ``key`` existed would write it: the key is not recorded."""
    loaded = torch.load(ckpt, map_location="cpu", weights_only=False)
    recorded = loaded["hyper_parameters"] if group == "model" else loaded["ReplayDataModule"]["options"]
    del recorded[key]
    torch.save(loaded, out)
    return out


def _another_value(name: str, default):
    """A valid value of model option ``name`` other than its default."""
    special = {"actor_q": "mean", "encoder": "none", "exploration_noise_final": 0.05, "schedule_steps": 10,
               "teacher": "td3_lightning/checkpoints/car_taught.ckpt", "hidden_dims": [8], "critic_range": [-1.0, 1.0],
               "critic_bins": 2, "critic_hidden_dims": [8]}
    if name in special:
        return special[name]
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1 if isinstance(default, int) else round(default / 2 + 0.01, 6)
    raise AssertionError(f"add a value other than the default {default!r} of the new option model.{name} here")


def test_a_resume_reads_every_model_option_its_checkpoint_predates_as_the_default(real_ckpt, tmp_path, monkeypatch,
                                                                                  capsys):
    """A checkpoint written before an option existed trained with its default: a resume that sets the option to
    another value is refused like any other changed model option, for every option the module has."""
    from td3_lightning.cli import LINKED_FROM_DATA, RESUME_MAY_CHANGE
    from td3_lightning.declarations import signature_defaults
    from td3_lightning.module import TD3
    from td3_lightning.user_input import shown

    monkeypatch.chdir(tmp_path)
    options = {k: v for k, v in signature_defaults(TD3).items() if k not in RESUME_MAY_CHANGE + LINKED_FROM_DATA}
    assert len(options) >= 30 and {"actor_q", "value_clipping", "embedding_dim", "policy_checkpoints"} <= set(options)
    resume = [a for a in RUN if a not in ("--model.hidden_dims", "[16, 16]")] + ["--trainer.max_steps", "90"]
    for key, default in options.items():
        old = _without(real_ckpt, tmp_path / f"without_{key}.ckpt", "model", key)
        other = _another_value(key, default)
        value = other if isinstance(other, str) else yaml.safe_dump(other, default_flow_style=True).strip()
        assert _error_line(["fit", *resume, "--ckpt_path", str(old), f"--model.{key}", value], capsys) == (
            f"error: a resumed run keeps the model options of its checkpoint ({old}): --model.{key} {shown(other)} "
            f"(the checkpoint's: {shown(default)}); drop it, or train a new run (without --ckpt_path)"), key
    assert not (tmp_path / "lightning_logs").exists()  # nothing written


def test_a_checkpoint_without_an_option_resumes_with_its_default(real_ckpt, tmp_path, monkeypatch, capsys):
    """Without the option (or with it in a config file, which a checkpoint's options replace) the resumed run trains
    with the default that the checkpoint was trained with, and its new checkpoint records it."""
    monkeypatch.chdir(tmp_path)
    old = _without(real_ckpt, tmp_path / "without_actor_q.ckpt", "model", "actor_q")
    (tmp_path / "mean.yaml").write_text("model:\n  actor_q: mean\n")
    main(["fit", *RUN, "--config", "mean.yaml", "--trainer.max_steps", "90", "--ckpt_path", str(old)])
    resumed = torch.load(tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt", weights_only=False)
    assert resumed["global_step"] == 90 and resumed["hyper_parameters"]["actor_q"] == "first"
    assert yaml.safe_load((tmp_path / "lightning_logs/version_0/config.yaml").read_text())["model"]["actor_q"] == \
        "first"


def test_a_resume_warns_of_a_data_option_its_checkpoint_predates(real_ckpt, tmp_path, monkeypatch, capsys):
    """A data option that the checkpoint does not record is read as its default: another value is told."""
    from td3_lightning.data import TRAINING_OPTIONS, changed_training_options

    monkeypatch.chdir(tmp_path)
    old = _without(real_ckpt, tmp_path / "without_warmup_steps.ckpt", "data", "warmup_steps")
    with pytest.warns(UserWarning) as caught:  # RUN's warm-up, 100: not the default's 10000
        main(["fit", *RUN, "--trainer.max_steps", "90", "--ckpt_path", str(old)])
    assert [str(w.message) for w in caught if "other data options" in str(w.message)] == [
        f"checkpoint {old} was trained with other data options than this fit's: data.warmup_steps 100 (the "
        "checkpoint's: 10000); add --data.warmup_steps 10000 to go on as it was trained"]
    ours = types.SimpleNamespace(batch_size=32, warmup_steps=5, utd_ratio=2.0, n_step=3, sampler="lap",
                                 priority_alpha=0.4)
    defaults = {"batch_size": 256, "warmup_steps": 10000, "utd_ratio": 1.0, "n_step": 1, "sampler": "uniform"}
    assert set(defaults) | {"priority_alpha"} == set(TRAINING_OPTIONS)
    for key, default in defaults.items():  # each recorded as ours but this one: told with its default
        recorded = {k: v for k, v in vars(ours).items() if k != key}
        assert changed_training_options(recorded, ours, "x.ckpt") == (
            f"checkpoint x.ckpt was trained with other data options than this fit's: data.{key} {getattr(ours, key)} "
            f"(the checkpoint's: {default}); add --data.{key} {default} to go on as it was trained"), key
    lap = {**vars(ours), "priority_alpha": 0.5}  # LAP's priorities with the default exponent 0.4: refused
    with pytest.raises(UserInputError, match=r"holds LAP priorities \(data.sampler lap, data.priority_alpha 0.4\)"):
        changed_training_options({k: v for k, v in vars(ours).items() if k != "priority_alpha"},
                                 types.SimpleNamespace(**lap), "x.ckpt")


def test_last_and_best_take_the_newest_checkpoint_of_the_configs_env(real_ckpt, tmp_path):
    """Runs of several envs in one folder: a config's --ckpt_path last|best never takes another env's checkpoint."""
    for version, env in (("version_0", "Pendulum-v1"), ("version_1", "MountainCarContinuous-v0")):
        folder = tmp_path / "lightning_logs" / version / "checkpoints"
        folder.mkdir(parents=True)
        loaded = torch.load(real_ckpt, weights_only=False)
        loaded["ReplayDataModule"]["env_id"] = env
        torch.save(loaded, folder / "last.ckpt")
        os.utime(folder / "last.ckpt", (1e9 + len(version), 1e9 + int(version[-1])))  # version_1 is the newest
    config = {"trainer": {"default_root_dir": str(tmp_path)}, "checkpoint": {}}
    runs = tmp_path / "lightning_logs"
    assert find_run_checkpoint({**config, "data": {"env_id": "Pendulum-v1"}}, "last") == \
        runs / "version_0/checkpoints/last.ckpt"
    assert find_run_checkpoint(config, "last") == runs / "version_1/checkpoints/last.ckpt"  # export: no env named
    with pytest.raises(UserInputError) as caught:
        find_run_checkpoint({**config, "data": {"env_id": "CarRacingState-v0"}}, "last", fit=True)
    assert str(caught.value) == (
        f"--ckpt_path last: no checkpoint that matches {runs}/*/checkpoints/last*.ckpt is of CarRacingState-v0 (the "
        f"newest, {runs}/version_1/checkpoints/last.ckpt, is of MountainCarContinuous-v0): pass a checkpoint of "
        "CarRacingState-v0 to --ckpt_path, or give the --trainer.default_root_dir its run was trained in, or leave "
        "--ckpt_path out to start a new run")


def test_last_and_best_take_the_newest_run_of_the_configs_env_kwargs_where_one_is(real_ckpt, tmp_path):
    """Two configs of one env in one folder (car.yaml and car_track123.yaml): each takes its own run's checkpoint;
    with env_kwargs no run was trained with, the newest of the env (its resume warns of the difference)."""
    runs = tmp_path / "lightning_logs"
    trained = (("version_0", "Pendulum-v1", {"g": 9.81, "render_mode": None}), ("version_1", "Pendulum-v1", {}),
               ("version_2", "MountainCarContinuous-v0", {"g": 9.81, "render_mode": None}))
    for i, (version, env, kwargs) in enumerate(trained):
        folder = runs / version / "checkpoints"
        folder.mkdir(parents=True)
        loaded = torch.load(real_ckpt, weights_only=False)
        loaded["ReplayDataModule"].update(env_id=env, env_kwargs=kwargs)
        torch.save(loaded, folder / "last.ckpt")
        os.utime(folder / "last.ckpt", (1e9 + i, 1e9 + i))  # version_2 is the newest, then version_1
    config = {"trainer": {"default_root_dir": str(tmp_path)}, "checkpoint": {}}

    def last(env_kwargs):
        return find_run_checkpoint({**config, "data": {"env_id": "Pendulum-v1", "env_kwargs": env_kwargs}}, "last")

    assert last({"render_mode": None, "g": 9.81}) == runs / "version_0/checkpoints/last.ckpt"  # any key order
    assert last(None) == runs / "version_1/checkpoints/last.ckpt"
    assert last({}) == runs / "version_1/checkpoints/last.ckpt"
    assert last({"g": 5.0}) == runs / "version_1/checkpoints/last.ckpt"  # no run of these: the newest of the env


def test_last_and_best_take_the_newest_run_of_the_configs_model_options_where_one_is(real_ckpt, tmp_path):
    """walker2d.yaml and walker2d_td7.yaml in one folder: each config's --ckpt_path last takes its own run's, not the
    newest of the env (options a resume may change do not count); with model options no run has, the newest."""
    runs = tmp_path / "lightning_logs"
    for i, hidden in enumerate(([8], [16])):
        folder = runs / f"version_{i}" / "checkpoints"
        folder.mkdir(parents=True)
        loaded = torch.load(real_ckpt, weights_only=False)
        loaded["hyper_parameters"]["hidden_dims"] = hidden
        torch.save(loaded, folder / "last.ckpt")
        os.utime(folder / "last.ckpt", (1e9 + i, 1e9 + i))  # version_1 is the newest
    env_id = torch.load(real_ckpt, weights_only=False)["ReplayDataModule"]["env_id"]
    config = {"trainer": {"default_root_dir": str(tmp_path)}, "checkpoint": {}, "data": {"env_id": env_id}}

    def last(**model):
        return find_run_checkpoint(config, "last", model_options=model)

    assert last(hidden_dims=[8]) == runs / "version_0/checkpoints/last.ckpt"
    assert last(hidden_dims=(8,)) == runs / "version_0/checkpoints/last.ckpt"
    assert last(hidden_dims=[16]) == runs / "version_1/checkpoints/last.ckpt"
    with pytest.warns(UserWarning) as told:  # test or validate: said, as what is played is not what was asked for
        assert last(hidden_dims=[32], gamma=0.9) == runs / "version_1/checkpoints/last.ckpt"
    assert [str(w.message) for w in told] == [  # only what the played run differs in
        f"--ckpt_path last: no {env_id} run in {runs}/*/checkpoints/last*.ckpt was trained with the model options "
        f"asked for; the newest of the {env_id} runs most like them is played, with its own: model.hidden_dims [16] "
        "(asked: [32]), model.gamma 0.98 (asked: 0.9)"]
    with pytest.warns(UserWarning) as told:  # gamma 0.98 is the played run's: not named
        last(hidden_dims=[8], gamma=0.98, policy_freq=3)
    assert str(told[0].message).endswith(
        "with its own: model.hidden_dims [16] (asked: [8]), model.policy_freq 2 (asked: 3)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        find_run_checkpoint(config, "last", model_options={"gamma": 0.9}, fit=True)  # its resume refuses them
    assert last(hidden_dims=[32]) == runs / "version_1/checkpoints/last.ckpt"  # no run of these: the newest
    assert last() == runs / "version_1/checkpoints/last.ckpt"
    assert last(hidden_dims=[8], embedding_dim=8) == runs / "version_1/checkpoints/last.ckpt"  # an option not alike


def test_an_option_set_back_to_its_default_takes_the_run_trained_so(real_ckpt, tmp_path):
    """humanoid_crossq.yaml's runs with its 101 bins and with --model.critic_bins 0 in one folder: the command that
    sets the default back takes its own run's, not the newest (whose checkpoint its resume would refuse), whatever
    idle critic_range either recorded, and a run that predates the option counts as trained at its default."""
    from td3_lightning.checkpointing import options_of_the_run
    from td3_lightning.declarations import signature_defaults
    from td3_lightning.module import TD3

    runs = tmp_path / "lightning_logs"
    env_id = torch.load(real_ckpt, weights_only=False)["ReplayDataModule"]["env_id"]
    config = {"trainer": {"default_root_dir": str(tmp_path)}, "checkpoint": {}, "data": {"env_id": env_id}}
    for scalar in ({"critic_bins": 0, "critic_range": [-100, 1200]}, {"critic_bins": 0, "critic_range": None}, {}):
        for i, options in enumerate((scalar, {"critic_bins": 101, "critic_range": [-100, 1200]})):  # 1: the newest
            folder = runs / f"version_{i}" / "checkpoints"
            folder.mkdir(parents=True, exist_ok=True)
            loaded = torch.load(real_ckpt, weights_only=False)
            loaded["hyper_parameters"].update(options)
            if not options:  # a checkpoint older than the option
                del loaded["hyper_parameters"]["critic_bins"], loaded["hyper_parameters"]["critic_range"]
            torch.save(loaded, folder / "last.ckpt")
            os.utime(folder / "last.ckpt", (1e9 + i, 1e9 + i))
        for given_range in ([-100, 1200], None):  # --model.critic_bins 0, with or without --model.critic_range null
            model = {**signature_defaults(TD3), "gamma": 0.98, "critic_bins": 0, "critic_range": given_range}
            away, at_defaults = options_of_the_run(model, signature_defaults(TD3))
            assert away == {"gamma": 0.98} and "critic_range" not in at_defaults  # idle: not compared
            assert find_run_checkpoint(config, "last", model_options=away,
                                       default_options={"critic_bins": 0}) == runs / "version_0/checkpoints/last.ckpt"
            assert find_run_checkpoint(config, "last", model_options=away) == runs / "version_1/checkpoints/last.ckpt"
        hlgauss = {"gamma": 0.98, "critic_bins": 101, "critic_range": [-100, 1200]}
        assert find_run_checkpoint(config, "last", model_options=hlgauss) == runs / "version_1/checkpoints/last.ckpt"


def test_a_teacher_is_the_same_option_however_its_file_is_named(tmp_path, monkeypatch):
    from td3_lightning.checkpointing import same_option

    monkeypatch.chdir(tmp_path)
    (tmp_path / "teacher.ckpt").write_bytes(b"x")
    assert same_option("teacher", str(tmp_path / "teacher.ckpt"), "teacher.ckpt")  # recorded absolute, given relative
    assert same_option("teacher", "td3_lightning/checkpoints/car_taught.ckpt",
                       str(Path(td3_lightning.__file__).parent / "checkpoints/car_taught.ckpt"))
    assert not same_option("teacher", str(tmp_path / "teacher.ckpt"), "other.ckpt")
    assert same_option("hidden_dims", [8, 8], (8, 8)) and not same_option("hidden_dims", [8, 8], [8])
    assert not same_option("gamma", 0.99, 0.98)


def test_a_configs_last_is_its_own_runs_and_with_default_options_the_newest_run(tmp_path, monkeypatch, lightning_log):
    """Through the command line: an older run trained with the config's gamma is resumed over a newer one; options a
    resume may change do not count; a command that sets nothing away from the defaults takes the newest run, one
    that sets gamma back to its default the run trained with it."""
    monkeypatch.chdir(tmp_path)
    tiny = ["--trainer.max_steps", "40", "--trainer.val_check_interval", "20", "--data.warmup_steps", "50",
            "--data.buffer_size", "2000", "--data.eval_episodes", "1", "--model.hidden_dims", "[8]",
            "--data.batch_size", "8", "--learning_curve.filename", "", "--data.tensorboard_video_every", "0"]
    main(["fit", *tiny, "--model.gamma", "0.9"])  # version_0
    main(["fit", *tiny])  # version_1, newer, gamma at its default
    main(["fit", *tiny, "--model.gamma", "0.9", "--model.reset_steps", "[1000]", "--ckpt_path", "last",
          "--trainer.max_steps", "60"])
    main(["test", *tiny, "--ckpt_path", "last", "--data.test_episodes", "1"])  # nothing set away: the newest
    main(["test", *tiny, "--model.gamma", "0.99", "--ckpt_path", "last", "--data.test_episodes", "1"])  # given back
    runs = tmp_path / "lightning_logs"
    said = [line.split("checkpoint: ", 1)[1] for line in lightning_log.text.splitlines() if "checkpoint: " in line]
    assert said == [f"{runs / 'version_0/checkpoints/last.ckpt'} (--ckpt_path last)",
                    f"{runs / 'version_2/checkpoints/last.ckpt'} (--ckpt_path last)",
                    f"{runs / 'version_1/checkpoints/last.ckpt'} (--ckpt_path last)"]
    assert torch.load(runs / "version_2/checkpoints/last.ckpt", weights_only=False)["global_step"] == 60


def test_the_best_checkpoints_leave_the_replay_to_last_ckpt(tmp_path, monkeypatch):
    """The best checkpoints by val/return are played and exported: only last.ckpt, which resumes, holds the buffer
    (unless no last.ckpt is written: then the best ones resume and keep it)."""
    monkeypatch.chdir(tmp_path)
    main(["fit", *RUN])
    folder = tmp_path / "lightning_logs/version_0/checkpoints"
    best = [p for p in folder.glob("best-step*.ckpt")]
    last = torch.load(folder / "last.ckpt", weights_only=False)
    assert len(best) == 1 and last["ReplayDataModule"]["replay"]["pos"] == 160  # 100 warm-up + 60 steps
    assert torch.load(best[0], weights_only=False)["ReplayDataModule"]["replay"] is None
    assert best[0].stat().st_size < (folder / "last.ckpt").stat().st_size
    main(["fit", *RUN, "--checkpoint.save_last", "false"])
    kept = next((tmp_path / "lightning_logs/version_1/checkpoints").glob("best-step*.ckpt"))
    assert torch.load(kept, weights_only=False)["ReplayDataModule"]["replay"]["pos"] > 100
    with pytest.warns(UserWarning, match=r"the checkpoint has no replay buffer \(a best checkpoint: its run's "
                                         r"last.ckpt holds it\): the buffer is refilled from scratch") as caught:
        main(["fit", *RUN, "--trainer.max_steps", "90", "--ckpt_path", str(best[0])])
    told = next(w for w in caught if "no replay buffer" in str(w.message))
    assert Path(told.filename).name == "data.py"  # the package's: printed as one `warning:` line


def test_a_checkpoint_without_hyperparameters_plays_with_the_configured_model(real_ckpt, tmp_path, monkeypatch):
    """No options recorded at all: nothing to read as predated, the configured model options build the networks."""
    monkeypatch.chdir(tmp_path)
    loaded = torch.load(real_ckpt, weights_only=False)
    del loaded["hyper_parameters"]
    torch.save(loaded, tmp_path / "nohp.ckpt")
    main(["test", "--config", "pendulum.yaml", "--model.hidden_dims", "[16, 16]", "--data.test_episodes", "1",
          "--ckpt_path", "nohp.ckpt"])
    assert (tmp_path / "lightning_logs/version_0/test_results.json").is_file()


def test_best_after_a_resume_is_the_best_of_the_whole_run(tmp_path, monkeypatch, lightning_log):
    """A resume writes into a folder of its own and keeps its own best from its first validation on; ``best`` is
    still the checkpoint with the run's best val/return, in whichever folder of the run it lies (by the scores the
    checkpoints record, as an uninterrupted run keeps it), the newer one among equals; also when the resume ran in
    another folder than the fit and the run has moved since."""
    monkeypatch.chdir(tmp_path)
    tiny = ["--trainer.max_steps", "40", "--trainer.val_check_interval", "20", "--data.warmup_steps", "50",
            "--data.buffer_size", "2000", "--data.eval_episodes", "1", "--model.hidden_dims", "[8]",
            "--data.batch_size", "8", "--learning_curve.filename", "", "--data.tensorboard_video_every", "0"]
    main(["fit", *tiny, "--trainer.default_root_dir", "sub"])  # paths recorded relative to tmp_path
    monkeypatch.chdir(tmp_path / "sub")
    main(["fit", *tiny, "--ckpt_path", "last", "--trainer.max_steps", "60"])  # relative to tmp_path/sub
    runs = tmp_path / "sub" / "lightning_logs"
    (first,), (second,) = (list((runs / v / "checkpoints").glob("best-step*.ckpt")) for v in ("version_0", "version_1"))
    state = next(s for s in torch.load(second, weights_only=False)["callbacks"].values() if "best_k_models" in s)
    assert state["mode"] == "max" and list(state["earlier_best_k_models"]) == [str(first)]  # recorded absolute

    def scored(earlier: float, own: float, mode: str | None = "max") -> None:  # the resumed run's record of both
        def edit(ckpt: dict) -> None:
            state = next(s for s in ckpt["callbacks"].values() if "best_k_models" in s)
            state["earlier_best_k_models"] = {k: torch.tensor(earlier) for k in state["earlier_best_k_models"]}
            state["best_k_models"] = {k: torch.tensor(own) for k in state["best_k_models"]}
            state["mode"] = mode
        mtime = second.stat().st_mtime_ns
        _edited(second, second, edit)
        os.utime(second, ns=(mtime, mtime))

    config = {"trainer": {}, "checkpoint": {}, "data": {"env_id": "Pendulum-v1"}}
    for earlier, own, mode, expected in [(-100.0, -300.0, "max", first), (-300.0, -100.0, "max", second),
                                         (-200.0, -200.0, "max", second), (float("nan"), -300.0, "max", second),
                                         (-300.0, -100.0, "min", first), (-100.0, -300.0, None, first)]:
        scored(earlier, own, mode)  # mode None: read from the key the callback's state is filed under
        assert find_run_checkpoint(config, "best") == expected, (earlier, own, mode)
    scored(-100.0, -300.0)
    main(["test", *tiny, "--data.test_episodes", "1"])
    assert lightning_log.text.count(f"checkpoint: {first} (--ckpt_path best, the default of test)") == 1
    shutil.move(tmp_path / "sub", tmp_path / "moved")
    monkeypatch.chdir(tmp_path)
    moved = {**config, "trainer": {"default_root_dir": str(tmp_path / "moved")}}
    assert find_run_checkpoint(moved, "best") == tmp_path / "moved/lightning_logs/version_0/checkpoints" / first.name
    earlier = tmp_path / "moved/lightning_logs/version_0/checkpoints" / first.name
    original, mtime = earlier.read_bytes(), earlier.stat().st_mtime_ns
    _edited(earlier, earlier, lambda ckpt: ckpt["ReplayDataModule"].update(env_kwargs={"g": 9.81}))
    os.utime(earlier, ns=(mtime, mtime))  # as if the resume had been given other env_kwargs than version_0's
    assert find_run_checkpoint(moved, "best") == tmp_path / "moved/lightning_logs/version_1/checkpoints" / second.name
    earlier.write_bytes(original)
    os.utime(earlier, ns=(mtime, mtime))
    assert find_run_checkpoint(moved, "best") == earlier
    earlier.unlink()  # a best checkpoint deleted by hand is not looked for
    assert find_run_checkpoint(moved, "best") == tmp_path / "moved/lightning_logs/version_1/checkpoints" / second.name
