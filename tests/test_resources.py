"""What the machine refuses: the replay's memory, the disk the checkpoints need, a disk that fills mid-run."""

from __future__ import annotations

import errno
import shlex
import shutil
import warnings
from collections import namedtuple
from pathlib import Path

import pytest
import torch

import td3_lightning.checkpointing as checkpointing
from td3_lightning.checkpointing import DiskFullError, WriteRefusedError, atomic_torch_save
from td3_lightning.cli import main
from td3_lightning.data import ReplayDataModule
from td3_lightning.errors import UserInputError
from td3_lightning.replay import tensor_bytes
from td3_lightning.resources import check_replay_memory, gigabytes, warn_if_disk_short
from td3_lightning.user_input import CONFIG_DIR


@pytest.mark.parametrize("sampler, per_transition", [("uniform", 33), ("lap", 37)])
def test_the_replay_memory_is_counted_without_allocating_it(sampler, per_transition):
    """Pendulum: 3 + 3 observation floats, one action and one reward float, one flag (LAP: one priority float)."""
    dm = ReplayDataModule("Pendulum-v1", buffer_size=1000, warmup_steps=10, sampler=sampler)
    assert dm.replay_bytes() == 1000 * per_transition
    dm.spec  # noqa: B018 - probed
    built = dm._make_buffer(torch.device("cpu"))
    assert tensor_bytes(built) == dm.replay_bytes()
    big = ReplayDataModule("Pendulum-v1", buffer_size=10**12, warmup_steps=10, sampler=sampler)
    assert big.replay_bytes() == 10**12 * per_transition  # on the meta device: nothing allocated


def test_a_replay_the_memory_cannot_hold_is_one_line_with_the_size_that_fits():
    check_replay_memory(33_000, 1000, 33_000)  # fits exactly
    check_replay_memory(10**15, 10**12, None)  # not known: not checked
    with pytest.raises(UserInputError) as caught:
        check_replay_memory(33 * 10**12, 10**12, 16 * 10**9)
    assert str(caught.value) == (
        "the replay buffer needs 33000.0 GB (data.buffer_size 1000000000000 x 33 bytes per transition), more than "
        "the 16.0 GB of memory available; lower data.buffer_size to at most 436363636")
    with pytest.raises(UserInputError) as caught:  # one buffer in each process of this node
        check_replay_memory(33 * 10**9, 10**9, 40 * 10**9, processes=2)
    assert str(caught.value) == (
        "the replay buffer needs 66.0 GB (data.buffer_size 1000000000 x 33 bytes per transition, in each of 2 "
        "processes), more than the 40.0 GB of memory available; lower data.buffer_size to at most 545454545")


def test_a_fit_whose_checkpoints_will_not_fit_on_the_disk_is_warned(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 5 * 10**6, 5 * 10**6))
    with pytest.warns(UserWarning) as caught:
        warn_if_disk_short(str(tmp_path / "not_yet"), 2 * 10**9, "last.ckpt holds 1000 transitions")
    assert [str(w.message) for w in caught] == [
        f"the run's checkpoints will need about 2.0 GB (last.ckpt holds 1000 transitions) and {tmp_path} has 5 MB "
        "free: free space, or lower data.buffer_size, or set data.save_replay false (a resume then refills the "
        "buffer)"]
    assert gigabytes(3.66e9) == "3.7 GB" and gigabytes(120e6) == "120 MB" and gigabytes(3e5) == "300 kB"


def _full_disk(*args, **kwargs):
    raise RuntimeError("unexpected pos 2724544 vs 2724436") from OSError(errno.ENOSPC, "No space left on device")


def test_a_disk_that_fills_during_a_write_keeps_the_previous_file_and_says_so(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    atomic_torch_save({"step": 1}, target)
    monkeypatch.setattr(checkpointing.torch, "save", _full_disk)
    with pytest.raises(DiskFullError) as caught:
        atomic_torch_save({"step": 2}, target)
    assert str(caught.value).startswith(f"writing {target} failed: No space left on device (")
    assert str(caught.value).endswith(f"free in {tmp_path}); what was there before is kept: free some space (or "
                                      "lower data.buffer_size, or set data.save_replay false); then run the command "
                                      "again")
    assert torch.load(target)["step"] == 1 and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]
    monkeypatch.setattr(checkpointing.torch, "save", lambda *a: (_ for _ in ()).throw(ValueError("other")))
    with pytest.raises(ValueError, match="other"):  # any other failure is not told as a full disk
        atomic_torch_save({"step": 3}, target)


def test_a_write_the_machine_refuses_keeps_the_previous_file_and_says_so(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    atomic_torch_save({"step": 1}, target)

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(checkpointing.tempfile, "mkstemp", refuse)  # a folder made read-only: no file can be made
    with pytest.raises(WriteRefusedError) as caught:
        atomic_torch_save({"step": 2}, target)
    assert str(caught.value) == (f"writing {target} failed: Operation not permitted ({tmp_path}); what was there "
                                 "before is kept: make the folder writable, or write elsewhere; then run the command "
                                 "again")
    monkeypatch.undo()
    read_only = OSError(errno.EROFS, "Read-only file system")
    monkeypatch.setattr(checkpointing.torch, "save", lambda *a: (_ for _ in ()).throw(read_only))
    with pytest.raises(WriteRefusedError, match=r"failed: Read-only file system \("):  # remounted read-only midway
        atomic_torch_save({"step": 3}, target)
    assert torch.load(target)["step"] == 1 and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_what_else_the_machine_refuses_in_a_write_is_one_line_and_keeps_what_was_there(tmp_path, monkeypatch):
    from td3_lightning.checkpointing import atomic_path

    (tmp_path / "curve.png").mkdir()  # a folder in the way
    with pytest.raises(WriteRefusedError) as caught, atomic_path(tmp_path / "curve.png") as tmp:
        tmp.write_text("x")
    assert str(caught.value) == (f"writing {tmp_path / 'curve.png'} failed: Is a directory ({tmp_path / 'curve.png'}); "
                                 "what was there before is kept: move what is in the way, or write elsewhere; then "
                                 "run the command again")
    (tmp_path / "videos").write_text("")  # a file where the folder goes
    with pytest.raises(WriteRefusedError, match=r"failed: File exists .*move what is in the way"), \
            atomic_path(tmp_path / "videos" / "test.gif") as tmp:
        tmp.write_text("x")
    with pytest.raises(WriteRefusedError, match=r"failed: File name too long .*: give a shorter file name; then run"), \
            atomic_path(tmp_path / ("k" * 250 + ".ckpt")) as tmp:  # a name the file system takes, its temporary not
        tmp.write_text("x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png", "videos"] and not any((tmp_path / "curve.png")
                                                                                              .iterdir())
    with pytest.raises(OSError, match="cannot write mode") as caught, atomic_path(tmp_path / "plot.jpg"):
        raise OSError("cannot write mode RGBA as JPEG")  # no errno: a program's error, not the machine's
    assert not isinstance(caught.value, WriteRefusedError)
    monkeypatch.setattr(checkpointing.tempfile, "mkstemp", _full_disk)
    with pytest.raises(DiskFullError) as caught, atomic_path(tmp_path / "a" / "b" / "curve.png"):
        pass  # a folder not made yet: the free space of the disk it would be on (before: a FileNotFoundError)
    assert str(caught.value).startswith(f"writing {tmp_path / 'a/b/curve.png'} failed: No space left on device (")
    assert str(caught.value).endswith(f"free in {tmp_path / 'a/b'}); what was there before is kept: free some space; "
                                      "then run the command again")  # no buffer's options: no replay in a plot



def test_a_video_on_a_full_disk_is_one_line_and_leaves_no_file(tmp_path, monkeypatch, capfd):
    import gc

    import numpy as np

    from td3_lightning.video import write_video

    def no_space(self, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    frames = [np.full((16, 16, 3), i, dtype=np.uint8) for i in range(20)]
    monkeypatch.setattr(Path, "write_bytes", no_space)
    with pytest.raises(DiskFullError) as caught:
        write_video(tmp_path / "val-step5-seed0.gif", frames, 30.0)
    gc.collect()  # before: the encoder, collected, failed again with its own traceback
    assert str(caught.value).startswith(f"writing {tmp_path / 'val-step5-seed0.gif'} failed: No space left on device (")
    assert list(tmp_path.iterdir()) == [] and "Traceback" not in capfd.readouterr().err
    monkeypatch.undo()
    assert write_video(tmp_path / "val-step5-seed0.gif", frames, 30.0).stat().st_size > 0  # the same frames do go


def test_a_gif_is_encoded_in_memory_with_every_frame():
    import imageio.v2 as imageio
    import numpy as np

    from td3_lightning.video import gif_bytes

    frames = [np.full((16, 24, 3), (i * 10, 0, 255 - i * 10), dtype=np.uint8) for i in range(20)]
    decoded = imageio.mimread(gif_bytes(frames, 25.0), format="gif")
    assert len(decoded) == 20 and decoded[7].shape[:2] == (16, 24)
    assert [int(frame[0, 0, 0]) for frame in decoded] == [i * 10 for i in range(20)]
    assert imageio.get_reader(gif_bytes(frames, 25.0), format="gif").get_meta_data()["duration"] == 40

FIT = ["fit", "--config", "pendulum.yaml", "--trainer.max_steps", "120", "--trainer.val_check_interval", "40",
       "--data.warmup_steps", "50", "--model.hidden_dims", "[8]", "--data.eval_episodes", "1"]


def _fit_on_a_disk_that_fills(saves_before: int, monkeypatch, capsys, fail=_full_disk) -> tuple[int, list[str]]:
    """The exit status and the error lines of a small fit whose disk fills (or ``fail``s otherwise) after
    ``saves_before`` saves."""
    saves = []
    real_save = torch.save

    def save_then_fill(obj, f, *args, **kwargs):
        saves.append(1)
        if len(saves) > saves_before:
            fail()
        real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(checkpointing.torch, "save", save_then_fill)
    with pytest.raises(SystemExit) as exit_info:
        main(FIT)
    captured = capsys.readouterr().err
    assert "Traceback" not in captured
    return exit_info.value.code, [line for line in captured.splitlines() if line.startswith("error:")]


def test_a_fit_whose_disk_fills_ends_with_one_line_naming_its_checkpoint_and_the_command_that_goes_on(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = _fit_on_a_disk_that_fills(2, monkeypatch, capsys)
    last = tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt"
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: writing ") and "failed: No space left on device (" in err[0]
    go_on = shlex.join(["python", "-m", "td3_lightning", *FIT[:2], str(CONFIG_DIR / "pendulum.yaml"), *FIT[3:]])
    assert err[0].endswith(f"free some space (or set data.save_replay false); {last} is at step 40; go on with: "
                           f"{go_on} --ckpt_path {last}")  # not a smaller buffer: a resume refuses another size
    assert torch.load(last, weights_only=False)["global_step"] == 40  # the one written before the disk filled


@pytest.mark.parametrize("error, line", [
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 "
                                 "GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has ..."),
     "error: the GPU ran out of memory (CUDA out of memory. Tried to allocate 2.00 GiB): free the GPU of other "
     "processes, keep the replay buffer in the machine's memory (data.buffer_device cpu), or lower data.batch_size; "),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried "
                  "to allocate 40000000000 bytes. Error code 12 (Cannot allocate memory)"),
     "error: the machine ran out of memory (40.0 GB more could not be allocated): close other programs, or lower "
     "data.batch_size; "),
    (RuntimeError("backend compiler failed"),  # raised from numpy's refusal, as torch.compile's errors wrap others
     "error: the machine ran out of memory (Unable to allocate 72.8 TiB): close other programs, or lower "
     "data.batch_size; "),
])
def test_a_fit_out_of_memory_ends_with_one_line_naming_its_checkpoint(error, line, tmp_path, monkeypatch, capsys):
    from td3_lightning.module import TD3

    real_step = TD3.training_step

    def step_then_no_memory(self, *args, **kwargs):
        if self.trainer.global_step >= 60:
            if "compiler" in str(error):
                raise error from MemoryError("Unable to allocate 72.8 TiB for an array with shape (10000000000000,)")
            raise error
        return real_step(self, *args, **kwargs)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(TD3, "training_step", step_then_no_memory)
    with pytest.raises(SystemExit) as exit_info:  # before: the allocator's traceback
        main(FIT)
    err = capsys.readouterr().err
    last = tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt"
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"{line}{last} is at step 40; go on with: python -m td3_lightning ")
    if isinstance(error, torch.cuda.OutOfMemoryError):  # with no checkpoint yet, and in a test
        monkeypatch.setattr(TD3, "training_step", lambda self, *args, **kwargs: (_ for _ in ()).throw(error))
        with pytest.raises(SystemExit) as exit_info:
            main(FIT)
        assert exit_info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == (
            "error: the GPU ran out of memory (CUDA out of memory. Tried to allocate 2.00 GiB): lower data.batch_size "
            "or the networks' sizes, keep the replay buffer in the machine's memory (data.buffer_device cpu), or free "
            "the GPU of other processes; no checkpoint was written yet: run the same command again to start over")
        monkeypatch.setattr(TD3, "test_step", lambda self, *args, **kwargs: (_ for _ in ()).throw(error))
        with pytest.raises(SystemExit) as exit_info:
            main(["test", "--config", "pendulum.yaml", "--ckpt_path", str(last)])
        assert exit_info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == (
            "error: the GPU ran out of memory (CUDA out of memory. Tried to allocate 2.00 GiB): free the GPU of other "
            "processes, or play on the CPU (--trainer.accelerator cpu); then run the command again")


def test_a_fit_whose_checkpoint_folder_turns_read_only_ends_with_one_line_naming_its_checkpoint(
        tmp_path, monkeypatch, capsys):
    def read_only(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.chdir(tmp_path)
    code, err = _fit_on_a_disk_that_fills(2, monkeypatch, capsys, fail=read_only)  # before: a PermissionError traceback
    last = tmp_path / "lightning_logs/version_0/checkpoints/last.ckpt"
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: writing ") and "failed: Permission denied (" in err[0]
    go_on = shlex.join(["python", "-m", "td3_lightning", *FIT[:2], str(CONFIG_DIR / "pendulum.yaml"), *FIT[3:]])
    assert err[0].endswith(f"make the folder writable, or write elsewhere; {last} is at step 40; go on with: {go_on} "
                           f"--ckpt_path {last}")


def test_a_fit_whose_first_checkpoint_fills_the_disk_says_to_start_over(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, err = _fit_on_a_disk_that_fills(0, monkeypatch, capsys)
    assert code == 2 and len(err) == 1, err
    assert err[0].endswith("free some space (or lower data.buffer_size, or set data.save_replay false); no "
                           "checkpoint was written yet: run the same command again to start over")
    assert not list(tmp_path.glob("lightning_logs/version_0/checkpoints/*.ckpt"))


def test_a_full_disk_under_lightnings_own_writes_is_one_line_and_leaves_no_half_written_config(
        tmp_path, monkeypatch, capsys):
    import threading
    from types import SimpleNamespace

    from lightning.pytorch.cli import LightningArgumentParser
    from lightning.pytorch.loggers import TensorBoardLogger

    from td3_lightning.cli import _thread_exception

    def half_then_full(self, cfg, path, **kwargs):
        Path(path).write_text("model:\n")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.chdir(tmp_path)
    hook = threading.excepthook
    with monkeypatch.context() as patched:
        patched.setattr(LightningArgumentParser, "save", half_then_full)  # before: a traceback, half a config.yaml
        with pytest.raises(SystemExit) as exit_info:
            main(FIT)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and err.splitlines()[-1].startswith(
        f"error: writing {tmp_path / 'lightning_logs/version_0/config.yaml'} failed: No space left on device (")
    assert err.splitlines()[-1].endswith("free some space; no checkpoint was written yet: run the same command again "
                                         "to start over")
    assert not list(tmp_path.glob("lightning_logs/version_0/*.yaml"))
    steps = []

    def events_then_full(self, metrics, step=None):
        steps.append(step)
        if step >= 60:
            raise RuntimeError("event writer failed") from OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TensorBoardLogger, "log_metrics", events_then_full)  # TensorBoard's files: before, a traceback
    with pytest.raises(SystemExit) as exit_info:
        main(FIT)
    err = capsys.readouterr().err
    last = tmp_path / "lightning_logs/version_1/checkpoints/last.ckpt"
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith(f"error: writing {tmp_path / 'lightning_logs/version_1'} failed: No space "
                                           "left on device (") and f"; {last} is at step 40; go on with:" in err
    assert threading.excepthook is hook  # the command's own while it ran
    told = []

    class _AsyncWriterThread(threading.Thread):  # as TensorBoard's writer thread is named
        __module__ = "tensorboard.summary.writer.event_file_writer"

    full = OSError(errno.ENOSPC, "No space left on device")
    writer = SimpleNamespace(exc_value=full, thread=_AsyncWriterThread())
    _thread_exception(told.append, writer)  # TensorBoard hands it to the command, whose line says it
    others = [SimpleNamespace(exc_value=ValueError("a thread's own bug"), thread=writer.thread),
              SimpleNamespace(exc_value=full, thread=threading.Thread())]  # not TensorBoard's: not said by the command
    for other in others:
        _thread_exception(told.append, other)
    assert told == others

    def read_refused(self, metrics, step=None):
        raise PermissionError(errno.EACCES, "Permission denied", "/opt/teacher.ckpt")

    monkeypatch.setattr(TensorBoardLogger, "log_metrics", read_refused)  # not a write this package or a logger made
    with pytest.raises(PermissionError, match="teacher"):
        main(FIT)


def test_more_cpu_processes_than_cores_are_warned_of():
    from td3_lightning.resources import warn_if_cores_short

    with pytest.warns(UserWarning) as caught:
        warn_if_cores_short(3, 2)
    assert [str(w.message) for w in caught] == [
        "trainer.devices asks for 3 processes on 2 CPU cores: they slow each other down; use at most 2 (or a GPU)"]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_cores_short(2, 2)
        warn_if_cores_short(4, None)  # cores not known: not told


def test_a_fit_in_a_current_folder_that_cannot_be_written_is_one_line(monkeypatch, capsys):
    monkeypatch.chdir("/proc")  # exists, and no file can be made in it
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "pendulum.yaml"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().startswith(
        "error: the current folder (trainer.default_root_dir) /proc: no file can be created in this folder (")


def test_a_file_where_the_runs_go_or_a_path_too_long_is_one_line_before_anything_is_written(tmp_path, monkeypatch,
                                                                                               capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lightning_logs").write_text("notes")
    with pytest.raises(SystemExit) as exit_info:  # before: a FileExistsError traceback from the logger
        main(FIT)
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip() == (
        f"error: the folder of runs (trainer.default_root_dir/lightning_logs) {tmp_path / 'lightning_logs'} is a file; "
        "it must be a folder (an existing one or one to create)")
    assert [p.name for p in tmp_path.iterdir()] == ["lightning_logs"]
    with pytest.raises(SystemExit) as exit_info:  # before: an OSError traceback
        main([*FIT, "--trainer.default_root_dir", "d" * 300])
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip() == (
        f"error: trainer.default_root_dir {'d' * 300} cannot be a folder (File name too long); give a shorter path")
    assert [p.name for p in tmp_path.iterdir()] == ["lightning_logs"]


def test_a_stop_names_the_last_ckpt_of_this_run_only(tmp_path):
    """A new run stopped before its first checkpoint: an older run's last.ckpt in the same folder is not its own."""
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import ModelCheckpoint

    from td3_lightning.stops import Standing, StopNotice

    older = tmp_path / "last.ckpt"
    torch.save({"global_step": 200}, older)
    callback = ModelCheckpoint(dirpath=tmp_path, save_last=True)
    trainer = SimpleNamespace(callbacks=[callback], ckpt_path=None, global_step=42, max_steps=1000,
                              state=SimpleNamespace(fn="fit"))
    notice = StopNotice()
    notice.on_exception(trainer, None, KeyboardInterrupt())
    assert notice.stop is not None and notice.stop.last is None
    assert notice.stop.line(["fit"]) == ("stopped by SIGINT at training step 42 of 1000; no checkpoint was written "
                                         "yet: run the same command again to start over")
    callback.last_model_path = str(older)  # written by this run
    notice.on_exception(trainer, None, KeyboardInterrupt())
    assert (notice.stop.last, notice.stop.last_step) == (older, 200)
    tested = StopNotice()  # a test or validate run has nothing to go on from: its full disk says run it again
    full = DiskFullError("writing x failed")
    tested.on_exception(SimpleNamespace(**{**vars(trainer), "state": SimpleNamespace(fn="test")}), None, full)
    assert tested.standing is None and tested.stop is None
    failed = StopNotice()  # another failure of a fit: no line names a checkpoint, so none is read
    failed.on_exception(trainer, None, ValueError("other"))
    assert failed.standing is None and failed.stop is None
    failed.on_exception(trainer, None, full)
    assert failed.standing == Standing(older, 200) and failed.stop is None


def test_native_bfloat16_agrees_with_the_cpu_flags():
    """torch's probes against what Linux lists: avx512_bf16 or amx_bf16 among the CPU's flags."""
    from pathlib import Path

    from td3_lightning.resources import native_bfloat16

    info = Path("/proc/cpuinfo")
    if not info.exists():
        pytest.skip("no /proc/cpuinfo to read the CPU's flags from")
    flags = set(next(line for line in info.read_text().splitlines() if line.startswith("flags")).split())
    assert native_bfloat16() is bool({"avx512_bf16", "amx_bf16"} & flags)


def test_bf16_mixed_on_a_cpu_that_emulates_bfloat16_is_warned_of(tmp_path, monkeypatch):
    import td3_lightning.validation as validation
    from td3_lightning.resources import bfloat16_emulated_warning

    told = ("trainer.precision bf16-mixed on a CPU with no bfloat16 arithmetic (neither AVX512-BF16 nor AMX): torch "
            "emulates it, and the networks train several times slower than in 32-true; leave --trainer.precision out "
            "(or give 32-true) on this machine",)
    assert bfloat16_emulated_warning("bf16-mixed", False) == told
    assert bfloat16_emulated_warning("bf16-mixed", True) == ()
    assert bfloat16_emulated_warning("bf16-mixed", None) == ()  # not known: not told
    assert bfloat16_emulated_warning("32-true", False) == ()

    monkeypatch.chdir(tmp_path)
    tiny = ["fit", "--config", "pendulum.yaml", "--data.warmup_steps", "20", "--trainer.max_steps", "2",
            "--data.eval_episodes", "1", "--learning_curve.filename", "", "--trainer.accelerator", "cpu"]
    cases = ((False, "bf16-mixed", told), (True, "bf16-mixed", ()), (False, "32-true", ()),
             (False, "16-mixed", told))  # 16-mixed runs as bf16-mixed on a CPU, Lightning's own warning of it hidden
    for native, precision, expected in cases:
        monkeypatch.setattr(validation, "native_bfloat16", lambda native=native: native)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            main([*tiny, "--trainer.precision", precision, "--trainer.default_root_dir", f"{native}{precision}"])
        assert tuple(str(w.message) for w in caught if "bfloat16" in str(w.message)) == expected
        assert not [w for w in caught if "not supported on CPU" in str(w.message)]
