from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import lightning as L
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import envs as test_envs  # noqa: E402

test_envs.register()

REPO = Path(__file__).resolve().parents[1]

# `pytest -n auto` (the README's test command) runs a worker process per core: each takes its share of the cores as
# torch threads, and the CLI processes it starts inherit that (more threads than cores run several times slower)
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    import torch

    _threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    torch.set_num_threads(_threads)
    os.environ["OMP_NUM_THREADS"] = str(_threads)
# the fits of the suite (and of the CLI processes it starts) note themselves in a register of their own
os.environ["TD3_LIGHTNING_FITS"] = tempfile.mkdtemp(prefix="td3-fits-")
atexit.register(shutil.rmtree, os.environ["TD3_LIGHTNING_FITS"], ignore_errors=True)  # removed when the suite ends


def quiet_trainer(**kwargs) -> L.Trainer:
    """A Trainer that writes nothing and prints little, with the env loop that feeds the replay."""
    from td3_lightning import EnvLoop

    defaults = dict(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        check_val_every_n_epoch=None,
        val_check_interval=10**9,
        accelerator="cpu",
        devices=1,
    )
    defaults.update(kwargs)
    callbacks = list(defaults.get("callbacks") or [])
    if not any(isinstance(c, EnvLoop) for c in callbacks):
        defaults["callbacks"] = [EnvLoop(), *callbacks]
    return L.Trainer(**defaults)


def small_batch(n: int = 6) -> dict[str, Any]:
    """A replay batch of ``n`` transitions with 3 observation features and one action in [-1, 1] (fixed draws)."""
    import torch

    g = torch.Generator().manual_seed(3)
    return {"obs": torch.randn(n, 3, generator=g), "action": torch.rand(n, 1, generator=g) * 2 - 1,
            "reward": torch.randn(n, generator=g), "next_obs": torch.randn(n, 3, generator=g),
            "terminated": torch.rand(n, generator=g) < 0.3}


def fit_checkpointed(model: L.LightningModule, dm: L.LightningDataModule, max_steps: int, folder: Path,
                     every: int | None = None, ckpt_path: Path | None = None, precision: str = "32-true") -> None:
    """Fit ``model`` on ``dm`` for ``max_steps`` (resuming from ``ckpt_path``) at ``precision``; with ``every``, keep a
    checkpoint ``s<step>.ckpt`` in ``folder`` every ``every`` training steps."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    callbacks = [] if every is None else [ModelCheckpoint(
        dirpath=folder, every_n_train_steps=every, save_top_k=-1, filename="s{step}", auto_insert_metric_name=False)]
    quiet_trainer(max_steps=max_steps, callbacks=callbacks, enable_checkpointing=every is not None,
                  precision=precision).fit(model, dm, ckpt_path=ckpt_path)


def straight_and_resumed(fit: Any, folder: Path, steps: int = 120, at: int = 60) -> tuple[Any, Any]:
    """``fit(folder, max_steps, ckpt_path=None, every=None)`` run straight to ``steps``, and to ``at`` (keeping
    ``s<at>.ckpt``) then resumed from there to ``steps``: what each returned, for an exact-resume test."""
    straight = fit(folder / "a", steps)
    fit(folder / "b", at, every=at)
    return straight, fit(folder / "c", steps, ckpt_path=folder / "b" / f"s{at}.ckpt")


def tiny_checkpoint(path: Path) -> Path:
    """A Pendulum checkpoint of 5 training steps, networks [8], at ``path``."""
    from td3_lightning.data import ReplayDataModule
    from td3_lightning.module import TD3

    L.seed_everything(0)
    dm = ReplayDataModule("Pendulum-v1", warmup_steps=20, batch_size=8, buffer_size=100)
    trainer = quiet_trainer(max_steps=5)
    trainer.fit(TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8]), dm)
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="session")
def cli_env() -> dict[str, str]:
    """Environment for running the CLI in a subprocess from any folder."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture
def lightning_log(caplog) -> pytest.LogCaptureFixture:
    """``caplog`` that also holds Lightning's own lines (``rank_zero_info``): the ``lightning.pytorch``
    logger writes to its own handler and does not propagate."""
    import logging

    logger = logging.getLogger("lightning.pytorch")
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)
