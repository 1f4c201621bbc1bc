"""TD3 learns in bf16-mixed on the CPU: Pendulum-v1 reaches a deterministic evaluation mean of at least -250, the
critics under autocast, the weights in float32."""

import math

import lightning as L
import torch
from conftest import quiet_trainer

from td3_lightning import TD3, ReplayDataModule


def test_pendulum_learns_with_bf16_mixed_precision_on_cpu():
    L.seed_everything(0)
    dm = ReplayDataModule("Pendulum-v1", warmup_steps=1000, batch_size=256, buffer_size=100_000, eval_episodes=10)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, gamma=0.98, actor_lr=1e-3, critic_lr=1e-3,
                hidden_dims=[64, 64])
    dtypes = set()  # (whether autocast was on, the Q values' dtype) of each critic call in training

    def record(module, args, out):
        if module.training:
            dtypes.add((torch.is_autocast_enabled("cpu"), out.dtype))

    model.critic.register_forward_hook(record)
    trainer = quiet_trainer(max_steps=8000, val_check_interval=2000, precision="bf16-mixed", log_every_n_steps=100)
    losses = []
    trainer.callbacks.append(_LossRecorder(losses))
    trainer.fit(model, dm)
    assert dtypes == {(True, torch.float32)}  # the critics ran under autocast, their last layer in float32
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights stay float32
    assert len(losses) == 80 and all(math.isfinite(x) for x in losses)
    final = trainer.callback_metrics["val/return"].item()
    assert final >= -250, final  # -177 measured; an untrained policy scores about -1200


class _LossRecorder(L.Callback):
    """The logged critic loss (every ``log_every_n_steps``)."""

    def __init__(self, out: list[float]) -> None:
        self.out = out

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step % trainer.log_every_n_steps == 0:
            self.out.append(trainer.callback_metrics["train/critic_loss"].item())
