"""DDP with 2 CPU processes (gloo), through the command line as users run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

COMMON = [
    "--config", "pendulum.yaml", "--trainer.strategy", "ddp", "--trainer.devices", "2",
    "--trainer.accelerator", "cpu", "--data.eval_episodes", "2", "--model.hidden_dims", "[32,32]",
    "--trainer.enable_progress_bar", "false", "--learning_curve.filename", "",
]
FIT = ["fit", *COMMON, "--trainer.val_check_interval", "100", "--data.warmup_steps", "200"]

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without torch.distributed")


def _run(args: list[str], cwd: Path, cli_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**cli_env, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(__file__).parent) + os.pathsep + cli_env["PYTHONPATH"]}
    proc = subprocess.run([sys.executable, "-m", "td3_lightning", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _probe(folder: Path) -> list[str]:
    return ["--trainer.callbacks+=ddp_probe.RankProbe", "--trainer.callbacks.folder", str(folder)]


def _ranks(folder: Path) -> list[dict]:
    return [json.loads((folder / f"rank{r}.json").read_text()) for r in range(2)]


def _same_networks_and_replays(a: dict, b: dict) -> None:
    """Two DDP checkpoints of 400 steps hold equal networks and equal replay buffers, rank for rank."""
    assert a["global_step"] == b["global_step"] == 400
    data_a, data_b = a["ReplayDataModule"], b["ReplayDataModule"]
    assert data_a["world_size"] == data_b["world_size"] == 2 and len(data_a["other_ranks"]) == 1
    for name, tensor in a["state_dict"].items():
        assert torch.equal(tensor, b["state_dict"][name]), name
    for replay_a, replay_b in [(data_a["replay"], data_b["replay"]),
                               (data_a["other_ranks"][0]["replay"], data_b["other_ranks"][0]["replay"])]:
        for field in ("obs", "action", "reward", "next_obs", "terminated"):
            assert torch.equal(replay_a[field], replay_b[field]), field


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory, cli_env):
    """A: 400 steps straight. B: 200 steps (an episode end), then resumed to 400."""
    root = tmp_path_factory.mktemp("ddp")
    _run([*FIT, "--trainer.max_steps", "400", "--trainer.default_root_dir", "A", *_probe(root / "probe_a")],
         root, cli_env)
    _run([*FIT, "--trainer.max_steps", "200", "--trainer.default_root_dir", "B"], root, cli_env)
    last = root / "B" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    resumed = _run([*FIT, "--trainer.max_steps", "400", "--trainer.default_root_dir", "B", "--ckpt_path", str(last),
                    *_probe(root / "probe_b")], root, cli_env)
    (root / "resume_stderr.txt").write_text(resumed.stderr)
    return root


def test_ranks_keep_identical_networks_with_their_own_envs_and_replay(ddp_runs):
    rank0, rank1 = _ranks(ddp_runs / "probe_a")
    # the gradients are averaged, so both ranks take the same optimizer steps
    assert rank0["weights_sum"] == rank1["weights_sum"] and rank0["weights_abs_sum"] == rank1["weights_abs_sum"]
    # but each rank collected its own transitions, from its own episode seeds
    assert rank0["replay_rewards"] != rank1["replay_rewards"]
    assert rank1["base_seed"] - rank0["base_seed"] > 2**30
    assert rank0["env_steps"] == rank1["env_steps"] == 600 and rank0["replay_size"] == 600


def test_checkpoint_holds_every_ranks_replay_and_resume_is_exact(ddp_runs):
    a = torch.load(ddp_runs / "A/lightning_logs/version_0/checkpoints/last.ckpt", weights_only=False)
    b = torch.load(ddp_runs / "B/lightning_logs/version_1/checkpoints/last.ckpt", weights_only=False)
    _same_networks_and_replays(a, b)
    replay = a["ReplayDataModule"]
    assert not torch.equal(replay["replay"]["obs"], replay["other_ranks"][0]["replay"]["obs"])
    assert _ranks(ddp_runs / "probe_a") == _ranks(ddp_runs / "probe_b")
    # step 200 is an episode end on both ranks: nothing was abandoned
    assert "resumed mid-episode" not in (ddp_runs / "resume_stderr.txt").read_text()


# TD7's options that run under DDP (policy checkpoints assess one process's episodes and are refused there), with
# HL-Gauss critics on an automatic range (the widest of both processes' batches)
TD7 = ["--model.normalize_obs", "true", "--data.sampler", "lap", "--model.embedding_dim", "16",
       "--model.target_update_every", "50", "--data.batch_size", "32", "--model.critic_bins", "11",
       "--model.critic_range", "auto"]


@pytest.fixture(scope="module")
def td7_runs(tmp_path_factory, cli_env):
    """The TD7 options: A 400 steps straight; B 200 steps, then resumed to 400."""
    root = tmp_path_factory.mktemp("ddp_td7")
    _run([*FIT, *TD7, "--trainer.max_steps", "400", "--trainer.default_root_dir", "A", *_probe(root / "probe_a")],
         root, cli_env)
    _run([*FIT, *TD7, "--trainer.max_steps", "200", "--trainer.default_root_dir", "B"], root, cli_env)
    last = root / "B" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    _run([*FIT, *TD7, "--trainer.max_steps", "400", "--trainer.default_root_dir", "B", "--ckpt_path", str(last),
          *_probe(root / "probe_b")], root, cli_env)
    return root


def test_td7_options_keep_ranks_identical_with_shared_statistics_and_own_priorities(td7_runs):
    rank0, rank1 = _ranks(td7_runs / "probe_a")  # the weights with the statistics and the SALE encoder
    assert rank0["weights_sum"] == rank1["weights_sum"] and rank0["weights_abs_sum"] == rank1["weights_abs_sum"]
    ckpt = torch.load(td7_runs / "A/lightning_logs/version_0/checkpoints/last.ckpt", weights_only=False)
    counts = {k: float(v) for k, v in ckpt["state_dict"].items() if k.endswith("normalizer.count")}
    assert counts and set(counts.values()) == {400 * 32 * 2}  # every update merged both ranks' batches
    data = ckpt["ReplayDataModule"]
    p0, p1 = data["replay"]["sampler"]["priority"], data["other_ranks"][0]["replay"]["sampler"]["priority"]
    assert p0.shape == p1.shape == (600,)  # one per transition of the rank's own buffer
    assert p0.max() > 1.0 and p1.max() > 1.0  # each rank's update wrote its own batches' TD errors
    assert not torch.equal(p0, p1)
    # the automatic range, the same on both ranks (in the weights' sums above): Pendulum's rewards lie in [-16.3, 0],
    # so it holds the worst reward of both buffers over 1 - gamma (0.98) and its top stays where it started
    low, high = ckpt["state_dict"]["critic.head.bounds"].tolist()
    worst = min(float(rank["replay"]["reward"][:600].min()) for rank in (data, data["other_ranks"][0]))
    assert high == 1.0 and worst / (1 - 0.98) * 1.0001 <= low < -100.0


def test_td7_options_resume_exactly_under_ddp(td7_runs):
    a = torch.load(td7_runs / "A/lightning_logs/version_0/checkpoints/last.ckpt", weights_only=False)
    b = torch.load(td7_runs / "B/lightning_logs/version_1/checkpoints/last.ckpt", weights_only=False)
    assert a["global_step"] == b["global_step"] == 400
    for name, tensor in a["state_dict"].items():
        assert torch.equal(tensor, b["state_dict"][name]), name
    data_a, data_b = a["ReplayDataModule"], b["ReplayDataModule"]
    for rank_a, rank_b in [(data_a, data_b), (data_a["other_ranks"][0], data_b["other_ranks"][0])]:
        for key, value in rank_a["replay"]["sampler"].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(rank_b["replay"]["sampler"][key])), key
    assert _ranks(td7_runs / "probe_a") == _ranks(td7_runs / "probe_b")


@pytest.mark.parametrize("episodes", [5, 3])  # 3: one rank plays a single episode
def test_test_splits_episodes_over_ranks_and_gathers_them(ddp_runs, cli_env, episodes):
    ckpt = str(ddp_runs / "A/lightning_logs/version_0/checkpoints/last.ckpt")
    args = ["--config", "pendulum.yaml", "--data.test_episodes", str(episodes), "--ckpt_path", ckpt]
    _run(["test", *args, "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
          "--trainer.default_root_dir", f"T2_{episodes}"], ddp_runs, cli_env)
    _run(["test", *args, "--trainer.default_root_dir", f"T1_{episodes}"], ddp_runs, cli_env)
    two = json.loads(next((ddp_runs / f"T2_{episodes}").rglob("test_results.json")).read_text())
    one = json.loads(next((ddp_runs / f"T1_{episodes}").rglob("test_results.json")).read_text())
    assert two["test/episodes"] == one["test/episodes"] == episodes  # seeds 0..episodes-1, each played once
    for key in ("test/return", "test/return_min", "test/return_max", "test/return_std"):
        assert two[key] == pytest.approx(one[key], rel=1e-6), key
    # every rank's episodes reach the file (rank by rank, so compared as sorted lists)
    assert len(two["episode_returns"]) == episodes
    assert sorted(two["episode_returns"]) == pytest.approx(sorted(one["episode_returns"]), rel=1e-6)


def test_resume_with_another_number_of_processes_is_one_line(ddp_runs, cli_env):
    ckpt = str(ddp_runs / "A/lightning_logs/version_0/checkpoints/last.ckpt")
    env = {**cli_env, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "td3_lightning", "fit", "--config", "pendulum.yaml",
                           "--model.hidden_dims", "[32,32]", "--trainer.max_steps", "500", "--ckpt_path", ckpt,
                           "--trainer.default_root_dir", "C"], cwd=ddp_runs, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: the checkpoint's replay buffer was saved by 2 process(es), this run has 1: resume with the same "
        "number of processes (trainer.devices x trainer.num_nodes)"
    ]
    assert not (ddp_runs / "C").exists()  # refused before anything is written
