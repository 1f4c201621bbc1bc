"""TD3 learns: Pendulum-v1 reaches a deterministic evaluation mean of at least -250 (float32; bf16-mixed in
``test_learning_bf16.py``, a file of its own so that the suite's workers run the two side by side)."""

import lightning as L
from conftest import quiet_trainer

from td3_lightning import TD3, ReplayDataModule


def test_pendulum_learns_within_8000_steps():
    L.seed_everything(0)
    dm = ReplayDataModule("Pendulum-v1", warmup_steps=1000, batch_size=256, buffer_size=100_000, eval_episodes=10)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, gamma=0.98, actor_lr=1e-3, critic_lr=1e-3)
    trainer = quiet_trainer(max_steps=8000, val_check_interval=8000)
    trainer.fit(model, dm)
    final = trainer.callback_metrics["val/return"].item()
    assert final >= -250, final
    # an untrained policy scores about -1200 on the same 10 evaluation episodes
