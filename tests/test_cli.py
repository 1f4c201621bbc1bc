"""The command line end to end, and one clear line for every bad input."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from conftest import tiny_checkpoint

from td3_lightning.cli import main
from td3_lightning.user_input import CONFIG_DIR

TINY = [
    "--trainer.max_steps", "300", "--trainer.val_check_interval", "150", "--data.warmup_steps", "200",
    "--data.eval_episodes", "2", "--model.hidden_dims", "[32, 32]", "--trainer.logger.init_args.save_dir", ".",
]


def run_cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "td3_lightning", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def test_seed_everything_true_draws_a_seed_for_each_run_and_records_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    args = ["fit", "--config", "pendulum.yaml", "--seed_everything", "true", "--trainer.max_steps", "20",
            "--data.warmup_steps", "20", "--trainer.val_check_interval", "20", "--data.eval_episodes", "1"]
    for _ in range(2):
        main(args)
    monkeypatch.setenv("LOCAL_RANK", "1")  # a DDP rank that rank 0 started: rank 0's seed
    monkeypatch.setenv("PL_GLOBAL_SEED", "1234")
    main(args)
    saved = [yaml.safe_load((tmp_path / "lightning_logs" / f"version_{v}" / "config.yaml").read_text())
             for v in range(3)]
    seeds = [config["seed_everything"] for config in saved]
    assert all(isinstance(s, int) and 0 <= s < 2**32 for s in seeds[:2]) and seeds[0] != seeds[1]
    assert seeds[2] == 1234
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setenv("WORLD_SIZE", "2")  # every process launched apart (torchrun): each would draw its own
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2


def test_a_config_s_checkpoint_is_said_and_a_run_folder_or_config_file_is_not_written_over(tmp_path, monkeypatch,
                                                                                           capsys, lightning_log):
    monkeypatch.chdir(tmp_path)
    tiny = ["--config", "pendulum.yaml", "--trainer.max_steps", "20", "--data.warmup_steps", "20",
            "--trainer.val_check_interval", "20", "--data.eval_episodes", "1"]
    main(["fit", *tiny])
    main(["fit", *tiny, "--trainer.max_steps", "40", "--ckpt_path", "last"])  # resumed into version_1
    resumed = str(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    main(["test", "--config", "lightning_logs/version_1/config.yaml", "--data.test_episodes", "1"])
    assert f"checkpoint: {resumed} (the ckpt_path of the --config file; give --ckpt_path best, last or a file to " \
           "play another)" in lightning_log.text  # what a fit's config names is said, not played unsaid
    named = [*tiny, "--trainer.logger", "TensorBoardLogger", "--trainer.logger.save_dir", ".",
             "--trainer.logger.version", "exp1"]
    main(["fit", *named])
    folder = tmp_path / "lightning_logs" / "exp1"
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["fit", *named, "--model.gamma", "0.9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and err[-1] == (
        "error: ./lightning_logs/exp1 already holds a run (config.yaml); give another "
        "--trainer.logger.init_args.version (or none: a new version_N), or continue that run with --ckpt_path")
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before  # nothing written there
    main(["fit", *named, "--trainer.max_steps", "40", "--ckpt_path", "last"])  # continuing it there is fine
    assert yaml.safe_load((folder / "config.yaml").read_text())["trainer"]["max_steps"] == 40
    best = next((folder / "checkpoints").glob("best-*.ckpt"))
    main(["test", "--config", "pendulum.yaml", "--ckpt_path", str(best), "--data.test_episodes", "1",
          "--data.buffer_device", "cuda:99"])  # test builds no buffer: a device it lacks is not asked for
    played = yaml.safe_load((tmp_path / "lightning_logs" / "version_3" / "config.yaml").read_text())["ckpt_path"]
    assert played == str(best)  # a test's config names the checkpoint it played
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:  # before: the test wrote its config.yaml over the fit's
        main(["test", *named, "--ckpt_path", str(best), "--data.test_episodes", "1"])
    assert info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == (
        "error: ./lightning_logs/exp1 already holds a run (checkpoints), whose config.yaml test would write over; "
        "give another --trainer.logger.init_args.version (or none: a new version_N)")
    assert yaml.safe_load((folder / "config.yaml").read_text())["trainer"]["max_steps"] == 40
    assert not (folder / "test_results.json").exists()
    mine = tmp_path / "config.yaml"
    mine.write_text("# my settings\ntrainer:\n  max_steps: 20\n")
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:  # without a logger the run's config.yaml would go over it
        main(["fit", *tiny, "--config", "config.yaml", "--trainer.logger", "false"])
    assert info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: the run would write its config.yaml over --config {mine}; give another --trainer.default_root_dir, "
        "or keep your config file elsewhere")
    assert mine.read_text() == "# my settings\ntrainer:\n  max_steps: 20\n"


def test_a_run_without_a_logger_writes_into_no_folder_that_holds_a_run_or_a_file_of_yours(tmp_path, monkeypatch,
                                                                                           capsys):
    monkeypatch.chdir(tmp_path)
    tiny = ["--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.val_check_interval", "20",
            "--data.eval_episodes", "1", "--trainer.max_steps", "20", "--trainer.logger", "false"]
    (tmp_path / "config.yaml").write_text("# mine\n")  # a file of the user's, not passed as --config
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["fit", *tiny])
    assert info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {tmp_path} already holds config.yaml, which a run without a logger writes there; give a new "
        "--trainer.default_root_dir (or keep a logger), or continue that run with --ckpt_path")
    assert ([p.name for p in tmp_path.iterdir()] == ["config.yaml"]
            and (tmp_path / "config.yaml").read_text() == "# mine\n")
    (tmp_path / "config.yaml").unlink()
    main(["fit", *tiny])
    written = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert {p.name for p in written} >= {"config.yaml", "learning_curve.png", "checkpoints", "last.ckpt"}
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:  # a second new run would mix its checkpoints into the first's
        main(["fit", *tiny, "--model.gamma", "0.9"])
    assert info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {tmp_path} already holds config.yaml, learning_curve.png, checkpoints ({tmp_path}/checkpoints), "
        "which a run without a logger writes there; give a new --trainer.default_root_dir (or keep a logger), or "
        "continue that run with --ckpt_path")
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == written
    main(["fit", *tiny, "--trainer.max_steps", "40", "--ckpt_path", "checkpoints/last.ckpt"])  # continuing is fine
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["trainer"]["max_steps"] == 40
    from td3_lightning import cli

    monkeypatch.setattr(cli.SLURMEnvironment, "job_id", staticmethod(lambda: "4242"))
    written = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:  # a new SLURM job too (a requeued one has its hpc_ckpt_N.ckpt there)
        main(["fit", *tiny])
    assert info.value.code == 2 and "which a run without a logger writes there" in capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == written


def test_a_validate_or_test_without_a_logger_writes_over_no_file_of_yours(tmp_path, monkeypatch, capsys):
    """Without a logger, validate and test play in default_root_dir (a fit's folder, with --ckpt_path best): they
    leave its config.yaml as it is, and test writes its test_results.json over none."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    args = ["--config", "pendulum.yaml", "--data.eval_episodes", "1", "--trainer.logger", "false",
            "--trainer.default_root_dir", str(run)]
    main(["fit", *args, "--data.warmup_steps", "20", "--trainer.val_check_interval", "20", "--trainer.max_steps", "20"])
    fitted = (run / "config.yaml").read_bytes()
    args += ["--data.test_episodes", "1"]
    main(["validate", *args])  # the run's best checkpoint, found in its folder
    main(["test", *args])
    assert (run / "config.yaml").read_bytes() == fitted
    assert json.loads((run / "test_results.json").read_text())["test/episodes"] == 1.0
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in run.rglob("*") if p.is_file()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["test", *args])
    assert info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {run} already holds test_results.json, which test without a logger writes there; move it away, or "
        "keep a logger (each test then writes into a folder of its own)")
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in run.rglob("*") if p.is_file()} == before


def test_a_slurm_job_keeps_its_fit_folder_for_itself(tmp_path, monkeypatch, capsys):
    """Under SLURM a fit writes lightning_logs/version_<job id>. Before: a test in the same job wrote its config.yaml
    over the fit's there, and a second fit mixed its checkpoints into the first's."""
    from td3_lightning import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli.SLURMEnvironment, "job_id", staticmethod(lambda: 4242))
    for name in ("SLURM_RESTART_COUNT", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    tiny = ["--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.val_check_interval", "20",
            "--data.eval_episodes", "1", "--trainer.max_steps", "20", "--learning_curve.filename", ""]
    main(["fit", *tiny])
    run = tmp_path / "lightning_logs" / "version_4242"
    written = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert run / "config.yaml" in written and run / "checkpoints" / "last.ckpt" in written
    for _ in range(2):  # not a version_N: version_4243 would be the next job's fit folder
        main(["test", *tiny, "--data.test_episodes", "1", "--ckpt_path", str(run / "checkpoints" / "last.ckpt")])
    assert sorted(p.parent.name for p in (tmp_path / "lightning_logs").rglob("test_results.json")) == [
        "test_4242", "test_4242_2"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["fit", *tiny, "--model.gamma", "0.9"])
    assert info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {run} already holds a run of SLURM job 4242 (config.yaml); a second fit in one job needs a folder "
        "of its own: give it another --trainer.default_root_dir, or continue that run with --ckpt_path")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == written
    (tmp_path / "hpc_ckpt_1.ckpt").write_bytes((run / "checkpoints" / "last.ckpt").read_bytes())
    main(["fit", *tiny, "--trainer.max_steps", "40"])  # requeued: Lightning goes on from the hpc_ckpt it saved
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["max_steps"] == 40
    (tmp_path / "hpc_ckpt_1.ckpt").unlink()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # requeued without one: its fit starts again in its folder
    main(["fit", *tiny, "--trainer.max_steps", "30"])
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["max_steps"] == 30


def test_a_resume_with_nothing_left_to_train_says_so_and_warnings_are_warning_lines(tmp_path, monkeypatch):
    from td3_lightning import cli, errors

    monkeypatch.chdir(tmp_path)
    tiny = ["--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.val_check_interval", "20",
            "--data.eval_episodes", "1"]
    main(["fit", *tiny, "--trainer.max_steps", "40"])
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    with pytest.warns(UserWarning) as caught:
        main(["fit", *tiny, "--trainer.max_steps", "20", "--ckpt_path", "last"])
    assert f"the checkpoint ({last}) is at training step 40, at or past trainer.max_steps 20: nothing is left to " \
           "train; raise --trainer.max_steps to train on" in [str(w.message) for w in caught]
    assert errors.said_as_warning("too late", UserWarning, cli.__file__, 7) == "warning: too late\n"
    assert errors.said_as_warning("theirs", UserWarning, "/elsewhere/lib.py", 7).startswith("/elsewhere/lib.py:7: ")


def test_last_ckpt_holds_the_final_step_and_a_finished_run_resumed_abandons_no_episode(tmp_path, monkeypatch):
    """A fit ending past its last validation: ``last.ckpt`` is the final step's (Lightning's stays at the validation's),
    so the finished run resumed trains nothing and abandons no episode; one that trains on says it abandons one."""
    monkeypatch.chdir(tmp_path)
    tiny = ["--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.val_check_interval", "20",
            "--data.eval_episodes", "1"]
    main(["fit", *tiny, "--trainer.max_steps", "30"])
    ckpt = torch.load(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 30 and ckpt["td3_lightning"]["num_critic_updates"] == 30

    def said(steps: int) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            main(["fit", *tiny, "--trainer.max_steps", str(steps), "--ckpt_path", "last"])
        return [str(w.message) for w in caught]

    finished = said(30)
    assert any("nothing is left to train" in line for line in finished)
    assert not [line for line in finished if "mid-episode" in line]
    assert [line for line in said(35) if "mid-episode" in line] == [
        "resumed mid-episode: 1 episode(s) in progress are abandoned and new ones start; checkpoints at episode ends "
        "resume exactly"]  # 20 warm-up + 30 steps into a 200-step Pendulum episode
    resumed = torch.load(tmp_path / "lightning_logs" / "version_2" / "checkpoints" / "last.ckpt", weights_only=False)
    assert resumed["global_step"] == 35


def test_a_resume_past_its_max_time_says_so(tmp_path, monkeypatch):
    from lightning.pytorch.callbacks import Timer

    from td3_lightning.checkpointing import timer_train_seconds
    from td3_lightning.trainer_options import max_time_seconds

    monkeypatch.chdir(tmp_path)
    tiny = ["--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.val_check_interval", "20",
            "--data.eval_episodes", "1", "--trainer.max_steps", "1000"]
    main(["fit", *tiny, "--trainer.max_steps", "20", "--trainer.max_time", "00:00:30:00"])
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    timer = Timer()
    assert set(ckpt["callbacks"][timer.state_key]["time_elapsed"]) == set(timer.state_dict()["time_elapsed"])
    ckpt["callbacks"][timer.state_key]["time_elapsed"]["train"] = 2000.4  # a run stopped by max_time 00:00:30:00
    torch.save(ckpt, last)
    assert timer_train_seconds(ckpt) == 2000.4 and timer_train_seconds({"callbacks": {}}) is None
    assert [max_time_seconds(t) for t in ("00:00:30:00", {"minutes": 30}, "01:00:00:00", None, "soon")] == [
        1800.0, 1800.0, 86400.0, None, None]
    with pytest.warns(UserWarning) as caught:
        main(["fit", *tiny, "--trainer.max_time", "00:00:30:00", "--ckpt_path", "last"])
    assert (f"the checkpoint ({last}) has trained for 0:33:20, at or past trainer.max_time 00:00:30:00 (a resumed "
            "run's clock goes on): nothing is left to train; raise --trainer.max_time to train on"
            in [str(w.message) for w in caught])
    with warnings.catch_warnings(record=True) as caught:  # more time: no such warning, and it trains on
        warnings.simplefilter("always")
        main(["fit", *tiny, "--trainer.max_steps", "40", "--trainer.max_time", "00:01:00:00", "--ckpt_path", "last"])
    assert not [w for w in caught if "max_time" in str(w.message)]
    resumed = torch.load(tmp_path / "lightning_logs" / "version_2" / "checkpoints" / "last.ckpt", map_location="cpu",
                         weights_only=False)
    assert resumed["global_step"] == 40
    with warnings.catch_warnings(record=True) as caught:  # a test needs no time limit: no "add the Timer callback"
        warnings.simplefilter("always")
        main(["test", "--config", "pendulum.yaml", "--ckpt_path", str(last), "--data.test_episodes", "1"])
    assert [str(w.message) for w in caught if "callbacks" in str(w.message)] == []


def test_fit_then_validate_and_test_from_checkpoint(tmp_path, cli_env):
    # `--config pendulum.yaml` from a folder without that file resolves to the bundled config
    fit = run_cli(["fit", "--config", "pendulum.yaml", *TINY[:-2]], tmp_path, cli_env)
    assert fit.returncode == 0, fit.stderr[-2000:]
    for expected in ("module(s) in eval mode", "`IterableDataset` has `__len__`", "LeafSpec",
                     "ModelCheckpoint with manual optimization", "args parameter is intended"):
        assert expected not in fit.stderr  # warnings a run raises by design: the command line hides them
    run_dir = tmp_path / "lightning_logs" / "version_0"
    last = run_dir / "checkpoints" / "last.ckpt"
    assert last.is_file()
    assert ([p.name for p in (run_dir / "checkpoints").glob("best-step*.ckpt")]
            in (["best-step150.ckpt"], ["best-step300.ckpt"]))
    assert "model:" in (run_dir / "config.yaml").read_text()

    val = run_cli(["validate", "--config", "pendulum.yaml", "--data.eval_episodes", "2", "--ckpt_path", str(last)],
                  tmp_path, cli_env)
    assert val.returncode == 0, val.stderr[-2000:]
    assert "val/return" in val.stdout

    results = []
    for _ in range(2):  # same arguments, same episodes
        test = run_cli(
            ["test", "--config", "pendulum.yaml", "--data.test_episodes", "3", "--data.test_seed", "7",
             "--ckpt_path", str(last)],
            tmp_path, cli_env,
        )
        assert test.returncode == 0, test.stderr[-2000:]
        assert "test: 3 episodes, return" in test.stdout
        path = next(line.split("written to ")[1] for line in test.stdout.splitlines()
                    if "test results written to" in line)
        results.append(json.loads(Path(path).read_text()))
    assert results[0]["test/episodes"] == 3.0
    assert results[0]["test/episode_length"] == 200.0
    assert results[0]["test/return"] == results[1]["test/return"]
    assert results[0]["test/return_std"] == results[1]["test/return_std"] > 0.0
    episodes = results[0]["episode_returns"]
    assert len(episodes) == 3 and results[0]["episode_lengths"] == [200.0] * 3
    assert results[0]["test/terminated"] == 0.0 and results[0]["episode_terminated"] == [0.0] * 3  # time limit
    assert sum(episodes) / 3 == pytest.approx(results[0]["test/return"], rel=1e-6)
    assert min(episodes) == pytest.approx(results[0]["test/return_min"], rel=1e-6)


def test_resume_continues_from_last_checkpoint(tmp_path, cli_env):
    first = run_cli(["fit", "--config", "pendulum.yaml", *TINY[:-2], "--trainer.max_steps", "150"], tmp_path, cli_env)
    assert first.returncode == 0, first.stderr[-2000:]
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    second = run_cli(["fit", "--config", "pendulum.yaml", *TINY[:-2], "--ckpt_path", str(last)], tmp_path, cli_env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert f"Restored all states from the checkpoint at {last}" in second.stdout + second.stderr  # said once
    import torch

    ckpt = torch.load(tmp_path / "lightning_logs" / "version_1" / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 300
    assert ckpt["td3_lightning"]["num_critic_updates"] == 300
    assert ckpt["ReplayDataModule"]["replay"]["size"] == 500  # 200 warm-up (once) + 300 steps


def test_load_from_checkpoint_needs_no_env(tmp_path, cli_env):
    fit = run_cli(["fit", "--config", "pendulum.yaml", *TINY[:-2], "--trainer.max_steps", "150"], tmp_path, cli_env)
    assert fit.returncode == 0, fit.stderr[-2000:]
    import torch

    from td3_lightning import TD3

    model = TD3.load_from_checkpoint(tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    assert model.hparams.obs_shape == [3] and model.hparams.action_high == [2.0]
    assert model.hparams.hidden_dims == [32, 32]
    action = model.actor(torch.zeros(1, 3))
    assert action.shape == (1, 1) and -2.0 <= action.item() <= 2.0


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data.env_id", "NoSuchEnv-v9"], "unknown environment id 'NoSuchEnv-v9'"),
        (["--data.env_id", "LunarLander-v3"], "TD3 needs a continuous Box action space"),
        (["--data.env_id", "td3test/DiscreteAction-v0"], "TD3 needs a continuous Box action space"),
        (["--data.env_id", "td3test/UnboundedAction-v0"], "unbounded action space"),
        (["--data.env_id", "td3test/ImageObs-v0"], "look channels-last (H, W, C)"),
        (["--data.num_workers", "2"], "data.num_workers must be 0, got 2"),
        (["--ckpt_path", "missing.ckpt"], "checkpoint file not found: missing.ckpt"),
        (["--model.num_critics", "1"], "model.num_critics must be >= 2"),
        (["--data.env_kwargs", "{bogus: 1}"], "data.env_kwargs"),
        (["--data.steps_per_batch", "0"], "data.steps_per_batch must be >= 1, got 0"),
        (["--data.n_step", "0"], "data.n_step must be >= 1 (1 = TD3's one-step target), got 0"),
        (["--selection.episodes", "5"], "error: selection.episodes chooses among the checkpoints kept by "
                                        "checkpoint.monitor, and checkpoint.save_top_k is 1"),
        (["--selection.episodes", "5", "--checkpoint.save_top_k", "3", "--checkpoint.monitor", "null"],
         "error: selection.episodes chooses among the best checkpoints by checkpoint.monitor, and checkpoint.monitor "
         "is null (no best checkpoint); set --checkpoint.monitor val/return, or --selection.episodes 0"),
        (["--checkpoint.monitor", "val/terminated"], "error: checkpoint.monitor val/terminated with checkpoint.mode "
         "max keeps the checkpoints that end the most episodes early; set --checkpoint.mode min"),
        (["--checkpoint.mode", "min"], "error: checkpoint.monitor val/return with checkpoint.mode min keeps the "
         "checkpoints that return least; set --checkpoint.mode max"),
        (["--selection.episodes", "5", "--checkpoint.save_top_k", "3", "--trainer.enable_checkpointing", "false"],
         "error: selection.episodes chooses among the kept checkpoints, and trainer.enable_checkpointing is false"),
    ],
)
def test_bad_input_gives_one_line_and_writes_nothing(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_mujoco_env_without_mujoco_is_told_the_projects_extra(tmp_path, monkeypatch, capsys):
    # before: gymnasium's `pip install "gymnasium[mujoco]"`, unconstrained and not the project's extra
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m.startswith(("gymnasium.envs.mujoco", "mujoco"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mujoco", None)  # what `import mujoco` finds where it is not installed
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", "--data.env_id", "Ant-v5"])
    assert exit_info.value.code == 2 and capsys.readouterr().err.splitlines() == [
        "error: environment 'Ant-v5' needs MuJoCo, which is not installed: install td3_lightning's mujoco extra, "
        'pip install -c constraints.txt -e ".[mujoco]"']
    assert list(tmp_path.iterdir()) == []


CHANNELS_LAST = ("error: '{}' has image observations of shape {}, which look channels-last (H, W, C); the "
                 "CNN encoder takes channels first (C, H, W), and the command line cannot transpose them: ")


@pytest.mark.parametrize("env_id, line", [
    # before: "wrap the env with gymnasium.wrappers.TransformObservation", which the command line cannot do
    ("CarRacing-v3", CHANNELS_LAST.format("CarRacing-v3", "(96, 96, 3)") + (
        "set data.env_id CarRacingPixels-v0 (CarRacing-v3's frames channels first, as they are with data.env_kwargs "
        "'{grayscale: false, frame_stack: 1}'; --config car_pixels.yaml trains it) or CarRacingState-v0 (a state "
        "vector)")),
    ("td3test/ImageObs-v0", CHANNELS_LAST.format("td3test/ImageObs-v0", "(8, 8, 3)") + (
        "register the env with its observations transposed to (C, H, W) in a module of yours (gymnasium.register) "
        "and set data.env_id to yourmodule:YourEnv-v0")),
])
def test_a_channels_last_env_is_told_what_the_command_line_can_use(env_id, line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", "--data.env_id", env_id])
    assert exit_info.value.code == 2 and capsys.readouterr().err.splitlines() == [line]
    assert list(tmp_path.iterdir()) == []


VAL_CHECK = ('error: trainer.val_check_interval must be a number of training steps >= 1 or a time ("DD:HH:MM:SS", '
             'e.g. "00:01:00:00"); got ')


@pytest.mark.parametrize(
    "args, line",
    [
        (["--trainer.max_steps", "-5"],
         "error: trainer.max_steps must be at least 1 training step, or -1 for no limit; got -5"),
        (["--trainer.max_steps", "0"],
         "error: trainer.max_steps must be at least 1 training step, or -1 for no limit; got 0"),
        (["--trainer.max_steps", "abc"], "error: invalid value for trainer.max_steps: expected an int, got 'abc'"),
        (["--trainer.val_check_interval", "0"], VAL_CHECK + "0"),
        (["--trainer.val_check_interval", "-3"], VAL_CHECK + "-3"),
        (["--trainer.val_check_interval", "0.5"], VAL_CHECK + "0.5"),
        (["--trainer.val_check_interval", "often"], VAL_CHECK + "often"),
        (["--trainer.log_every_n_steps", "-1"],
         "error: trainer.log_every_n_steps must be >= 0 training steps (0: no step logging); got -1"),
        (["--checkpoint.every_n_train_steps", "-1"],
         "error: checkpoint.every_n_train_steps must be >= 0 training steps (0 or null: off); got -1"),
        (["--trainer.max_time", "soon"], 'error: trainer.max_time must be a duration above zero, "DD:HH:MM:SS", e.g. '
                                         '"00:01:00:00", or a mapping of weeks, days, hours, minutes, seconds, '
                                         'milliseconds, microseconds to whole numbers, such as {hours: 12}; got '
                                         '\'soon\''),
        # what Lightning refuses while the Trainer is built, with the option named
        (["--trainer.num_nodes", "0"], "error: Lightning refuses trainer.num_nodes 0: `num_nodes` must be a positive "
                                       "integer, but got 0."),
        (["--checkpoint.save_top_k", "-5"], "error: Lightning refuses checkpoint.save_top_k -5: Invalid value for "
                                            "save_top_k=-5. Must be >= -1"),
        (["--trainer.check_val_every_n_epoch", "0"],
         "error: trainer.check_val_every_n_epoch must be >= 1 or null (the replay stream is one endless epoch: "
         "trainer.val_check_interval counts the steps); got 0"),
        (["--trainer.accumulate_grad_batches", "0"], "error: trainer.accumulate_grad_batches must be 1: TD3 steps its "
                                                     "optimizers itself (manual optimization); got 0"),
        (["--data.warmup_steps", "-1"], "error: data.warmup_steps must be >= 1, got -1"),
        (["--data.eval_seed", "-1"], "error: data.eval_seed must be >= 0, got -1"),
        (["--data.record_val", "-1"], "error: data.record_val must be >= 0, got -1"),
        (["--data.frame_stack", "0"], "error: data.frame_stack must be >= 1 (null: the env's own), got 0"),
        (["--data.frame_stack", "4"], "error: data.frame_stack 4 stacks image frames, and Pendulum-v1's observations "
                                      "are not images (shape (3,)); leave it unset"),
        (["--trainer.max_steps", "1e3"], "error: invalid value for trainer.max_steps: expected an int, got '1000.0' "
                                         "(a float: write the whole number as 1000)"),
        (["--model.layer_norm", "1"], "error: invalid value for model.layer_norm: expected a bool, got '1' (write true "
                                      "or false)"),
        # what the episodes need, checked once the Trainer knows its processes (before: once per rank, after the
        # run folder was made, and the render problem only at the first validation)
        (["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
          "--data.eval_episodes", "1"],
         "error: data.eval_episodes (1) must be at least the number of processes (2): each process plays its share "
         "of the episodes"),
        (["--model.random_shift", "2"], "error: model.random_shift shifts image observations, and these are vectors "
                                        "of shape (3,); set model.random_shift 0"),
        (["--data.env_id", "td3test/NoDisplay-v0", "--data.record_val", "1"],
         "error: data.record_val: td3test/NoDisplay-v0 cannot render frames here (RuntimeError: an OpenGL platform "
         "library has not been loaded into this process); for MuJoCo without a display set MUJOCO_GL=egl (or osmesa) "
         "before starting, or set data.record_val 0"),
    ],
)
def test_trainer_and_data_options_out_of_range_stop_before_anything_is_written(args, line, tmp_path, monkeypatch,
                                                                               capsys):
    # before: max_steps -5 was a traceback, max_steps 0 an empty run folder, val_check_interval 0 a
    # ZeroDivisionError after training had started
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", "--data.warmup_steps", "50", *args])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]
    assert list(tmp_path.iterdir()) == []


def test_a_file_url_and_hpc_are_checkpoint_files_read_and_checked_as_any(tmp_path, monkeypatch):
    """Before: both went to Lightning unchecked, so the config's networks ([256, 256]) met the checkpoint's ([8]) in
    a size-mismatch traceback, after a run folder was made."""
    monkeypatch.chdir(tmp_path)
    tiny_checkpoint(tmp_path / "hpc_ckpt_3.ckpt")
    (tmp_path / "hpc_ckpt_12.ckpt").write_bytes((tmp_path / "hpc_ckpt_3.ckpt").read_bytes())  # the newest: 12
    common = ["--config", "pendulum.yaml", "--data.test_episodes", "1", "--trainer.enable_progress_bar", "false"]
    for given, played in ((f"file://{tmp_path}/hpc_ckpt_3.ckpt", "hpc_ckpt_3.ckpt"), ("hpc", "hpc_ckpt_12.ckpt")):
        main(["test", *common, "--ckpt_path", given, "--trainer.default_root_dir", str(tmp_path)])
        config = yaml.safe_load(max(tmp_path.rglob("config.yaml"), key=lambda p: p.stat().st_mtime_ns).read_text())
        assert config["ckpt_path"] == str(tmp_path / played) and config["model"]["hidden_dims"] == [8]


def test_a_checkpoint_with_an_option_that_does_nothing_is_still_played_and_resumed(tmp_path, monkeypatch):
    """model.random_shift on vector observations is refused for a new run; a checkpoint that has it (trained when
    it was silently skipped) is tested and resumed as before."""
    monkeypatch.chdir(tmp_path)
    tiny_checkpoint(tmp_path / "run.ckpt")
    ckpt = torch.load(tmp_path / "run.ckpt", weights_only=False)
    ckpt["hyper_parameters"]["random_shift"] = 2
    torch.save(ckpt, tmp_path / "run.ckpt")
    common = ["--config", "pendulum.yaml", "--ckpt_path", "run.ckpt", "--data.buffer_size", "100",
              "--data.warmup_steps", "20", "--trainer.enable_progress_bar", "false", "--learning_curve.filename", ""]
    main(["test", *common, "--data.test_episodes", "2", "--trainer.default_root_dir", "t"])
    assert json.loads(next((tmp_path / "t").rglob("test_results.json")).read_text())["test/episodes"] == 2
    main(["fit", *common, "--trainer.max_steps", "8", "--trainer.default_root_dir", "f", "--data.eval_episodes", "1"])
    assert [p.name for p in (tmp_path / "f").rglob("last.ckpt")] == ["last.ckpt"]


def test_fast_dev_run_trains_and_validates_and_leaves_no_checkpoint(tmp_path, monkeypatch, capsys):
    # before: last.ckpt in ./checkpoints, which a later `--ckpt_path last` in this folder would have resumed
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "pendulum.yaml", "--trainer.fast_dev_run", "3", "--data.warmup_steps", "20",
          "--model.hidden_dims", "[8]"])
    assert re.search(r"step 3/3 .* val/return -\d", capsys.readouterr().out)  # it trained 3 steps and validated
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == []


def test_max_steps_minus_one_is_no_limit(tmp_path, monkeypatch):
    from td3_lightning.trainer_options import check_trainer_options

    check_trainer_options({"max_steps": -1, "val_check_interval": "00:01:00:00", "log_every_n_steps": 0},
                          {"every_n_train_steps": 0})  # Lightning's "no limit", a time, "off": accepted


CONFIG_EXAMPLE = ("e.g. 'trainer: {max_steps: 20000}' and 'model: {gamma: 0.98}' on lines of their own "
                  "(python -m td3_lightning fit --print_config prints every option)")


@pytest.mark.parametrize(
    "content, line",
    [
        ("", "error: config file my.yaml is empty (or only comments): write the options in it as YAML, "
         + CONFIG_EXAMPLE),
        ("# nothing yet\n", "error: config file my.yaml is empty (or only comments): write the options in it as YAML, "
         + CONFIG_EXAMPLE),
        ("model:\n  gamma: [0.9\n", "error: config file my.yaml is not valid YAML: expected ',' or ']', but got "
         "'<stream end>' at line 3, column 1 (while parsing a flow sequence at line 2)"),
        ("model:\n\tgamma: 0.9\n", "error: config file my.yaml is not valid YAML: found character '\\t' that cannot "
         "start any token at line 2, column 1"),
        ("gamma 0.98\n", "error: config file my.yaml holds str 'gamma 0.98', not options: write them as YAML sections, "
         + CONFIG_EXAMPLE),
        (None, "error: config file my.yaml is a folder, not a file; pass a YAML file to --config"),
        ("model:\n  gamma: 0.9\ndata:\n  batch_size: 64\nmodel:\n  tau: 0.01\n",
         "error: config file my.yaml gives `model` twice (lines 1 and 5): the second would silently replace the "
         "first; merge them into one"),
        ("base: &b {gamma: 0.9}\nmodel:\n  <<: *b\n  tau: 0.01\n  tau: 0.02\n",
         "error: config file my.yaml gives `tau` twice (lines 4 and 5): the second would silently replace the first; "
         "merge them into one"),
        ("fit:\n  model: 0.9\n", "error: config file my.yaml: `fit.model: 0.9` is not a section of options; write "
                                  "the model options under it (e.g. model: {gamma: 0.98})"),
        ("fit: 5\n", "error: config file my.yaml: `fit: 5` is not a section of options: a `fit:` section holds the fit "
                     "run's options (e.g. fit: {model: {gamma: 0.98}}) in a file given before the subcommand"),
        ("learning_curve: false\n", "error: config file my.yaml: `learning_curve: false` is not a section of options; "
                                    "write the learning_curve options under it (e.g. learning_curve: {filename: ''} "
                                    "for no plot)"),
        ("model: {gamma: 0.9}\n~: 1\nnull: 2\n", "error: config file my.yaml gives `null` twice (lines 2 and 3): the "
                                                 "second would silently replace the first; merge them into one"),
    ],
)
def test_a_config_file_that_holds_no_options_is_named_with_what_to_write(content, line, tmp_path, monkeypatch, capsys):
    # before: "error: Unexpected config:" with nothing after it, and YAML errors "in <unicode string>"
    monkeypatch.chdir(tmp_path)
    if content is None:
        (tmp_path / "my.yaml").mkdir()
    else:
        (tmp_path / "my.yaml").write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "my.yaml"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]
    assert [p.name for p in tmp_path.iterdir()] == ["my.yaml"]


def test_missing_config_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "nowhere/none.yaml"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "config file not found: nowhere/none.yaml" in err and "pendulum.yaml" in err and "\n" not in err
    with pytest.raises(SystemExit) as exit_info:  # a bare name: a bundled config's without .yaml, else the same line
        main(["fit", "--config", "nope"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and err.startswith(
        "error: config file not found: nope; give a path to a YAML file or a bundled config "
        "(ant_td7.yaml, bipedal.yaml, ")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum", "--print_config"])
    assert exit_info.value.code == 0 and yaml.safe_load(capsys.readouterr().out)["data"]["env_id"] == "Pendulum-v1"
    (tmp_path / "pendulum.yaml").write_text("trainer: {max_steps: 7}\n")  # a file here wins, as with .yaml given
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum", "--print_config"])
    assert exit_info.value.code == 0 and yaml.safe_load(capsys.readouterr().out)["trainer"]["max_steps"] == 7


@pytest.mark.parametrize("given, hint", [
    ("car.yml", " (did you mean car.yaml?)"),  # before: no hint
    ("carr", " (did you mean car.yaml?)"),
    ("configs/lunar.yml", " (did you mean lunar.yaml?)"),  # no configs/ folder here: the bundled one
    ("mine.yml", " (did you mean mine.yaml?)"),  # a file here
    ("sub/car.yml", " (did you mean sub/car.yaml?)"),  # a file in the folder given wins over the bundled one
    ("nowhere/none.yaml", ""),
])
def test_a_missing_config_file_gets_the_closest_name(given, hint, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text("trainer: {max_steps: 7}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "car.yaml").write_text("trainer: {max_steps: 7}\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", given])
    bundled = ", ".join(sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
    assert exit_info.value.code == 2 and capsys.readouterr().err.splitlines() == [
        f"error: config file not found: {given}{hint}; give a path to a YAML file or a bundled config ({bundled})"]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_help_documents_every_option(cli_env, tmp_path):
    out = run_cli(["fit", "--help"], tmp_path, cli_env)
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    for option in [
        "--model.hidden_dims", "--model.num_critics", "--model.gamma", "--model.tau", "--model.policy_noise",
        "--model.noise_clip", "--model.policy_freq", "--model.exploration_noise", "--model.actor_lr",
        "--model.critic_lr", "--data.env_id", "--data.env_kwargs", "--data.batch_size", "--data.buffer_size",
        "--data.warmup_steps", "--data.eval_episodes", "--data.test_episodes", "--data.test_seed",
        "--seed_everything", "--ckpt_path",
    ]:
        assert option in text, option
    assert "relative to half the action range" in text  # docstrings become the help
    assert "--model.obs_shape" not in text  # linked from the env
    # every model and data option has a sentence of help, not just its type
    bare = []
    for entry in re.split(r"\n  (?=--)", out.stdout.split("\noptions:", 1)[-1]):
        if re.match(r"--(model|data)\.", entry):
            described = re.sub(r"\(type:.*", "", " ".join(entry.split()), flags=re.S).split()[1:]
            words = [w for w in described if not (w.isupper() or w.startswith(("{", "[", "--")) or w.endswith("]"))]
            if len(words) < 2:
                bare.append(entry.split()[0])
    assert not bare, f"options without a help text: {bare}"


def test_print_config_shows_overrides(cli_env, tmp_path):
    out = run_cli(["fit", "--config", "pendulum.yaml", "--model.gamma", "0.98", "--data.batch_size", "64",
                   "--print_config"], tmp_path, cli_env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "gamma: 0.98" in out.stdout and "batch_size: 64" in out.stdout and "env_id: Pendulum-v1" in out.stdout


@pytest.mark.parametrize("option", ["--trainer.enable_checkpointing", "--trainer.enable_progress_bar"])
def test_turning_off_checkpointing_or_the_progress_bar(option, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "pendulum.yaml", option, "false", "--trainer.max_steps", "20", "--data.warmup_steps", "20",
          "--trainer.limit_val_batches", "0", "--model.hidden_dims", "[8]"])
    out = capsys.readouterr().out
    checkpoints = list(tmp_path.glob("lightning_logs/version_0/checkpoints/*.ckpt"))
    if option.endswith("checkpointing"):
        assert checkpoints == [] and "step 20/20" in out
    else:
        assert "steps/s" not in out  # no progress line


def test_the_last_progress_line_comes_before_lightnings_stop_line(tmp_path, monkeypatch):
    """A fit ending past its last validation: the line of its last step, then Lightning's "stopped" (one stream, as a
    terminal shows them)."""
    import io
    import logging

    monkeypatch.chdir(tmp_path)
    both = io.StringIO()
    handler = logging.StreamHandler(both)
    logging.getLogger("lightning.pytorch").addHandler(handler)
    monkeypatch.setattr(sys, "stdout", both)
    try:
        main(["fit", "--config", "pendulum.yaml", "--trainer.max_steps", "30", "--trainer.val_check_interval", "20",
              "--data.warmup_steps", "20", "--data.eval_episodes", "1", "--model.hidden_dims", "[8]"])
    finally:
        logging.getLogger("lightning.pytorch").removeHandler(handler)
    lines = both.getvalue().splitlines()
    stop = lines.index("`Trainer.fit` stopped: `max_steps=30` reached.")
    assert [line.split(" |")[0] for line in lines[:stop] if line.startswith("step ")][-2:] == ["step 20/30",
                                                                                             "step 30/30"]
    assert not [line for line in lines[stop:] if line.startswith("step ")]


def test_a_network_reset_prints_its_line_under_the_progress_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "pendulum.yaml", "--trainer.max_steps", "30", "--data.warmup_steps", "20",
          "--trainer.limit_val_batches", "0", "--model.hidden_dims", "[8]", "--model.reset_steps", "[10, 20]",
          "--progress_bar.log_seconds", "0"])
    lines = capsys.readouterr().out.splitlines()
    resets = [i for i, line in enumerate(lines) if "networks drawn afresh" in line]
    assert [lines[i].split(":")[0] for i in resets] == ["step 10", "step 20"]
    assert "step 30/30" in lines[-1]


def test_resume_with_reset_steps_resets_a_run_saved_without_them(tmp_path, monkeypatch, capfd, lightning_log):
    # a stuck run's checkpoint says reset_steps []; the resets asked for on resuming are the ones that happen
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.limit_val_batches", "0",
            "--model.hidden_dims", "[8]"]
    main([*args, "--trainer.max_steps", "16"])
    capfd.readouterr()
    main([*args, "--trainer.max_steps", "32", "--ckpt_path", "last", "--model.reset_steps", "[24]"])
    assert "step 24: networks drawn afresh" in capfd.readouterr().out  # without the override: no reset
    out = lightning_log.text
    assert ("model.reset_steps [24] (configured) replaces the checkpoint's []: the networks start over after "
            "training step 24 (any the checkpoint has passed are skipped)") in out
    last = next(tmp_path.glob("lightning_logs/version_0/checkpoints/last.ckpt"))
    ours = [line for line in out.splitlines() if str(last) in line and "Restor" not in line]  # and Lightning's own
    assert len(ours) == 1 and ours[0].endswith(f"checkpoint: {last} (--ckpt_path last)")


def test_a_resume_takes_no_reset_flush_denormal_and_schedule_steps_given_now(tmp_path, monkeypatch, capfd,
                                                                              lightning_log):
    """``--model.reset_steps []`` cancels the checkpoint's resets; ``flush_denormal`` and ``schedule_steps`` given now
    replace the checkpoint's (a resume that moves trainer.max_steps pins its schedules this way)."""
    monkeypatch.chdir(tmp_path)
    args = ["fit", "--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.limit_val_batches", "0",
            "--model.hidden_dims", "[8]"]
    main([*args, "--trainer.max_steps", "16", "--model.reset_steps", "[24]", "--model.lr_final_factor", "0.1"])
    capfd.readouterr()
    main([*args, "--trainer.max_steps", "32", "--ckpt_path", "last", "--model.reset_steps", "[]",
          "--model.flush_denormal", "false", "--model.schedule_steps", "64"])
    assert "networks drawn afresh" not in capfd.readouterr().out
    assert ("model.reset_steps [] (configured) replaces the checkpoint's [24]: no network reset" in lightning_log.text
            and "model.schedule_steps 64 (given) replaces the checkpoint's null: the schedules reach their final "
            "values at training step 64" in lightning_log.text)
    ckpt = torch.load(next(tmp_path.glob("lightning_logs/version_1/checkpoints/last.ckpt")), weights_only=False)
    assert ckpt["global_step"] == 32
    hp = ckpt["hyper_parameters"]
    assert (hp["reset_steps"], hp["flush_denormal"], hp["schedule_steps"]) == ([], False, 64)
    lr = ckpt["optimizer_states"][0]["param_groups"][0]["lr"]
    assert lr == pytest.approx(1e-3 * (1 - 0.9 * 31 / 64), rel=1e-6)  # the last step's (31) on the way to 0.1 at 64
    with pytest.warns(UserWarning, match=r"test plays the checkpoint's model \(.*\), as it was trained: "
                                         r"--model.schedule_steps 10 \(the checkpoint's: 64\) is not used"):
        main(["test", "--config", "pendulum.yaml", "--model.hidden_dims", "[8]", "--ckpt_path", "last",
              "--data.test_episodes", "1", "--model.schedule_steps", "10"])  # a played policy has no schedule


def test_a_resume_refuses_model_options_its_checkpoint_would_replace(tmp_path, monkeypatch, capsys, lightning_log):
    """Lightning reads a checkpoint's hyperparameters over the command line's: a --model option that differs would be
    dropped silently. fit refuses it in one line (and says nothing else first); test plays the checkpoint, warning."""
    from td3_lightning.cli import given_model_options

    assert given_model_options(["fit", "--model.gamma", "0.5", "--model.hidden_dims=[8]", "--data.batch_size", "4",
                                "--model.gamma", "0.4", "--model.reset_steps+=100", "--model", "{tau: 0.1}"]) == (
        "gamma", "hidden_dims", "reset_steps", "tau")
    (tmp_path / "model.yaml").write_text("policy_noise: 0.3\nnoise_clip: 0.4\n")
    assert given_model_options(["--model=" + str(tmp_path / "model.yaml")]) == ("policy_noise", "noise_clip")
    monkeypatch.chdir(tmp_path)
    args = ["--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.limit_val_batches", "0",
            "--data.test_episodes", "1", "--model.hidden_dims", "[8]"]
    main(["fit", *args, "--trainer.max_steps", "16"])
    last = tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *args, "--trainer.max_steps", "32", "--ckpt_path", "last", "--model.gamma", "0.5",
              "--model.hidden_dims", "[4, 4]"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: a resumed run keeps the model options of its checkpoint ({last}): --model.hidden_dims [4, 4] (the "
        "checkpoint's: [8]), --model.gamma 0.5 (the checkpoint's: 0.98); drop them, or train a new run "
        "(without --ckpt_path)")
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]
    assert "checkpoint: " not in lightning_log.text  # which file --ckpt_path last chose: said once the input passed
    main(["fit", *args, "--trainer.max_steps", "24", "--ckpt_path", "last", "--model.gamma", "0.98",
          "--model.flush_denormal", "false"])  # the checkpoint's value, and a process-wide flag: fine
    assert f"checkpoint: {last} (--ckpt_path last)" in lightning_log.text
    assert torch.load(next(tmp_path.glob("lightning_logs/version_1/checkpoints/last.ckpt")),
                      weights_only=False)["global_step"] == 24
    with pytest.warns(UserWarning, match=r"test plays the checkpoint's model \(.*\), as it was trained: "
                                         r"--model.gamma 0.5 \(the checkpoint's: 0.98\) is not used"):
        main(["test", *args, "--ckpt_path", str(last), "--model.gamma", "0.5"])


def test_a_model_option_that_breaks_the_checkpoints_combination_is_told_the_resume_rule(tmp_path, monkeypatch,
                                                                                           capsys):
    """--model.target_update_every 0 on a SALE run: alone, SALE without hard updates is refused; on a resume the fix
    is to drop the option. --print_config of a resume prints the checkpoint's model options."""
    monkeypatch.chdir(tmp_path)
    args = ["--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.limit_val_batches", "0",
            "--data.test_episodes", "1", "--model.hidden_dims", "[8]", "--model.embedding_dim", "8"]
    main(["fit", *args, "--model.target_update_every", "8", "--trainer.max_steps", "16"])
    last = tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt"
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", *args, "--model.target_update_every", "0", "--trainer.max_steps", "32", "--ckpt_path", "last"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: a resumed run keeps the model options of its checkpoint ({last}): --model.target_update_every 0 (the "
        "checkpoint's: 8); drop it, or train a new run (without --ckpt_path)")
    with pytest.raises(SystemExit):  # a new run: the combination's own rule
        main(["fit", *args, "--model.target_update_every", "0"])
    assert capsys.readouterr().err.strip() == (
        "error: model.embedding_dim refreshes the fixed encoder at each hard target update: set "
        "model.target_update_every (TD7: 250)")
    with pytest.raises(SystemExit):  # the checkpoint's options, and a data option that is wrong whatever the model
        main(["fit", *args, "--model.target_update_every", "8", "--ckpt_path", "last", "--data.batch_size", "0"])
    assert capsys.readouterr().err.strip() == "error: data.batch_size must be >= 1, got 0"
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == ["version_0"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # what a resume runs with: the checkpoint's SALE options
        main(["fit", *args[:-2], "--ckpt_path", "last", "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert exit_info.value.code == 0 and printed["ckpt_path"] == str(last)
    assert (printed["model"]["embedding_dim"], printed["model"]["target_update_every"]) == (8, 8)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal on a machine without a GPU")
@pytest.mark.parametrize("accelerator, said", [
    ("gpu", "Lightning refuses trainer.accelerator 'gpu': No supported gpu backend found"),
    ("cuda", "Lightning refuses trainer.accelerator 'cuda': `CUDAAccelerator` can not run on your system since the "
             "accelerator is not available"),
])
def test_a_gpu_accelerator_without_a_gpu_is_told_the_fix(accelerator, said, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", "--trainer.max_steps", "10", "--trainer.accelerator", accelerator])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and err.startswith(f"error: {said}")
    assert err.endswith("; this machine has no such device: use --trainer.accelerator cpu (or auto, which picks what "
                        "it has)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="the refusal without torch_xla")
def test_a_tpu_without_torch_xla_is_told_the_fix(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for option, line in [  # Lightning's ImportError: the accelerator's when it names a TPU, else a trainer option's
        (["--trainer.accelerator", "tpu"], "error: Lightning refuses trainer.accelerator 'tpu': Requirement "
         "'torch_xla>=1.13' not met; a TPU runs with torch_xla installed: on a machine without one use "
         "--trainer.accelerator cpu (or auto, which picks what it has)"),
        (["--trainer.strategy", "xla"], "error: Lightning refuses trainer.strategy 'xla': Requirement "
         "'torch_xla>=1.13' not met. HINT: Try running `pip install -U 'torch_xla>=1.13'`")]:
        with pytest.raises(SystemExit) as exit_info:
            main(["fit", "--config", "pendulum.yaml", "--trainer.max_steps", "10", *option])
        assert exit_info.value.code == 2 and capsys.readouterr().err.strip() == line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
def test_every_shipped_config_parses(name, capsys):
    # a key renamed in the code but not in a config would only surface when someone runs that config
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", name, "--print_config"])
    assert exit_info.value.code in (0, None)
    printed = capsys.readouterr().out
    env_id = re.search(r"^  env_id: (\S+)$", printed, re.M)
    assert env_id is not None and env_id.group(1) in (CONFIG_DIR / name).read_text()


def test_a_run_prints_only_what_a_user_can_act_on(tmp_path, cli_env):
    tiny = ["--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.val_check_interval", "20",
            "--data.eval_episodes", "1", "--model.hidden_dims", "[8]", "--data.batch_size", "16",
            "--progress_bar.log_seconds", "1000", "--learning_curve.filename", ""]
    runs = [run_cli(["fit", *tiny, "--trainer.max_steps", "40"], tmp_path, cli_env),
            run_cli(["fit", *tiny, "--trainer.max_steps", "60", "--ckpt_path", "last"], tmp_path, cli_env),
            run_cli(["test", *tiny, "--ckpt_path", "last", "--data.test_episodes", "1"], tmp_path, cli_env)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
        text = run.stdout + run.stderr
        for noise in ("Tip:", "litlogger", "litmodels", "Trainable params", "Total params", "| Name ",
                      "dirpath has changed", "Traceback", "available: False", "Restoring states"):
            assert noise not in text, (noise, text)
        if "--ckpt_path" in run.args:  # the checkpoint is named once, when it is loaded
            assert len(re.findall(r"checkpoint.* at \S*last\.ckpt", text)) == 1, text
    # the last line once, though a validation ends the run too
    assert [line.split(" | ")[0] for line in runs[0].stdout.splitlines()].count("step 40/40") == 1
    assert [line.split(" | ")[0] for line in runs[1].stdout.splitlines()].count("step 60/60") == 1


def test_the_model_summary_is_there_when_asked_for(tmp_path, monkeypatch, lightning_log):
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "pendulum.yaml", "--trainer.max_steps", "2", "--data.warmup_steps", "20",
          "--trainer.limit_val_batches", "0", "--model.hidden_dims", "[8]", "--trainer.enable_model_summary", "true",
          "--trainer.enable_progress_bar", "false", "--learning_curve.filename", ""])
    assert "Trainable params" in lightning_log.text


def test_progress_line_says_the_time_left():
    from td3_lightning.callbacks import time_left

    assert time_left(1000, 7000, 100.0) == ", 1 min left"  # 6000 steps at 100 steps/s
    assert time_left(0, 200_000, 80.0) == ", 42 min left"
    assert time_left(6990, 7000, 100.0) == ", <1 min left"
    assert time_left(7000, 7000, 100.0) == time_left(10, -1, 100.0) == time_left(10, 100, 0.0) == ""


def test_options_that_serve_an_option_that_is_off_are_warned_of_in_a_new_run(tmp_path, monkeypatch):
    from td3_lightning.data import ReplayDataModule
    from td3_lightning.declarations import signature_defaults
    from td3_lightning.rules import idle_options
    from td3_lightning.module import TD3

    defaults = {"model": signature_defaults(TD3), "data": signature_defaults(ReplayDataModule)}
    model = {**defaults["model"], "obs_shape": [3]}
    data = {"sampler": "uniform", "priority_alpha": 0.4}
    assert idle_options(model, data, defaults) == []  # every option at its default
    changed = {"teacher_weight": 5.0, "embedding_lr": 1e-3, "checkpoint_episodes": 3, "checkpoint_after": 0,
               "encoder_features": 7, "shared_encoder": False, "schedule_steps": 1000}
    assert idle_options({**model, **changed}, {**data, "priority_alpha": 0.9}, defaults) == [
        "data.priority_alpha 0.9 (data.sampler uniform)", "model.teacher_weight 5.0 (no model.teacher)",
        "model.embedding_lr 0.001 (model.embedding_dim 0)",
        "model.checkpoint_episodes 3 (model.policy_checkpoints false)",
        "model.checkpoint_after 0 (model.policy_checkpoints false)", "model.encoder_features 7 (no CNN encoder)",
        "model.shared_encoder False (no CNN encoder)",
        "model.schedule_steps 1000 (no schedule (model.exploration_noise_final null, model.lr_final_factor 1))"]
    serving = {"teacher": "t.ckpt", "embedding_dim": 256, "policy_checkpoints": True, "obs_shape": [3, 64, 64],
               "exploration_noise_final": 0.05}
    assert idle_options({**model, **changed, **serving}, {"sampler": "lap", "priority_alpha": 0.9}, defaults) == []
    assert idle_options({**model, "tau": 0.01, "target_update_every": 250}, data, defaults) == [
        "model.tau 0.01 (model.target_update_every (hard copies))"]

    monkeypatch.chdir(tmp_path)
    tiny = ["fit", "--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.max_steps", "2",
            "--data.eval_episodes", "1", "--learning_curve.filename", ""]
    with pytest.warns(UserWarning) as caught:
        main([*tiny, "--model.teacher_weight", "5", "--trainer.default_root_dir", "a"])
    assert ("model.teacher_weight 5.0 (no model.teacher): set but idle in this run; leave it out, or where a config "
            "sets it give --model.teacher_weight 1.0" in [str(w.message) for w in caught])
    with pytest.warns(UserWarning) as caught:  # humanoid_crossq.yaml's range, its bins set back to 0
        main([*tiny, "--model.critic_bins", "0", "--model.critic_range", "[-100, 1200]", "--model.tau", "0.01",
              "--model.target_networks", "false", "--trainer.default_root_dir", "b"])
    assert ("model.critic_range [-100.0, 1200.0] (model.critic_bins 0), model.tau 0.01 (model.target_networks false): "
            "set but idle in this run; leave them out, or where a config sets them give --model.critic_range null "
            "--model.tau 0.005" in [str(w.message) for w in caught])
    last = next((tmp_path / "a").rglob("last.ckpt"))
    with warnings.catch_warnings(record=True) as caught:  # a resumed run is the checkpoint's (teacher_weight 5)
        warnings.simplefilter("always")
        main([*tiny, "--trainer.max_steps", "4", "--ckpt_path", str(last), "--trainer.default_root_dir", "a"])
    assert not [w for w in caught if "idle" in str(w.message)]


def test_a_new_fit_shorter_than_its_validation_interval_is_warned_of(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny = ["fit", "--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.max_steps", "4",
            "--data.eval_episodes", "1", "--learning_curve.filename", ""]
    never = ("trainer.val_check_interval 1000 is above trainer.max_steps 4: this fit never validates, so it keeps no "
             "best checkpoint (what test and export take by default); lower the interval")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main([*tiny, "--trainer.default_root_dir", "a"])
    assert never in [str(w.message) for w in caught]
    assert not list((tmp_path / "a").rglob("best*.ckpt"))  # what it warns of
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main([*tiny, "--trainer.val_check_interval", "2", "--trainer.default_root_dir", "b"])
    assert not [w for w in caught if "never validates" in str(w.message)] and list((tmp_path / "b").rglob("best*"))
