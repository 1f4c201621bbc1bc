"""scripts/track_survey.py: failure classes from hand-made traces, the refusal of a used --out folder, and a
real survey of two tracks that agrees with the project's evaluation and repeats itself exactly."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from td3_lightning.errors import UserInputError

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "track_survey.py"
SHIPPED = REPO / "td3_lightning" / "checkpoints" / "car_random_tracks.ckpt"
SHIPPED_ENV = ["--data.env_kwargs.aid_features", "false"]  # car.yaml's env as the shipped driver was trained on

_spec = importlib.util.spec_from_file_location("track_survey", SCRIPT)
ts = importlib.util.module_from_spec(_spec)
sys.modules["track_survey"] = ts
_spec.loader.exec_module(ts)
Step, Ending = ts.Step, ts.Ending


def trace(n: int, speed=lambda i: 40.0, off_road=lambda i: 0, missed=lambda i: 0, progress=lambda i: i / 600,
          repeat: int = 2) -> list:
    """``n`` steps of ``repeat`` frames, a tile visited every second step; step ``i`` (0-based) has the given
    speed, off-road count, missed tiles and lap position (by default: 600 steps a lap, never round)."""
    return [Step(frames=repeat * (i + 1), speed=speed(i), off_road_frames=off_road(i), tiles_visited=i // 2,
                 tiles_missed=missed(i), progress=progress(i) % 1.0) for i in range(n)]


OPEN_AT_LIMIT = Ending(ret=700.0, lap_closed=False, truncated=True, out_of_playfield=False, tiles_total=300)


def test_a_closed_lap_at_or_over_850_is_ok_and_one_under_it_is_not():
    drive = trace(400)
    assert ts.classify(drive, Ending(930.0, True, False, False, 300)) == "ok"
    assert ts.classify(drive, Ending(850.0, True, False, False, 300)) == "ok"
    assert ts.classify(drive, Ending(849.9, True, False, False, 300)) == "other"


def test_a_car_that_stops_on_the_road_until_the_time_limit_is_a_standstill():
    # drives 300 steps (600 frames), then stands for 200 steps (400 frames) with its wheels on the road
    drive = trace(500, speed=lambda i: 40.0 if i < 300 else 0.3)
    assert ts.stand_frames(drive) == 400
    assert ts.classify(drive, OPEN_AT_LIMIT) == "standstill"
    record = ts.track_record(7, drive, OPEN_AT_LIMIT)
    assert (record["onset_step"], record["onset_frame"], record["stand_frames"]) == (301, 602, 400)


def test_a_standstill_needs_the_whole_window_under_the_speed():
    # 50 slow steps of 2 frames = 100 frames = WINDOW_FRAMES: a standstill; 49 (98 frames): still driving
    assert ts.WINDOW_FRAMES == 100
    at_window = trace(500, speed=lambda i: 40.0 if i < 450 else 0.0)
    short = trace(500, speed=lambda i: 40.0 if i < 451 else 0.0)
    assert ts.stand_frames(at_window) == 100 and ts.stand_frames(short) == 98
    assert ts.classify(at_window, OPEN_AT_LIMIT) == "standstill"
    assert ts.classify(short, OPEN_AT_LIMIT) == "time_limit"
    # one step over the speed inside the window breaks the spell
    blip = trace(500, speed=lambda i: 0.0 if i >= 300 and i != 480 else 40.0)
    assert ts.stand_frames(blip) == 38 and ts.classify(blip, OPEN_AT_LIMIT) == "time_limit"


def test_a_car_on_the_grass_at_the_end_is_off_road_even_when_it_stands_there():
    # leaves the road at step 400 (frames 801-802) and stands on the grass: the env's counter reaches 200
    drive = trace(500, speed=lambda i: 40.0 if i < 420 else 0.0, off_road=lambda i: max(0, 2 * (i - 399)))
    assert drive[-1].off_road_frames == 200
    assert ts.classify(drive, OPEN_AT_LIMIT) == "off_road"
    assert ts.onset(drive, "off_road") == 401
    # 99 frames on the grass at the end is not yet off_road: it is still driving (back, perhaps)
    back = trace(500, off_road=lambda i: 99 if i == 499 else 0)
    assert ts.classify(back, OPEN_AT_LIMIT) == "time_limit"


def test_leaving_the_playfield_is_off_road():
    drive = trace(300)
    assert ts.classify(drive, Ending(-150.0, False, False, True, 300)) == "off_road"


def test_a_car_that_went_round_with_a_missed_tile_is_missed_tile():
    # 450 steps a lap: the car passes the start at step 450 with 225 of 300 tiles, one tile missed at step 121
    round_ = trace(500, progress=lambda i: i / 450, missed=lambda i: 1 if i > 120 else 0)
    assert ts.went_round(round_, 300) and not ts.went_round(round_, 451)
    assert ts.classify(round_, OPEN_AT_LIMIT) == "missed_tile"
    assert ts.onset(round_, "missed_tile") == 122
    # the same miss without getting round by the time limit: too slow, whatever it missed
    assert ts.classify(trace(500, missed=lambda i: 1 if i > 120 else 0), OPEN_AT_LIMIT) == "time_limit"
    assert ts.classify(trace(500), OPEN_AT_LIMIT) == "time_limit"
    assert ts.onset(trace(500), "time_limit") is None
    # a missed tile and then a standstill: the standstill is how the episode ended
    both = trace(500, speed=lambda i: 0.0 if i > 300 else 40.0, missed=lambda i: 1 if i > 120 else 0)
    assert ts.classify(both, OPEN_AT_LIMIT) == "standstill"


def test_a_car_that_stands_once_every_tile_is_visited_or_missed_is_missed_tile():
    # one tile missed at step 121, every other one visited by the end (249 + 1 of 250), standing from step 300:
    # the lap was lost at the miss, and driving on would score the same
    done = trace(500, speed=lambda i: 0.0 if i > 300 else 40.0, missed=lambda i: 1 if i > 120 else 0)
    nothing_left = Ending(ret=700.0, lap_closed=False, truncated=True, out_of_playfield=False, tiles_total=250)
    assert ts.classify(done, nothing_left) == "missed_tile"
    assert ts.onset(done, "missed_tile") == 122
    # one tile more on the track: a tile is left to visit, and standing is a standstill
    assert ts.classify(done, Ending(700.0, False, True, False, 251)) == "standstill"


def test_hand_made_drivers_in_the_real_env_stand_circle_on_the_grass_and_leave_the_playfield():
    """Track 0 (319 tiles), played by ``drive`` on car.yaml's evaluation env with fixed actions."""
    import numpy as np

    from td3_lightning.envs import make_env

    env = make_env("CarRacingState-v0", {"action_repeat": 2, "action_mode": "steer_throttle"})
    brake, circle, straight = ([0.0, -1.0], [1.0, 0.3], [0.0, 0.2])
    records = {}
    for name, action in (("brake", brake), ("circle", circle), ("straight", straight)):
        steps, end, _ = ts.drive(env, lambda obs, a=np.array(action, dtype=np.float32): a, 0)
        records[name] = ts.track_record(0, steps, end)
    # full brake from the start: the car never moves off the two tiles under it, 1000 frames at -0.1
    stand = records["brake"]
    assert (stand["failure"], stand["stand_frames"], stand["onset_step"], stand["tiles_visited"]) == (
        "standstill", 1000, 1, 2)
    assert stand["tiles_total"] == 319 and stand["return"] == pytest.approx(2 * 1000 / 319 - 100, abs=1e-9)
    # full right at a little gas: off the road within a second, circling on the grass to the time limit
    grass = records["circle"]
    assert grass["failure"] == "off_road" and grass["frames"] == 1000 and not grass["out_of_playfield"]
    assert grass["off_road_frames"] >= 900 and grass["stand_frames"] == 0
    # straight on: across the grass and out of the playfield (CarRacing's -100 end) before the time limit
    away = records["straight"]
    assert away["failure"] == "off_road" and away["out_of_playfield"] and away["frames"] < 1000


def test_a_car_that_turns_round_and_drives_back_over_its_tiles_is_wrong_way():
    # forward for 400 steps (2/3 of a lap), then backwards at the same speed: the last 100 frames go back
    # 50 steps of 1/600 lap = 1/12 lap = 25 of 300 tiles
    back = trace(500, progress=lambda i: (i if i < 400 else 800 - i) / 600)
    assert ts.window_progress(back) == pytest.approx(-50 / 600)
    assert ts.classify(back, OPEN_AT_LIMIT) == "wrong_way"
    assert ts.onset(back, "wrong_way") == 402  # step 402 (index 401) is the first that went back
    # across the start the position wraps from 0.0 to 0.99..: still backwards, not a lap
    across = trace(500, progress=lambda i: (i if i < 400 else 400 - 3 * (i - 400)) / 600 - 0.5)
    assert ts.window_progress(across) == pytest.approx(-150 / 600)
    assert ts.classify(across, OPEN_AT_LIMIT) == "wrong_way"
    # going back less than one tile over the window (a car that slides back a little) is not wrong_way
    slide = trace(500, progress=lambda i: (i if i < 450 else 450 - 0.03 * (i - 450)) / 600)
    assert -1 < ts.window_progress(slide) * 300 < 0 and ts.classify(slide, OPEN_AT_LIMIT) == "time_limit"


def test_strip_steps_span_the_drive_or_lead_to_the_onset_of_the_failure():
    assert ts.strip_steps(500, None, 6) == [50, 140, 230, 320, 410, 500]
    # linspace(250, 300, 5) = 250, 262.5, 275, 287.5, 300 (rounded half to even), then the last step
    assert ts.strip_steps(500, 300, 6, lead=50) == [250, 262, 275, 288, 300, 500]
    assert ts.strip_steps(500, 20, 6, lead=50) == [0, 5, 10, 15, 20, 500]


def test_summary_counts_classes_and_lists_the_worst_tracks_first():
    records = [
        {"seed": 1, "return": 930.0, "lap_closed": True, "failure": "ok"},
        {"seed": 2, "return": 110.0, "lap_closed": False, "failure": "standstill"},
        {"seed": 3, "return": 800.0, "lap_closed": False, "failure": "missed_tile"},
        {"seed": 4, "return": 920.0, "lap_closed": True, "failure": "ok"},
    ]
    s = ts.summarize(records, worst=3)
    assert s["mean"] == pytest.approx(690.0) and s["std"] == pytest.approx(338.7476937, abs=1e-6)
    assert (s["laps_closed"], s["under_pass"], s["min"]) == (2, 2, 110.0)
    assert s["classes"] == {"ok": 2, "standstill": 1, "off_road": 0, "wrong_way": 0, "missed_tile": 1,
                            "time_limit": 0, "other": 0}
    assert [w["seed"] for w in s["worst"]] == [2, 3, 4]
    assert "seed 2:   110.0  standstill" in ts.summary_text(s)


def test_an_existing_non_empty_out_folder_is_refused_and_left_as_it_was(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me\n")
    with pytest.raises(SystemExit) as exit_:
        ts.main(["--ckpt", str(SHIPPED), "--config", "car.yaml", "--seeds", "0", "2", "--out", str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --out ") and "--overwrite" in err[0], err
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "keep me\n"


@pytest.mark.parametrize("args, words", [
    (["--seeds", "5", "5"], "--seeds 5 5"),
    (["--seeds", "0", "2", "--workers", "0"], "--workers 0"),
    (["--seeds", "0", "2", "--ckpt", "missing.ckpt"], "checkpoint file not found"),
    (["--seeds", "0", "2", "--ckpt", str(SHIPPED.parent)],
     f"checkpoint file is a folder, not a file: {SHIPPED.parent}; pass an existing .ckpt file to --ckpt"),
    (["--seeds", "0", "2", "--config", "pendulum.yaml"],  # the survey reads the car's state: a car env only
     "drives Pendulum-v1; track_survey and select_driver drive CarRacing tracks: give a config of CarRacingState-v0"),
])
def test_bad_arguments_get_one_error_line_and_exit_2(tmp_path, capsys, args, words):
    argv = ["--ckpt", str(SHIPPED), "--config", "car.yaml", "--out", str(tmp_path / "new"), *args]
    with pytest.raises(SystemExit) as exit_:
        ts.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
    assert not (tmp_path / "new").exists()


def test_a_checkpoint_of_another_env_is_told_to_be_a_car_driver(tmp_path, capsys):
    from conftest import tiny_checkpoint

    tiny_checkpoint(tmp_path / "pendulum.ckpt")
    with pytest.raises(SystemExit) as exit_:  # before: told to use --config pendulum.yaml, which it refuses
        ts.main(["--ckpt", str(tmp_path / "pendulum.ckpt"), "--config", "car.yaml", "--seeds", "0", "2",
                 "--out", str(tmp_path / "new")])
    assert exit_.value.code == 2 and capsys.readouterr().err.strip() == (
        f"error: {tmp_path / 'pendulum.ckpt'} was trained on Pendulum-v1; track_survey and select_driver drive "
        "CarRacing tracks: give a checkpoint of CarRacingState-v0 or CarRacingPixels-v0")
    assert not (tmp_path / "new").exists()


def test_the_env_of_the_config_takes_the_command_line_s_env_kwargs(tmp_path, capsys):
    assert ts.parse_env_kwargs_options(["--data.env_kwargs.aid_features", "false",
                                        "--data.env_kwargs.action_repeat=4", "--data.env_kwargs.x", "-0.5",
                                        "--data.env_kwargs.y", "[1, 2]"]) == {
        "aid_features": False, "action_repeat": 4, "x": -0.5, "y": [1, 2]}
    for extra, error in (
        (["--data.env_kwargs.a", "--data.env_kwargs.b", "1"], "--data.env_kwargs.a needs a value: give "
                                                              "--data.env_kwargs.a VALUE"),
        (["--data.env_kwargs.a="], "--data.env_kwargs.a needs a value: give --data.env_kwargs.a VALUE"),
        (["--data.env_kwargs.a", "[1,"], "--data.env_kwargs.a [1,: not a YAML value (while parsing a flow "
                                         "node); quote it or fix it"),
    ):
        with pytest.raises(UserInputError) as info:
            ts.parse_env_kwargs_options(extra)
        assert str(info.value) == error
    env_id, kwargs, spec = ts.read_eval_env("car.yaml", {"aid_features": False})
    assert kwargs == {"action_repeat": 2, "action_mode": "steer_throttle", "aid_features": False}
    assert tuple(spec.obs_shape) == (43,)
    assert tuple(ts.read_eval_env("car.yaml")[2].obs_shape) == (45,)  # car.yaml's own: the aid features
    only = "; besides this script's options only --data.env_kwargs.KEY VALUE overrides are taken"
    for extra, error in ((["--data.env_kwargs.aid_features"], "--data.env_kwargs.aid_features needs a value: give "
                                                              "--data.env_kwargs.aid_features VALUE"),
                         (["--data.batch_size", "4"], f"unrecognized argument --data.batch_size{only}"),
                         (["stray"], f"unrecognized argument stray{only}")):
        with pytest.raises(SystemExit) as exit_:
            ts.main(["--ckpt", str(SHIPPED), "--config", "car.yaml", "--seeds", "0", "2",
                     "--out", str(tmp_path / "new"), *extra])
        assert exit_.value.code == 2 and capsys.readouterr().err.strip().splitlines() == [f"error: {error}"]
    # without the override, the one line says which one the shipped driver needs
    with pytest.raises(SystemExit):
        ts.main(["--ckpt", str(SHIPPED), "--config", "car.yaml", "--seeds", "0", "2", "--out", str(tmp_path / "new")])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("; add --data.env_kwargs.aid_features false"), err
    assert not (tmp_path / "new").exists()


def test_an_out_folder_that_cannot_be_made_is_refused_before_any_driving(tmp_path, capsys):
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        ts.main(["--ckpt", str(SHIPPED), "--config", "car.yaml", "--seeds", "0", "2", *SHIPPED_ENV,
                 "--out", str(tmp_path / "a_file" / "survey")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and err[0].startswith("error: cannot make --out "), err
    assert (tmp_path / "a_file").read_text() == "x"


def test_a_survey_of_two_tracks_matches_the_evaluation_and_repeats_exactly(tmp_path, capsys, cli_env):
    """Tracks 80 and 81 (the shipped driver closes both, see test_car_policy): once as a command with two
    worker processes, once in this process with one; the same numbers, and the returns ``test`` plays."""
    import torch

    from td3_lightning import TD3
    from td3_lightning.envs import make_env
    from td3_lightning.evaluation import run_episode

    argv = ["--ckpt", str(SHIPPED), "--config", "car.yaml", "--seeds", "80", "82", "--strips", "1", *SHIPPED_ENV]
    done = subprocess.run([sys.executable, str(SCRIPT), *argv, "--out", str(tmp_path / "a"), "--workers", "2"],
                          env=cli_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "2 tracks: return" in done.stdout and "laps closed 2/2; under 850: 0" in done.stdout, done.stdout
    summary = ts.main([*argv, "--out", str(tmp_path / "b")])
    first = json.loads((tmp_path / "a" / "survey.json").read_text())
    second = json.loads((tmp_path / "b" / "survey.json").read_text())
    assert first["tracks"] == second["tracks"] and first["summary"] == second["summary"] == summary
    assert first["env_id"] == "CarRacingState-v0"
    assert first["env_kwargs"] == {"action_repeat": 2, "action_mode": "steer_throttle",  # not train_env_kwargs
                                   "aid_features": False}

    model = TD3.load_from_checkpoint(SHIPPED, map_location="cpu").eval()
    env = make_env("CarRacingState-v0", {"action_repeat": 2, "action_mode": "steer_throttle"})
    with torch.no_grad():
        played = [run_episode(env, lambda o: model.actor(torch.as_tensor(o)[None])[0].numpy(), seed)
                  for seed in (80, 81)]
    tracks = first["tracks"]
    assert [t["seed"] for t in tracks] == [80, 81]
    for t, p in zip(tracks, played):
        assert t["return"] == p["return"] and t["steps"] == p["length"]
        assert t["lap_closed"] and t["failure"] == "ok" and t["tiles_visited"] == t["tiles_total"] > 200
        assert t["tiles_missed"] == 0 and t["onset_step"] is None
        assert 2 * t["steps"] - 1 <= t["frames"] <= 2 * t["steps"]  # action_repeat 2; the lap may close mid-step
        # a closed lap scores 1000 - 0.1 per frame
        assert t["return"] == pytest.approx(1000.0 - 0.1 * t["frames"], abs=1e-6)
    assert 930.5 < min(t["return"] for t in tracks)  # the shipped driver: 931.4 and 936.8

    # the strip of the worse track: six 300x200 pictures side by side, from the same drive
    worst = min(tracks, key=lambda t: t["return"])
    assert [t.get("strip") for t in tracks if t is not worst] == [None]
    from PIL import Image

    with Image.open(tmp_path / "a" / worst["strip"]) as image:
        assert image.size == (6 * 300, 200)
    assert worst["strip_frames"][-1] == worst["frames"] and len(worst["strip_frames"]) == 6
