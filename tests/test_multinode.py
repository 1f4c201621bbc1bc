"""DDP over two nodes, run here as two node ranks on one machine (gloo on the CPU).

Each node rank is its own process started the way a cluster starts it: torchrun, Lightning's
own environment variables (MASTER_ADDR, MASTER_PORT, NODE_RANK) and SLURM's srun (its
variables, as srun sets them). docs/scaling.md gives the same launch lines. The comparison
is test_ddp.py's: a run stopped at 200 steps and resumed to 400 equals a run of 400 steps,
network for network and replay buffer for replay buffer, on both ranks.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from test_ddp import _probe, _ranks, _same_networks_and_replays

pytestmark = [
    pytest.mark.skipif(not torch.distributed.is_available(), reason="torch without torch.distributed"),
    pytest.mark.skipif(os.environ.get("TD3_MULTINODE_TESTS") == "0", reason="TD3_MULTINODE_TESTS=0"),
]

NODES = 2
JOB_ID = 4242  # the SLURM job id of the srun launch
ARGS = [
    "--config", "pendulum.yaml", "--trainer.strategy", "ddp", "--trainer.num_nodes", str(NODES),
    "--trainer.devices", "1", "--trainer.accelerator", "cpu", "--data.eval_episodes", "2",
    "--model.hidden_dims", "[32,32]", "--trainer.enable_progress_bar", "false", "--learning_curve.filename", "",
    "--trainer.val_check_interval", "100", "--data.warmup_steps", "200",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_listener(port: int, proc: subprocess.Popen, log: Path, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"node 0 exited with {proc.returncode} before its store listened:\n"
                                 f"{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"node 0's store did not listen on port {port} within {timeout:.0f} s")


def _torchrun(node: int, port: int) -> tuple[list[str], dict[str, str]]:
    """``torchrun --nnodes 2 --nproc-per-node 1 --node-rank R --master-addr A --master-port P -m td3_lightning``"""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--nproc-per-node", "1",
            "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port), "-m",
            "td3_lightning"], {}


def _lightning_env(node: int, port: int) -> tuple[list[str], dict[str, str]]:
    """``MASTER_ADDR=A MASTER_PORT=P NODE_RANK=R python -m td3_lightning``"""
    return [sys.executable, "-m", "td3_lightning"], {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                                     "NODE_RANK": str(node)}


def _srun(node: int, port: int) -> tuple[list[str], dict[str, str]]:
    """``srun python -m td3_lightning`` in a job of 2 nodes, 1 task per node: what srun sets for task R."""
    return [sys.executable, "-m", "td3_lightning"], {
        "SLURM_NTASKS": str(NODES), "SLURM_NTASKS_PER_NODE": "1", "SLURM_PROCID": str(node), "SLURM_LOCALID": "0",
        "SLURM_NODEID": str(node), "SLURM_NNODES": str(NODES), "SLURM_NODELIST": "127.0.0.1",
        "SLURM_JOB_ID": str(JOB_ID), "SLURM_JOB_NAME": "td3", "MASTER_PORT": str(port),
    }


def _two_nodes(launch, args: list[str], cwd: Path, cli_env: dict[str, str], name: str) -> list[str]:
    """Start both node ranks, wait for both; their output (written to files: a full pipe would block a
    rank, and with it the other one, in a collective)."""
    port = _free_port()
    base = {**cli_env, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(Path(__file__).parent) + os.pathsep + cli_env["PYTHONPATH"]}
    procs, logs = [], [cwd / f"{name}_node{node}.log" for node in range(NODES)]
    for node in range(NODES):
        command, extra = launch(node, port)
        with open(logs[node], "w") as log:
            procs.append(subprocess.Popen([*command, *args], cwd=cwd, env={**base, **extra}, stdout=log,
                                          stderr=subprocess.STDOUT))
        if node == 0:
            # node 1 starts once node 0's rendezvous store listens, as on a cluster where the master
            # node is up first (a rank that reaches a store not yet listening can abort in gloo)
            _wait_for_listener(port, procs[0], logs[0])
    for proc in procs:
        try:
            proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
    outs = [log.read_text() for log in logs]
    for node, (proc, out) in enumerate(zip(procs, outs)):
        assert proc.returncode == 0, f"node {node}:\n{out[-3000:]}"
    return outs


@pytest.fixture(scope="module")
def two_node_runs(tmp_path_factory, cli_env) -> Path:
    """A: 400 steps straight (torchrun). B: 200 steps (Lightning's variables), resumed to 400 (srun's)."""
    root = tmp_path_factory.mktemp("nodes")
    fit = ["fit", *ARGS]
    _two_nodes(_torchrun, [*fit, "--trainer.max_steps", "400", "--trainer.default_root_dir", "A",
                           *_probe(root / "probe_a")], root, cli_env, "a")
    _two_nodes(_lightning_env, [*fit, "--trainer.max_steps", "200", "--trainer.default_root_dir", "B"],
               root, cli_env, "b")
    last = root / "B" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    _two_nodes(_srun, [*fit, "--trainer.max_steps", "400", "--trainer.default_root_dir", "B",
                              "--ckpt_path", str(last), *_probe(root / "probe_b")], root, cli_env, "b_resumed")
    return root


def test_two_nodes_train_as_one_data_parallel_run(two_node_runs):
    rank0, rank1 = _ranks(two_node_runs / "probe_a")
    assert rank0["weights_sum"] == rank1["weights_sum"] and rank0["weights_abs_sum"] == rank1["weights_abs_sum"]
    assert rank0["replay_rewards"] != rank1["replay_rewards"]  # each node collects its own transitions
    assert rank1["base_seed"] - rank0["base_seed"] > 2**30
    assert rank0["env_steps"] == rank1["env_steps"] == 600 and rank0["replay_size"] == rank1["replay_size"] == 600


def test_two_node_checkpoint_resumes_exactly(two_node_runs):
    a = torch.load(two_node_runs / "A/lightning_logs/version_0/checkpoints/last.ckpt", weights_only=False)
    # under SLURM, Lightning's TensorBoard logger names the run's folder after the job id
    b = torch.load(two_node_runs / f"B/lightning_logs/version_{JOB_ID}/checkpoints/last.ckpt", weights_only=False)
    _same_networks_and_replays(a, b)
    assert _ranks(two_node_runs / "probe_a") == _ranks(two_node_runs / "probe_b")
    resumed = (two_node_runs / "b_resumed_node0.log").read_text()
    assert "Restored all states from the checkpoint" in resumed and "resumed mid-episode" not in resumed
