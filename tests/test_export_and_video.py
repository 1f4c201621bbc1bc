"""Slim checkpoints, TorchScript and ONNX export, and episode videos."""

from __future__ import annotations

import importlib.util
import math
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import imageio.v2 as imageio
import lightning as L
import pytest
import torch
from conftest import quiet_trainer

from td3_lightning import TD3, ReplayDataModule
from td3_lightning.cli import main
from td3_lightning.checkpointing import inspect_checkpoint
from td3_lightning.errors import UserInputError
from td3_lightning.export import check_format, export_torchscript, slim_checkpoint


@pytest.fixture(scope="module")
def pendulum_ckpt(tmp_path_factory):
    L.seed_everything(0)
    dm = ReplayDataModule("Pendulum-v1", warmup_steps=100, batch_size=32, buffer_size=1000)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[16, 16])
    trainer = quiet_trainer(max_steps=50)
    trainer.fit(model, dm)
    path = tmp_path_factory.mktemp("ckpt") / "full.ckpt"
    trainer.save_checkpoint(path)
    return path


def test_slim_checkpoint_keeps_the_policy_and_drops_the_rest(pendulum_ckpt, tmp_path):
    slim = slim_checkpoint(pendulum_ckpt, tmp_path / "slim.ckpt")
    full_ckpt = torch.load(pendulum_ckpt, weights_only=False)
    slim_ckpt = torch.load(slim, weights_only=False)
    assert "ReplayDataModule" in full_ckpt and "optimizer_states" in full_ckpt
    assert "ReplayDataModule" not in slim_ckpt and "optimizer_states" not in slim_ckpt
    assert slim.stat().st_size < pendulum_ckpt.stat().st_size / 2
    obs = torch.randn(64, 3)
    a_full = TD3.load_from_checkpoint(pendulum_ckpt).actor(obs)
    a_slim = TD3.load_from_checkpoint(slim).actor(obs)
    assert torch.equal(a_full, a_slim)


def test_torchscript_actor_gives_the_module_actions(pendulum_ckpt, tmp_path):
    path = export_torchscript(pendulum_ckpt, tmp_path / "actor.pt")
    scripted = torch.jit.load(str(path))
    obs = torch.randn(64, 3) * 3
    expected = TD3.load_from_checkpoint(pendulum_ckpt).actor(obs)
    assert torch.allclose(scripted(obs), expected, atol=1e-6)
    assert scripted(obs).abs().max() <= 2.0
    with pytest.raises(UserInputError) as info:  # the export given where a checkpoint is expected: said as such
        inspect_checkpoint(str(path))
    assert str(info.value) == (f"cannot read checkpoint {path}: it is a TorchScript archive (an exported actor?), not "
                               "a td3_lightning checkpoint: give the .ckpt it was exported from")


def test_an_onnx_file_given_as_a_checkpoint_is_said_as_such(tmp_path):
    path = tmp_path / "actor.onnx"
    path.write_bytes(b"\x08\x08\x12\x07pytorch")  # an ONNX model's first bytes (a protobuf, not a zip)
    with pytest.raises(UserInputError) as info:
        inspect_checkpoint(str(path))
    assert str(info.value) == (f"cannot read checkpoint {path}: it is an ONNX model (an exported actor?), not a "
                               "td3_lightning checkpoint: give the .ckpt it was exported from")


def test_onnx_actor_gives_the_module_actions_at_any_batch_size(pendulum_ckpt, tmp_path, capsys):
    ort = pytest.importorskip("onnxruntime")
    out = tmp_path / "actor.onnx"
    main(["export", "--ckpt_path", str(pendulum_ckpt), "--out", str(out), "--format", "onnx"])
    assert f"wrote {out}" in capsys.readouterr().out
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["observation"]
    assert [o.name for o in session.get_outputs()] == ["action"]
    actor = TD3.load_from_checkpoint(pendulum_ckpt).actor
    for batch in (1, 7, 64):
        obs = torch.randn(batch, 3) * 3
        (action,) = session.run(None, {"observation": obs.numpy()})
        assert action.shape == (batch, 1)
        assert torch.allclose(torch.from_numpy(action), actor(obs).detach(), atol=1e-5)
    assert not list(tmp_path.glob(".*")), "no temporary file left behind"


def test_export_of_a_missing_checkpoint_is_one_line_and_writes_nothing(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--ckpt_path", str(tmp_path / "nope.ckpt"), "--out", str(tmp_path / "a.onnx"),
              "--format", "onnx"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: checkpoint file not found") and "\n" not in err
    assert list(tmp_path.iterdir()) == []


def test_onnx_export_without_onnx_installed_says_how_to_install_it_and_writes_nothing(pendulum_ckpt, tmp_path,
                                                                                      monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--ckpt_path", str(pendulum_ckpt), "--out", str(tmp_path / "actor.onnx")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: ONNX export needs the onnx package, which is not installed: install td3_lightning's onnx extra, "
        'pip install -c constraints.txt -e ".[onnx]"')
    assert list(tmp_path.iterdir()) == []


def test_test_records_episode_videos(pendulum_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["test", "--config", "pendulum.yaml", "--data.test_episodes", "2", "--data.record_test", "1",
          "--ckpt_path", str(pendulum_ckpt)])
    videos = list(tmp_path.glob("lightning_logs/version_0/videos/*.mp4"))
    assert [v.name for v in videos] == ["test-step50-seed0.mp4"]
    reader = imageio.get_reader(videos[0])
    frames = reader.count_frames()
    assert frames == 201  # the first observation + 200 steps
    assert reader.get_data(0).shape[2] == 3
    assert "test: 2 episodes" in capsys.readouterr().out


def test_a_second_validate_without_a_logger_keeps_the_videos_already_there(pendulum_ckpt, tmp_path, monkeypatch,
                                                                          lightning_log):
    monkeypatch.chdir(tmp_path)
    validate = ["validate", "--config", "pendulum.yaml", "--trainer.logger", "false", "--data.eval_episodes", "1",
                "--data.record_val", "1", "--ckpt_path", str(pendulum_ckpt)]
    main(validate)
    first = tmp_path / "videos/val-step50-seed1000.mp4"
    written = first.stat().st_mtime_ns
    main(validate)  # before: the first run's video was replaced
    assert sorted(v.name for v in (tmp_path / "videos").iterdir()) == ["val-step50-seed1000-v1.mp4",
                                                                      "val-step50-seed1000.mp4"]
    assert first.stat().st_mtime_ns == written
    said = [m for m in lightning_log.messages if m.startswith("video of episode")]
    assert said[-1].endswith(f"): {tmp_path / 'videos/val-step50-seed1000-v1.mp4'}") and len(said) == 2
    assert imageio.get_reader(tmp_path / "videos/val-step50-seed1000-v1.mp4").count_frames() == 201


def test_more_videos_than_test_episodes_records_each_episode_and_says_so(pendulum_ckpt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning) as caught:
        main(["test", "--config", "pendulum.yaml", "--data.test_episodes", "1", "--data.record_test", "2",
              "--ckpt_path", str(pendulum_ckpt)])
    assert [str(w.message) for w in caught if "record_test" in str(w.message)] == [
        "data.record_test 2 asks for more videos than the 1 episode of data.test_episodes: 1 is recorded; set "
        "data.record_test 1, or raise data.test_episodes"]
    assert [v.name for v in tmp_path.glob("lightning_logs/version_0/videos/*.mp4")] == ["test-step50-seed0.mp4"]


def test_tensorboard_gets_eval_videos_every_n_validations_and_the_val_return_as_hp_metric(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    L.seed_everything(0)
    dm = ReplayDataModule("Pendulum-v1", warmup_steps=50, batch_size=16, buffer_size=500, eval_episodes=1,
                          tensorboard_video_every=2)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8, 8])
    from td3_lightning.hp_metric import HpMetric

    logger = TensorBoardLogger(tmp_path, name="tb", default_hp_metric=False)
    quiet_trainer(max_steps=60, logger=logger, val_check_interval=20, callbacks=[HpMetric()]).fit(model, dm)

    events = EventAccumulator(logger.log_dir, size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    videos = events.Images("val/video")
    assert [v.step for v in videos] == [20, 60]  # validation runs 1 and 3 of 3
    gif = imageio.mimread(videos[0].encoded_image_string, format="gif")
    assert len(gif) == 201 and gif[0].shape[1] == videos[0].width <= 160  # first observation + 200 steps
    val = [e.value for e in events.Scalars("val/return")]
    assert len(val) == 3
    assert [e.value for e in events.Scalars("hp_metric")] == val  # no -1 placeholder
    assert "_hparams_/experiment" in events.PluginTagToContent("hparams")


def test_an_env_that_cannot_render_here_costs_the_videos_not_the_training(tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger

    from td3_lightning.errors import UserInputError

    L.seed_everything(0)
    dm = ReplayDataModule("td3test/NoDisplay-v0", warmup_steps=20, batch_size=8, buffer_size=200, eval_episodes=1,
                          tensorboard_video_every=1)
    model = TD3(dm.obs_shape, dm.action_low, dm.action_high, hidden_dims=[8, 8])
    trainer = quiet_trainer(max_steps=40, logger=TensorBoardLogger(tmp_path, name="tb"), val_check_interval=20)
    with pytest.warns(UserWarning, match=r"cannot render frames here \(RuntimeError: an OpenGL platform library has "
                                         r"not been loaded into this process\): no TensorBoard videos; for MuJoCo "
                                         r"without a display set MUJOCO_GL=egl") as caught:
        trainer.fit(model, dm)
    assert not [w for w in caught if "DISPLAY" in str(w.message)]  # the display library's own warning: not repeated
    assert trainer.global_step == 40 and dm.tensorboard_video_every == 0
    assert trainer.callback_metrics["val/return"].item() == 20.0

    dm.record_test = 1
    with pytest.raises(UserInputError, match=r"^data.record_test: td3test/NoDisplay-v0 cannot render frames here "
                                             r"\(RuntimeError: .*\); for MuJoCo .*, or set data.record_test 0$"):
        quiet_trainer().test(model, dm)


def _export(args: list[str], cwd, cli_env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "td3_lightning", "export", *args], cwd=cwd, env=cli_env,
                          capture_output=True, text=True, timeout=300, check=False)


def _snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("out, overwrite", [("run.ckpt", False), ("run.ckpt", True), ("./sub/../run.ckpt", True),
                                            ("link.ckpt", True)],
                         ids=["same-name", "same-name-overwrite", "other-spelling", "symlink"])
def test_export_refuses_to_write_over_its_own_checkpoint(out, overwrite, pendulum_ckpt, tmp_path, cli_env):
    shutil.copy(pendulum_ckpt, tmp_path / "run.ckpt")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.ckpt").symlink_to(tmp_path / "run.ckpt")
    before = _snapshot(tmp_path)
    proc = _export(["--ckpt_path", "run.ckpt", "--out", out, *(["--overwrite"] if overwrite else [])],
                   tmp_path, cli_env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr == (f"error: --out {out} is the checkpoint being exported (--ckpt_path run.ckpt); "
                           "write the export to another file\n")
    assert _snapshot(tmp_path) == before  # the full checkpoint byte for byte, nothing new
    assert (tmp_path / "link.ckpt").is_symlink()


def test_export_replaces_an_existing_file_only_with_overwrite(pendulum_ckpt, tmp_path, cli_env):
    (tmp_path / "policy.ckpt").write_bytes(b"an earlier export")
    before = _snapshot(tmp_path)
    args = ["--ckpt_path", str(pendulum_ckpt), "--out", "policy.ckpt"]
    refused = _export(args, tmp_path, cli_env)
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr == ("error: --out policy.ckpt exists; pass --overwrite to replace it, "
                              "or choose another --out\n")
    assert _snapshot(tmp_path) == before

    replaced = _export([*args, "--overwrite"], tmp_path, cli_env)
    assert replaced.returncode == 0, replaced.stderr[-2000:]
    assert list(_snapshot(tmp_path)) == ["policy.ckpt"]  # no temporary file left behind
    slim = torch.load(tmp_path / "policy.ckpt", weights_only=True)
    assert "state_dict" in slim and "optimizer_states" not in slim


@pytest.mark.parametrize("folder", ["exports", "exports.d"])  # a suffix of a folder's name names no format
def test_export_to_a_folder_is_one_line_and_writes_nothing(folder, pendulum_ckpt, tmp_path, cli_env):
    (tmp_path / folder).mkdir()
    proc = _export(["--ckpt_path", str(pendulum_ckpt), "--out", folder, "--overwrite"], tmp_path, cli_env)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: --out {folder} is a folder; give the file to write, e.g. --out "
                           f"{folder}/policy.ckpt\n")
    assert _snapshot(tmp_path) == {}


def test_export_to_a_folder_not_made_yet_or_one_that_cannot_be_written_is_one_line(pendulum_ckpt, tmp_path, cli_env):
    proc = _export(["--ckpt_path", str(pendulum_ckpt), "--out", "exports/"], tmp_path, cli_env)
    assert proc.returncode == 2  # before: a file named `exports`
    assert proc.stderr == ("error: --out exports/ is a folder; give the file to write, e.g. --out "
                           "exports/policy.ckpt\n")
    proc = _export(["--ckpt_path", str(pendulum_ckpt), "--out", "/proc/policy.ckpt"], tmp_path, cli_env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1  # before: a FileNotFoundError traceback
    assert proc.stderr.startswith("error: --out /proc/policy.ckpt: ") and "choose" in proc.stderr
    assert _snapshot(tmp_path) == {}


def test_export_to_the_home_folder_says_where_it_wrote(pendulum_ckpt, tmp_path, cli_env):
    home = tmp_path / "home"
    home.mkdir()
    proc = _export(["--ckpt_path", str(pendulum_ckpt), "--out", "~/policy.ckpt"], tmp_path,
                   {**cli_env, "HOME": str(home)})
    assert proc.returncode == 0, proc.stderr[-2000:]  # before: written, then a FileNotFoundError for `~/policy.ckpt`
    assert proc.stdout.strip().splitlines()[-1].startswith(f"wrote {home / 'policy.ckpt'} (")
    assert (home / "policy.ckpt").is_file() and not (tmp_path / "~").exists()


README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readmes_torchscript_line_gives_an_action_for_env_step(pendulum_ckpt, tmp_path, monkeypatch):
    """An exported actor is for inference: its actions need no grad, so env.step takes them as they are."""
    line = re.search(r'`(torch\.jit\.load\("actor\.pt"\)\(.*?\)\[0\])`', README.read_text()).group(1)
    export_torchscript(pendulum_ckpt, tmp_path / "actor.pt")
    monkeypatch.chdir(tmp_path)
    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    action = eval(line, {"torch": torch, "obs": obs})  # the README's line as written
    assert isinstance(action, torch.Tensor) and action.shape == (1,)
    assert action.requires_grad is False
    assert bool(((action >= -2.0) & (action <= 2.0)).all())  # Pendulum's torque bounds
    next_obs, reward, *_ = env.step(action)
    assert next_obs.shape == (3,) and math.isfinite(float(reward))
    env.close()


def test_the_readmes_export_lines_run_as_written_where_a_run_is(pendulum_ckpt, tmp_path, cli_env):
    checkpoints = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    checkpoints.mkdir(parents=True)
    shutil.copy(pendulum_ckpt, checkpoints / "last.ckpt")
    shutil.copy(pendulum_ckpt, checkpoints / "best-step50.ckpt")
    commands = [shlex.split(line, comments=True)[3:] for line in README.read_text().splitlines()
                if line.startswith("python -m td3_lightning export ")]
    assert [c[c.index("--out") + 1] for c in commands] == ["policy.ckpt", "actor.pt", "actor.onnx"]
    for command in commands:
        if any(t.lower().endswith(".onnx") for t in command) and importlib.util.find_spec("onnx") is None:
            continue  # the onnx extra
        proc = _export(command[1:], tmp_path, cli_env)
        assert proc.returncode == 0, (command, proc.stderr[-2000:])
        assert f"wrote {command[command.index('--out') + 1]}" in proc.stdout
    assert TD3.load_from_checkpoint(tmp_path / "policy.ckpt").hparams.obs_shape == [3]
    assert torch.jit.load(str(tmp_path / "actor.pt"))(torch.zeros(1, 3)).shape == (1, 1)


class _Opaque:  # an object that a weights-only load refuses
    pass


def test_a_training_checkpoint_is_told_by_its_optimizer_or_loop_state(pendulum_ckpt, tmp_path):
    from td3_lightning.checkpointing import is_training_checkpoint

    slim = slim_checkpoint(pendulum_ckpt, tmp_path / "slim.ckpt")
    torch.save({"state_dict": {}, "optimizer_states": [], "callbacks": {"x": _Opaque()}}, tmp_path / "other.ckpt")
    torch.save({"state_dict": {}, "callbacks": {"x": _Opaque()}}, tmp_path / "weights.ckpt")
    (tmp_path / "notes.txt").write_text("optimizer_states\n")
    assert is_training_checkpoint(pendulum_ckpt) and is_training_checkpoint(tmp_path / "other.ckpt")
    assert not any(is_training_checkpoint(p) for p in (slim, tmp_path / "weights.ckpt", tmp_path / "notes.txt"))
    assert not is_training_checkpoint(export_torchscript(pendulum_ckpt, tmp_path / "actor.pt"))


def test_export_never_replaces_a_training_checkpoint_even_with_overwrite(pendulum_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    shutil.copy(pendulum_ckpt, tmp_path / "run.ckpt")
    later = torch.load(pendulum_ckpt, weights_only=False)
    later["global_step"] = 99
    torch.save(later, tmp_path / "later_run.ckpt")  # another run's resumable checkpoint
    main(["export", "--ckpt_path", "run.ckpt", "--out", "policy.ckpt"])
    capsys.readouterr()
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--ckpt_path", "run.ckpt", "--out", "later_run.ckpt", "--overwrite"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (
        "error: --out later_run.ckpt is a resumable training checkpoint (it holds optimizer and loop state), which "
        "export never replaces, even with --overwrite; choose another --out, or delete that file by hand if you no "
        "longer need it\n")
    assert _snapshot(tmp_path) == before  # both full checkpoints and the earlier export byte for byte

    main(["export", "--ckpt_path", "later_run.ckpt", "--out", "policy.ckpt", "--overwrite"])  # slim over slim
    assert "wrote policy.ckpt" in capsys.readouterr().out
    replaced = torch.load(tmp_path / "policy.ckpt", weights_only=True)
    assert replaced["global_step"] == 99 and "optimizer_states" not in replaced


@pytest.mark.parametrize("out, line", [
    ("nofolder/policy.ckpt", "error: --out nofolder/policy.ckpt: the folder nofolder does not exist; --out must be a "
                             "file in an existing folder (create the folder first)"),
    ("notes.txt/policy.ckpt", "error: --out notes.txt/policy.ckpt: the folder notes.txt is a file, not a folder; "
                              "--out must be a file in an existing folder (create the folder first)"),
])
def test_export_into_a_folder_that_is_not_there_writes_nothing(out, line, pendulum_ckpt, tmp_path, monkeypatch,
                                                               capsys):
    # before: the missing folder was created; a file on the way was a traceback
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("notes\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--ckpt_path", str(pendulum_ckpt), "--out", out])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [line]
    assert _snapshot(tmp_path) == {"notes.txt": b"notes\n"}


@pytest.mark.parametrize("args, line", [
    (["--out", "actor.onnx", "--format", "torchscript"],
     "error: --out actor.onnx does not name a torchscript file (--format torchscript): add --format onnx, or name it "
     "actor.pt"),
    (["--out", "policy.ckpt", "--format", "torchscript"],
     "error: --out policy.ckpt does not name a torchscript file (--format torchscript): add --format slim, or name it "
     "policy.pt"),
    (["--out", "actor.pt", "--format", "onnx"], "error: --out actor.pt does not name an onnx file (--format onnx): "
                                                "name it actor.onnx"),
    (["--out", "actor.pt"], "error: --out actor.pt: say what to write: --format torchscript (the actor, for "
                            "torch.jit.load) or --format slim (a checkpoint for test and TD3.load_from_checkpoint)"),
    # before: written as a slim checkpoint named actor.txt
    (["--out", "actor.txt"], "error: --out actor.txt: the suffix .txt names no format; name it actor.ckpt (a slim "
                             "checkpoint), actor.onnx (ONNX) or actor.pt with --format torchscript, or give --format "
                             "slim or --format torchscript to keep the name"),
    (["--out", "notes.bak"], "error: --out notes.bak: the suffix .bak names no format; name it notes.ckpt (a slim "
                             "checkpoint), notes.onnx (ONNX) or notes.pt with --format torchscript, or give --format "
                             "slim or --format torchscript to keep the name"),
    (["--out", "actor.txt", "--format", "onnx"], "error: --out actor.txt does not name an onnx file (--format onnx): "
                                                 "name it actor.onnx"),
])
def test_export_to_a_file_named_for_another_format_is_one_line(args, line, pendulum_ckpt, tmp_path, monkeypatch,
                                                                capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--ckpt_path", str(pendulum_ckpt), *args])
    assert exit_info.value.code == 2 and capsys.readouterr().err.splitlines() == [line]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("out, fmt", [("actor.onnx", "onnx"), ("policy.ckpt", "slim"), ("policy", "slim"),
                                      ("actor.ONNX", "onnx")])
def test_export_without_format_writes_what_the_file_name_says(out, fmt):
    # before: --out actor.onnx alone was refused ("add --format onnx")
    assert check_format(out, None) == fmt


def test_a_format_given_writes_a_file_of_any_name_but_onnx(pendulum_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["export", "--ckpt_path", str(pendulum_ckpt), "--out", "policy.txt", "--format", "slim"])
    main(["export", "--ckpt_path", str(pendulum_ckpt), "--out", "actor.bin", "--format", "torchscript"])
    assert capsys.readouterr().out.splitlines()[0].startswith("wrote policy.txt (")
    assert TD3.load_from_checkpoint(tmp_path / "policy.txt").hparams.obs_shape == [3]
    assert torch.jit.load(str(tmp_path / "actor.bin"))(torch.zeros(1, 3)).shape == (1, 1)


@pytest.mark.parametrize("option", ["--data.env_kwargs.aid_features", "--model.gamma"])
def test_export_given_a_config_option_says_it_reads_everything_from_the_checkpoint(option, tmp_path, capsys,
                                                                                  monkeypatch):
    from td3_lightning.export import main as export_main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        export_main([option, "x", "--out", "policy.ckpt"])
    assert info.value.code == 2 and capsys.readouterr().err == (
        f"error: unknown option {option} (export reads the networks and the env's shapes from the checkpoint: no "
        "config options; --config only chooses the run, and a run trained with options of its own is chosen by its "
        "lightning_logs/version_N/config.yaml); python -m td3_lightning export --help lists the options\n")
    assert list(tmp_path.iterdir()) == []
