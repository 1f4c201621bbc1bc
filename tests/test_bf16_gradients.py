"""``benchmarks/bf16_gradients.py`` on a small TD7-set checkpoint: one line per part, the float32 losses it prints are
the encoder's and LAP's critic loss computed here, and with ``--encoder-float32`` the encoder's loss and gradient are
float32's exactly."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import lightning as L
import torch
from conftest import fit_checkpointed

from td3_lightning import TD3, ReplayDataModule

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "bf16_gradients.py"
LINE = re.compile(r"(\w+) +loss +(\S+) +relative change (\S+) +gradient cosine (\S+) +relative difference (\S+) +"
                  r"\(batch to batch in float32: (\S+)\)")


def _run(ckpt: Path, *options: str, monkeypatch, capsys) -> dict[str, list[float]]:
    spec = importlib.util.spec_from_file_location("bf16_gradients", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with monkeypatch.context() as m:
        m.setattr(sys, "argv", ["bf16_gradients.py", str(ckpt), "--batches", "3", *options])
        m.setattr(module.SALEEncoder, "zs", module.SALEEncoder.zs)  # undone after: --encoder-float32 patches them
        m.setattr(module.SALEEncoder, "zsa", module.SALEEncoder.zsa)
        module.main()
    lines = capsys.readouterr().out.strip().splitlines()
    found = [LINE.fullmatch(line) for line in lines]
    assert all(found), lines
    return {f.group(1): [float(x) for x in f.groups()[1:]] for f in found}


def test_the_script_compares_each_part_of_the_update_in_float32_and_bf16(tmp_path, monkeypatch, capsys):
    L.seed_everything(0)
    dm = ReplayDataModule("td3test/ConstantReward-v0", warmup_steps=300, batch_size=16, buffer_size=400)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16], embedding_dim=8, target_update_every=10)
    fit_checkpointed(model, dm, 20, tmp_path, every=20)
    ckpt = tmp_path / "s20.ckpt"
    plain = _run(ckpt, monkeypatch=monkeypatch, capsys=capsys)
    assert list(plain) == ["encoder", "critic", "actor"]
    replay = torch.load(ckpt, weights_only=False)["ReplayDataModule"]["replay"]
    trained = TD3.load_from_checkpoint(ckpt, map_location="cpu")
    losses, critic_losses = [], []
    for i in range(3):  # the script's batches: 256 slots drawn by generators seeded 0, 1, 2
        index = torch.randint(int(replay["size"]), (256,), generator=torch.Generator().manual_seed(i))
        batch = {k: replay[k][index] for k in ("obs", "action", "reward", "next_obs", "terminated")}
        losses.append(float(trained.extensions.auxiliary_losses["embedding"](batch)))
        noise = torch.zeros_like(batch["action"])
        critic_losses.append(float(trained.critic_loss({**batch, "index": index}, noise)[0]))
    assert plain["encoder"][0] == float(f"{sum(losses) / 3:.4g}")
    assert plain["critic"][0] == float(f"{sum(critic_losses) / 3:.4g}")  # LAP's loss, as the TD7 set trains
    assert all(0.9 < part[2] <= 1.001 for part in plain.values())  # gradient cosines near 1
    assert plain["encoder"][1] > 0  # bfloat16 moves the encoder's loss
    kept = _run(ckpt, "--encoder-float32", monkeypatch=monkeypatch, capsys=capsys)
    assert kept["encoder"][1:4] == [0.0, 1.0, 0.0]  # the same loss and gradient as float32's
    assert kept["encoder"][0] == plain["encoder"][0]
