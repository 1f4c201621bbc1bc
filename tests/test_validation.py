"""The run's one validation pass (``td3_lightning/validation.py``): run once by the command line when the Trainer is
built, and by a Python user's ``trainer.fit`` from the datamodule's ``setup``."""

from __future__ import annotations

import pytest
import torch
import yaml
from conftest import quiet_trainer

from td3_lightning import TD3, EnvLoop, ReplayDataModule, validation
from td3_lightning.cli import main
from td3_lightning.errors import UserInputError


def _python_run(**data_kwargs):
    dm = ReplayDataModule("td3test/Counting-v0", warmup_steps=12, batch_size=8, buffer_size=1_000, **data_kwargs)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8], policy_checkpoints=True)
    return model, dm, quiet_trainer(max_steps=4, callbacks=[EnvLoop()])


def test_a_python_fit_is_validated_before_it_trains():
    model, dm, trainer = _python_run(num_envs=2)
    with pytest.raises(UserInputError) as refused:
        trainer.fit(model, dm)
    assert str(refused.value) == ("model.policy_checkpoints assesses the episodes of one env (data.num_envs 2): set "
                                  "data.num_envs 1, or model.policy_checkpoints false")
    assert trainer.global_step == 0 and dm.buffer is None  # refused in setup: nothing collected, no buffer built


def test_each_stage_of_a_python_trainer_is_validated():
    model, dm, trainer = _python_run(num_envs=2, eval_episodes=1)
    trainer.validate(model, dm)  # plays with the policy: nothing to refuse
    with pytest.raises(UserInputError, match=r"^model\.policy_checkpoints assesses the episodes of one env"):
        trainer.fit(model, dm)  # fit's own checks run on the same Trainer
    assert trainer.global_step == 0


def test_a_python_run_plays_no_fewer_episodes_than_processes():
    model, dm, trainer = _python_run(num_envs=1, test_episodes=1)
    trainer.fit(model, dm)
    assert trainer.global_step == 4
    model, dm, _ = _python_run(num_envs=1, test_episodes=1)
    two = quiet_trainer(max_steps=4, callbacks=[EnvLoop()], strategy="ddp", devices=2, accelerator="cpu")
    with pytest.raises(UserInputError, match=r"^data\.test_episodes \(1\) must be at least the number of processes "
                                             r"\(2\): each process plays its share of the episodes$"):
        validation.validate_run(two, model, dm, "test")


def test_the_command_line_validates_a_run_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []
    run = validation.validate_run

    def counted(trainer, model, data, stage, checkpoint=None, new_run=False):
        calls.append((stage, checkpoint is None))
        return run(trainer, model, data, stage, checkpoint, new_run)

    monkeypatch.setattr(validation, "validate_run", counted)
    monkeypatch.setattr("td3_lightning.cli.validate_run", counted)
    args = ["--config", "pendulum.yaml", "--model.hidden_dims", "[8]", "--data.warmup_steps", "8",
            "--trainer.limit_val_batches", "0", "--data.test_episodes", "1"]
    main(["fit", *args, "--trainer.max_steps", "4"])
    assert calls == [("fit", True)]  # the CLI's pass; the datamodule's setup finds the run validated
    main(["fit", *args, "--trainer.max_steps", "8", "--ckpt_path", "last"])
    assert calls == [("fit", True), ("fit", False)]  # a resume: validated against its checkpoint's facts


def test_a_resume_may_repeat_its_checkpoints_own_model_options(tmp_path, monkeypatch, capsys):
    """A resume trains its checkpoint's model: a given option that equals the checkpoint's is checked with the
    checkpoint's other options (SALE needs hard target updates: the checkpoint has them, the command line not)."""
    monkeypatch.chdir(tmp_path)
    args = ["--config", "pendulum.yaml", "--model.hidden_dims", "[8]", "--data.warmup_steps", "8",
            "--trainer.limit_val_batches", "0", "--data.test_episodes", "1"]
    main(["fit", *args, "--model.embedding_dim", "8", "--model.target_update_every", "4", "--trainer.max_steps", "4"])
    main(["fit", *args, "--model.embedding_dim", "8", "--trainer.max_steps", "8", "--ckpt_path", "last"])
    resumed = torch.load(tmp_path / "lightning_logs/version_1/checkpoints/last.ckpt", weights_only=False)
    assert resumed["global_step"] == 8 and resumed["hyper_parameters"]["target_update_every"] == 4


def test_print_config_refuses_a_checkpoint_file_the_run_refuses_and_prints_a_template_as_given(tmp_path, monkeypatch,
                                                                                                 capsys):
    """An unreadable or missing --ckpt_path file: --print_config's error is the run's (exit 2); --ckpt_path last with
    no run yet (a config template): the options as given."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.ckpt").write_text("hello\n")
    for name, error in [("bad.ckpt", "error: cannot read checkpoint bad.ckpt: the file is truncated or corrupt"),
                        ("lats", "error: checkpoint file not found: lats; pass an existing .ckpt file to --ckpt_path "
                                 "(or --ckpt_path last: ")]:
        for printing in (["--print_config"], []):
            with pytest.raises(SystemExit) as exit_info:
                main(["fit", "--config", "pendulum.yaml", "--ckpt_path", name, *printing])
            out = capsys.readouterr()
            assert exit_info.value.code == 2 and out.err.startswith(error) and not out.out, (name, printing, out)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml", "--ckpt_path", "last", "--print_config"])
    out = capsys.readouterr()
    assert exit_info.value.code == 0 and yaml.safe_load(out.out)["ckpt_path"] == "last", out.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.ckpt"]
