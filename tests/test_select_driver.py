"""scripts/select_driver.py: the order of the choice, and a real choice between the shipped driver and a copy
of it that never gives gas."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "td3_lightning" / "checkpoints" / "car_random_tracks.ckpt"
SHIPPED_ENV = ["--data.env_kwargs.aid_features", "false"]  # car.yaml's env as the shipped driver was trained on

_spec = importlib.util.spec_from_file_location("select_driver", REPO / "scripts" / "select_driver.py")
sd = importlib.util.module_from_spec(_spec)
sys.modules["select_driver"] = sd
_spec.loader.exec_module(sd)


def summary(laps: int, under: int, mean: float) -> dict:
    return {"laps_closed": laps, "under_pass": under, "mean": mean, "tracks": 100}


def test_laps_come_first_then_tracks_under_850_then_the_mean():
    assert sd.choose({"fast": summary(97, 3, 931.0), "sure": summary(99, 1, 925.0)}) == "sure"
    assert sd.choose({"a": summary(99, 2, 930.0), "b": summary(99, 1, 920.0)}) == "b"
    assert sd.choose({"a": summary(99, 1, 920.0), "b": summary(99, 1, 921.5)}) == "b"
    assert sd.choose({"first": summary(99, 1, 920.0), "second": summary(99, 1, 920.0)}) == "first"


def test_the_driver_that_drives_is_chosen_over_one_that_stands(tmp_path, capsys):
    ckpt = torch.load(SHIPPED, map_location="cpu", weights_only=False)
    for key in ("actor.net.4.weight", "actor.net.4.bias"):
        ckpt["state_dict"][key].zero_()  # steer 0, throttle 0: the car never moves
    standing = tmp_path / "standing.ckpt"
    torch.save(ckpt, standing)
    out = tmp_path / "selection.json"
    chosen = sd.main(["--ckpts", str(standing), str(SHIPPED), "--config", "car.yaml", "--seeds", "1000102",
                      "1000104", "--out", str(out), *SHIPPED_ENV])
    assert chosen == str(SHIPPED)
    report = json.loads(out.read_text())
    assert report["chosen"] == str(SHIPPED) and report["seeds"] == [1000102, 1000104]
    assert report["env_kwargs"] == {"action_repeat": 2, "action_mode": "steer_throttle", "aid_features": False}
    stands = report["candidates"][str(standing)]
    assert stands["laps_closed"] == 0 and stands["classes"]["standstill"] == 2
    assert report["candidates"][str(SHIPPED)]["tracks"] == 2
    assert "(chosen)" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (["--seeds", "5", "5"], "give a range A B"),
    (["--workers", "0"], "at least 1 process"),
    (["--ckpts", "missing.ckpt"], "checkpoint file not found: missing.ckpt"),
    (["--ckpts", str(SHIPPED), str(SHIPPED)], "names a checkpoint twice"),
    (["--ckpts", str(SHIPPED), str(SHIPPED.parent / ".." / "checkpoints" / SHIPPED.name)], "names a checkpoint twice"),
    (["--ckpts", str(SHIPPED.parent)], f"checkpoint file is a folder, not a file: {SHIPPED.parent}"),
])
def test_bad_arguments_get_one_error_line_and_exit_2(tmp_path, capsys, args, words):
    base = {"--ckpts": [str(SHIPPED)], "--config": ["car.yaml"], "--seeds": ["0", "2"],
            "--out": [str(tmp_path / "s.json")]}
    i = 0
    while i < len(args):  # the case's options replace the base's
        name, values = args[i], []
        i += 1
        while i < len(args) and not args[i].startswith("--"):
            values.append(args[i])
            i += 1
        base[name] = values
    with pytest.raises(SystemExit) as info:
        sd.main([part for name, values in base.items() for part in (name, *values)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and words in err and "\n" not in err
    assert list(tmp_path.iterdir()) == []


def test_an_existing_out_file_is_refused_and_left_as_it_was(tmp_path, capsys):
    out = tmp_path / "selection.json"
    out.write_text("earlier choice\n")
    with pytest.raises(SystemExit) as info:
        sd.main(["--ckpts", str(SHIPPED), "--config", "car.yaml", "--seeds", "0", "2", "--out", str(out)])
    assert info.value.code == 2 and "exists" in capsys.readouterr().err
    assert out.read_text() == "earlier choice\n"
