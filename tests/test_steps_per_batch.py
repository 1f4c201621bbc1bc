"""Several training steps per Lightning batch (``data.steps_per_batch``): the same training,
step for step, and the same step counts, as one training step per batch."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from conftest import quiet_trainer
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from td3_lightning import TD3, EnvLoop, ReplayDataModule
from td3_lightning.data import chunk_steps

ENV = "td3test/ConstantReward-v0"


class _Counts(Callback):
    """What the loop did: batches, validations (at which training step), logging steps."""

    def __init__(self) -> None:
        self.batches = 0
        self.validations: list[int] = []
        self.log_steps: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches += 1

    def on_validation_start(self, trainer, pl_module):
        self.validations.append(trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer._logger_connector.should_update_logs:
            self.log_steps.append(trainer.fit_loop.epoch_loop._batches_that_stepped + 1)


def _train(steps_per_batch: int, max_steps: int = 60, ckpt_path=None, callbacks=(), **data):
    """Fit (checkpointing on only when a ModelCheckpoint is passed) and return what it did."""
    L.seed_everything(5)
    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=60, eval_episodes=1,
                          steps_per_batch=steps_per_batch, **data)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16], policy_freq=3)
    counts = _Counts()
    trainer = quiet_trainer(max_steps=max_steps, val_check_interval=28, log_every_n_steps=28,
                            callbacks=[EnvLoop(), counts, *callbacks],
                            enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks))
    trainer.fit(model, dm, ckpt_path=ckpt_path)
    return model, dm, trainer, counts


def _assert_same_training(a, b) -> None:
    (model_a, dm_a, trainer_a, _), (model_b, dm_b, trainer_b, _) = a, b
    assert trainer_a.global_step == trainer_b.global_step
    assert (model_a.num_critic_updates, model_a.num_actor_updates) == (model_b.num_critic_updates,
                                                                        model_b.num_actor_updates)
    sa, sb = model_a.state_dict(), model_b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    for field in ("obs", "action", "reward", "next_obs", "terminated"):
        assert torch.equal(getattr(dm_a.buffer, field), getattr(dm_b.buffer, field)), field
    for opt_a, opt_b in zip(trainer_a.optimizers, trainer_b.optimizers):
        st_a, st_b = opt_a.state_dict()["state"], opt_b.state_dict()["state"]
        assert all(torch.equal(st_a[i]["exp_avg"], st_b[i]["exp_avg"]) for i in st_a)


@pytest.mark.parametrize("steps_per_batch, batches", [(4, 15), (7, 9)])  # 7: chunks end at 7, 14, ..., 56, 60
def test_chunks_train_bit_for_bit_like_one_step_per_batch(steps_per_batch, batches):
    one, chunked = _train(1), _train(steps_per_batch)
    _assert_same_training(one, chunked)
    assert one[2].global_step == 60 and one[0].num_actor_updates == 20
    assert one[3].batches == 60 and chunked[3].batches == batches
    assert one[3].validations == chunked[3].validations == [28, 56]
    assert one[3].log_steps == chunked[3].log_steps == [28, 56]
    assert one[1].num_sampled == chunked[1].num_sampled == 60  # no batch drawn ahead, none lost
    assert chunked[2].fit_loop.epoch_loop.batch_progress.total.completed == 60  # counted in training steps


def test_a_chunk_stops_at_max_steps_and_keeps_two_envs_in_step():
    one = _train(1, max_steps=58, num_envs=2, vector_mode="sync")
    chunked = _train(14, max_steps=58, num_envs=2, vector_mode="sync")  # 14 divides 28 and 14
    _assert_same_training(one, chunked)
    assert chunked[2].global_step == 58 and chunked[3].batches == 5  # 14, 28, 42, 56, 58
    assert chunked[3].validations == [28, 56]


@pytest.mark.parametrize("before, after", [(4, 4), (1, 4), (4, 1), (4, 7)])
def test_resume_continues_exactly_with_any_steps_per_batch(tmp_path, before, after):
    """Stop at step 40 (not a multiple of the validation interval 28) and resume with the same or
    another steps_per_batch: the same weights, and validation still at step 56."""
    straight = _train(1)
    every = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=40, save_top_k=-1, filename="s{step}",
                            auto_insert_metric_name=False)
    _train(before, max_steps=40, callbacks=[every])  # 40 steps + 20 warm-up: at an episode end (20-step episodes)
    resumed = _train(after, ckpt_path=tmp_path / "s40.ckpt")
    _assert_same_training(straight, resumed)
    assert resumed[3].validations == [56] and resumed[3].log_steps == [56]
    assert resumed[2].fit_loop.epoch_loop.batch_progress.total.completed == 60  # Lightning's batch count = steps


def test_a_checkpoint_that_counted_chunks_as_single_batches_resumes_on_step(tmp_path):
    """The first chunked checkpoints kept Lightning's batch count at one per chunk (10 at step 40);
    it resumes with validation still at step 56."""
    straight = _train(1)
    every = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=40, save_top_k=-1, filename="s{step}",
                            auto_insert_metric_name=False)
    _train(4, max_steps=40, callbacks=[every])
    ckpt = torch.load(tmp_path / "s40.ckpt", weights_only=False)
    progress = ckpt["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert progress["total"] == {"ready": 40, "completed": 39, "started": 40, "processed": 40}  # saved mid-batch
    for part in ("total", "current"):
        progress[part] = {"ready": 10, "completed": 9, "started": 10, "processed": 10}  # as they were saved
    torch.save(ckpt, tmp_path / "old.ckpt")
    resumed = _train(4, ckpt_path=tmp_path / "old.ckpt")
    _assert_same_training(straight, resumed)
    assert resumed[3].validations == [56] and resumed[3].log_steps == [56]


def test_intervals_that_a_chunk_would_skip_lower_it_to_their_common_divisor(tmp_path):
    every = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=30, save_top_k=-1, filename="s{step}",
                            auto_insert_metric_name=False)
    with pytest.warns(UserWarning, match=r"data.steps_per_batch 8 runs as 2 training steps per batch so that every "
                                         r"step of trainer.log_every_n_steps 28, trainer.val_check_interval 28, "
                                         r"checkpoint.every_n_train_steps 30 ends a batch"):
        lowered = _train(8, callbacks=[every])
    _assert_same_training(_train(1), lowered)
    assert lowered[1].chunk_steps == 2 and lowered[3].batches == 30
    assert lowered[3].validations == [28, 56] and lowered[3].log_steps == [28, 56]
    assert sorted(p.name for p in tmp_path.glob("s*.ckpt")) == ["s30.ckpt", "s60.ckpt"]


def test_chunk_steps_is_the_gcd_of_the_intervals_it_must_hit():
    trainer = quiet_trainer(val_check_interval=30, log_every_n_steps=50)
    assert chunk_steps(trainer, 8) == (2, ["trainer.log_every_n_steps 50", "trainer.val_check_interval 30"])
    assert chunk_steps(quiet_trainer(val_check_interval=1000, log_every_n_steps=200), 8) == (8, [])
    assert chunk_steps(quiet_trainer(val_check_interval="00:00:01:00", log_every_n_steps=40), 8) == (8, [])
    assert chunk_steps(trainer, 1) == (1, [])


def test_a_sigterm_ends_the_chunk_after_the_current_step():
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    class TermAtSecondBatch(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 4:  # batch_idx counts training steps: the second chunk of 4
                trainer._signal_connector.received_sigterm = True

    steps: list[int] = []

    class Record(TermAtSecondBatch):
        def on_exception(self, trainer, pl_module, exception):
            steps.append(trainer.global_step)

    with pytest.raises(SIGTERMException):
        _train(4, callbacks=[Record()])
    assert steps == [5]  # the first chunk (4 steps) and one step of the second


def test_a_chunk_moves_each_batch_to_the_training_device_when_the_buffer_lives_elsewhere():
    from td3_lightning.data import ReplayChunk

    dm = ReplayDataModule(ENV, warmup_steps=20, batch_size=8, buffer_size=60, buffer_device="cpu")
    dm.buffer = dm._make_buffer(torch.device("cpu"))
    first = {"obs": torch.ones(8, 2), "reward": torch.zeros(8)}
    chunk = dm.transfer_batch_to_device(ReplayChunk(dm, first), torch.device("meta"), 0)  # a GPU's place
    moved = next(iter(chunk))  # before: the buffer's CPU tensors, fed to the GPU's networks
    assert {v.device.type for v in moved.values()} == {"meta"} and moved["obs"].shape == (8, 2)
    same = dm.transfer_batch_to_device(ReplayChunk(dm, first), torch.device("cpu"), 0)
    assert next(iter(same)) is first  # on the training device already: handed over as sampled
