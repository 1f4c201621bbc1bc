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

    for name in ("_parse_ckpt_path", "_set_seed", "_instantiate_trainer"):
        assert callable(getattr(LightningCLI, name, None)), name
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
