"""One test per function of td3_lightning/_lightning.py: each fails loudly if the Lightning
private attribute or method it reaches changes."""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint as LightningModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.core.optimizer import LightningOptimizer

from td3_lightning import _lightning
from td3_lightning.data import ReplayDataModule
from td3_lightning.module import TD3


class _Counting(L.LightningModule):
    """Manual optimization whose training step only counts an optimizer step, as TD3's direct path does."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.layer = torch.nn.Linear(1, 1)
        self.calls = 0
        self.seen: list[tuple[list, bool]] = []

    def training_step(self, batch, batch_idx):
        trainer = self.trainer
        self.seen.append((_lightning.lightning_optimizers(trainer), _lightning.step_counting_hooks_exist(trainer)))
        before = trainer.global_step
        _lightning.count_optimizer_step(self.optimizers())
        assert trainer.global_step == before + 1
        self.calls += 1

    def configure_optimizers(self):
        return torch.optim.SGD(self.layer.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(100, 1), batch_size=1)


def _fit_counting(max_steps: int) -> tuple[_Counting, L.Trainer]:
    model = _Counting()
    trainer = L.Trainer(max_steps=max_steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(model)
    return model, trainer


def test_count_optimizer_step_advances_global_step_by_one():
    model, trainer = _fit_counting(3)
    assert model.calls == 3 and trainer.global_step == 3  # the fit stops at max_steps counted this way


def test_lightning_optimizers_are_the_strategy_wrappers_with_step_hooks():
    model, _ = _fit_counting(1)
    optimizers, hooks = model.seen[0]
    assert len(optimizers) == 1 and isinstance(optimizers[0], LightningOptimizer)
    assert isinstance(optimizers[0].optimizer, torch.optim.SGD) and hooks is True


def test_runs_under_fabric_is_false_for_a_trainer_module():
    model = _Counting()
    assert hasattr(model, "_fabric") and not _lightning.runs_under_fabric(model)


def test_model_checkpoint_has_the_private_methods_save_last_checkpoint_now_calls():
    for name in ("_should_skip_saving_checkpoint", "_should_save_on_train_epoch_end", "_save_last_checkpoint",
                 "_monitor_candidates"):
        assert callable(getattr(LightningModelCheckpoint, name, None)), name


def test_checkpoint_state_mode_reads_the_mode_from_the_state_key():
    from td3_lightning.checkpointing import ModelCheckpoint

    for cls in (LightningModelCheckpoint, ModelCheckpoint):
        for mode in ("min", "max"):
            assert _lightning.checkpoint_state_mode(cls(monitor="val/return", mode=mode).state_key) == mode
    assert _lightning.checkpoint_state_mode("Timer") is None
    assert _lightning.checkpoint_state_mode("ModelCheckpoint{'mode': 'sideways'}") is None


def test_save_last_checkpoint_now_writes_last_ckpt_once_per_step(tmp_path):
    checkpoint = LightningModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0, save_on_train_epoch_end=False)
    steps: list[int] = []

    class SaveAtStep2(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, *args):
            if trainer.global_step == 2:
                _lightning.save_last_checkpoint_now(checkpoint, trainer)
                steps.append(torch.load(tmp_path / "last.ckpt", weights_only=False)["global_step"])
                (tmp_path / "last.ckpt").unlink()
                _lightning.save_last_checkpoint_now(checkpoint, trainer)  # already saved at this step: skipped
                steps.append(int((tmp_path / "last.ckpt").exists()))

    trainer = L.Trainer(max_steps=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                        accelerator="cpu", devices=1, callbacks=[checkpoint, SaveAtStep2()])
    trainer.fit(_Counting())
    assert steps == [2, 0]


def test_lightning_cli_private_steps_reach_the_public_hooks():
    import inspect

    from td3_lightning.cli import TD3CLI

    for name in ("_parse_ckpt_path", "_set_seed", "_instantiate_trainer", "_run_subcommand"):
        assert callable(getattr(LightningCLI, name, None)), name
    assert "self._run_subcommand(self.subcommand)" in inspect.getsource(LightningCLI.__init__)  # run_subcommand's
    assert "self._subcommand_parsers" in inspect.getsource(LightningCLI._add_subcommands)
    calls: list[str] = []

    class Probe(TD3CLI):
        def read_checkpoint_hparams(self, read):
            calls.append("read_checkpoint_hparams")
            super().read_checkpoint_hparams(read)

        def set_seed(self, seed):
            calls.append("set_seed")
            super().set_seed(seed)

        def trainer_callbacks(self, config, callbacks):
            calls.append("trainer_callbacks")
            return super().trainer_callbacks(config, callbacks)

    cli = Probe(TD3, ReplayDataModule, args=["--data.env_id", "Pendulum-v1", "--trainer.logger", "false"],
                run=False, auto_configure_optimizers=False)
    assert calls == ["read_checkpoint_hparams", "set_seed", "trainer_callbacks"]
    options = _lightning.cli_option_names(cli, [])
    assert "--model.gamma" in options and "--data.env_id" in options and "--trainer.max_steps" in options
    types = _lightning.cli_option_types(cli, [])
    assert set(types) == set(options)
    assert types["--model.gamma"][0] is float and "discount" in types["--model.gamma"][1]  # the docstring
    assert types["--data.batch_size"][0] is int and types["--trainer.max_steps"][0] is int


def test_cli_config_value_reads_inside_the_subcommand_section_when_there_is_one():
    from jsonargparse import Namespace

    from td3_lightning.cli import TD3CLI

    cli = TD3CLI(TD3, ReplayDataModule, args=["--data.env_id", "Pendulum-v1", "--trainer.logger", "false",
                                              "--seed_everything", "5", "--trainer.max_steps", "40"],
                 run=False, auto_configure_optimizers=False)
    assert cli.subcommand is None  # run=False: the config is the fit parser's, without a section
    assert _lightning.cli_config_value(cli, cli.config, "seed_everything") == 5
    assert _lightning.cli_config_value(cli, cli.config_init, "trainer")["max_steps"] == 40
    assert _lightning.cli_config_value(cli, cli.config, "no_such_key", default="x") == "x"
    cli.subcommand = "fit"  # as LightningCLI sets it when it runs a subcommand
    nested = Namespace(fit=Namespace(seed_everything=7), seed_everything=1)
    assert _lightning.cli_config_value(cli, nested, "seed_everything") == 7
    assert _lightning.cli_config_value(cli, nested, "trainer", default={}) == {}


def test_count_extra_batches_advances_the_batch_counters():
    seen: list[tuple[int, int]] = []

    class Extra(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            loop = trainer.fit_loop.epoch_loop
            if batch_idx == 0:
                before = (loop.batch_progress.total.completed, loop._batches_that_stepped)
                _lightning.count_extra_batches(trainer, 4)
                after = (loop.batch_progress.total.completed, loop._batches_that_stepped)
                seen.append((after[0] - before[0], after[1] - before[1]))
            else:
                seen.append((batch_idx, 0))

    trainer = L.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[Extra()])
    trainer.fit(_Counting())
    assert seen == [(4, 4), (5, 0)]  # the next batch's index counts the four extra ones


def test_align_batch_count_raises_the_batch_count_to_global_step():
    seen: list[int] = []

    class Align(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if trainer.global_step == 2:
                progress = trainer.fit_loop.epoch_loop.batch_progress
                progress.total.ready -= 2  # as a checkpoint that counted two steps as one batch
                seen.append(trainer.global_step - progress.total.ready)
                _lightning.align_batch_count(trainer)
                seen.append(trainer.global_step - progress.total.ready)

    trainer = L.Trainer(max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1, callbacks=[Align()])
    trainer.fit(_Counting())
    assert seen == [1, 0]  # one batch behind global_step, then level with it


def test_val_check_is_a_time_and_every_n_train_steps():
    by_time = L.Trainer(val_check_interval="00:00:01:00", logger=False, enable_checkpointing=False)
    by_steps = L.Trainer(val_check_interval=100, logger=False, enable_checkpointing=False)
    assert _lightning.val_check_is_a_time(by_time) and not _lightning.val_check_is_a_time(by_steps)
    assert _lightning.every_n_train_steps(LightningModelCheckpoint(every_n_train_steps=40)) == 40
    assert _lightning.every_n_train_steps(LightningModelCheckpoint()) == 0


def test_tensorboard_file_writer_takes_a_summary(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.proto.summary_pb2 import Summary
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    _lightning.tensorboard_file_writer(writer).add_summary(Summary(value=[Summary.Value(tag="x", simple_value=2.5)]), 7)
    writer.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("x")] == [(7, 2.5)]
