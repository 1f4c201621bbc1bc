"""scripts/car_frames.py: a strip of one drive, on the env the checkpoint was trained on; bad arguments are one
line, with nothing written."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "td3_lightning" / "checkpoints" / "car_random_tracks.ckpt"

_spec = importlib.util.spec_from_file_location("car_frames", REPO / "scripts" / "car_frames.py")
cf = importlib.util.module_from_spec(_spec)
sys.modules["car_frames"] = cf
_spec.loader.exec_module(cf)


def test_a_strip_of_the_shipped_driver_on_its_own_env(tmp_path, capsys):
    cf.main(["--ckpt_path", str(SHIPPED), "--seed", "3", "--frames", "3", "--width", "40",
             "--out", str(tmp_path / "strip.png")])
    strip = Image.open(tmp_path / "strip.png")
    assert strip.width == 3 * 40 and strip.height == 40 * 400 // 600  # three 600x400 render frames, scaled
    assert capsys.readouterr().out.startswith("seed 3: return 9")  # a closed lap: 900 and more


def test_a_checkpoint_of_another_env_is_one_line(tmp_path, capsys):
    from conftest import tiny_checkpoint

    tiny_checkpoint(tmp_path / "pendulum.ckpt")
    with pytest.raises(SystemExit) as info:  # before: a matrix-shape traceback
        cf.main(["--ckpt_path", str(tmp_path / "pendulum.ckpt"), "--out", str(tmp_path / "strip.png")])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {tmp_path / 'pendulum.ckpt'} was trained on Pendulum-v1; car_frames drives CarRacing tracks: give a "
        "checkpoint of CarRacingState-v0 or CarRacingPixels-v0")
    assert not (tmp_path / "strip.png").exists()


@pytest.mark.parametrize("args, message", [
    (["--frames", "0"], "--frames 0: give at least 1"),
    (["--seed", "-1"], "--seed -1: give at least 0"),
    (["--out", "strip.txt"], "--out strip.txt: give an image file name ending in .png or .jpg or .jpeg"),
    (["--out", "nofolder/strip.png"], "--out nofolder/strip.png: the folder nofolder does not exist; make it first"),
    (["--out", "taken.png"], "--out taken.png exists; give another name or add --overwrite"),
    (["--ckpt_path", "nope.ckpt"], "checkpoint file not found: nope.ckpt; pass an existing .ckpt file to --ckpt_path"),
    (["--ckpt_path", "notes.txt"], "notes.txt"),
])
def test_bad_arguments_are_one_line_and_write_nothing(args, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken.png").write_bytes(b"mine")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    given = {"--ckpt_path": str(SHIPPED), "--out": "strip.png", **dict(zip(args[::2], args[1::2]))}
    with pytest.raises(SystemExit) as info:
        cf.main([item for pair in given.items() for item in pair])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "taken.png"]
    assert (tmp_path / "taken.png").read_bytes() == b"mine"
