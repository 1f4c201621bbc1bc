"""Tests of CarRacingState-v0: features, CarRacing-v3 equivalence, options, rendering."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("Box2D")

import td3_lightning.envs.car_racing as car_module  # noqa: E402
from td3_lightning.envs.car_racing import (  # noqa: E402
    ENV_ID,
    FEATURE_HIGH,
    FEATURE_LOW,
    FEATURE_NAMES,
    LOOKAHEAD_TILES,
    N_FEATURES,
    CarRacingState,
)
from td3_lightning.registration import register_envs  # noqa: E402

IDX = {name: i for i, name in enumerate(FEATURE_NAMES)}
AHEAD = slice(IDX[f"ahead_{LOOKAHEAD_TILES[0]}_x"], IDX[f"ahead_{LOOKAHEAD_TILES[-1]}_y"] + 1)
AHEAD_DIST = np.array(LOOKAHEAD_TILES, dtype=np.float64) * car_module.TRACK_DETAIL_STEP
AHEAD_SCALE = AHEAD_DIST + car_module.TRACK_WIDTH
WHEELBASE = 3.24  # distance between front and rear axle of CarRacing's car


def _a(steer: float, gas: float, brake: float) -> np.ndarray:
    return np.array([steer, gas, brake], dtype=np.float32)


def block_actions(seed: int, frames: int = 1000, block: int = 12) -> np.ndarray:
    """Random actions held for `block` frames each (consistent with repeats of 1, 2, 3, 4, 6, 12)."""
    rng = np.random.default_rng(seed)
    n_blocks = -(-frames // block)
    acts = rng.uniform([-1.0, 0.0, 0.0], [1.0, 0.5, 0.3], size=(n_blocks, 3)).astype(np.float32)
    return np.repeat(acts, block, axis=0)[:frames]


def run_v3(seed: int, actions: np.ndarray) -> dict:
    """Per-frame rewards and flags of the real CarRacing-v3 (pixels, TimeLimit) for `actions`."""
    env = gym.make("CarRacing-v3")
    env.reset(seed=seed)
    rewards, terms, truncs = [], [], []
    for act in actions:
        _, r, term, trunc, _ = env.step(act)
        rewards.append(r)
        terms.append(term)
        truncs.append(trunc)
        if term or trunc:
            break
    track = np.array(env.unwrapped.track)
    env.close()
    return {"rewards": rewards, "terminated": terms, "truncated": truncs, "track": track}


@pytest.fixture(scope="module")
def v3_full_episode():
    """A 1000-frame CarRacing-v3 episode (ends by the time limit) with 12-frame action blocks."""
    actions = block_actions(seed=1)
    ref = run_v3(seed=1, actions=actions)
    assert len(ref["rewards"]) == 1000 and ref["truncated"][-1] and not any(ref["terminated"])
    return actions, ref


@pytest.fixture(scope="module")
def v3_leaves_playfield():
    """A CarRacing-v3 episode that drives straight off the playfield (terminated, -100)."""
    actions = np.repeat(_a(0.0, 0.5, 0.0)[None], 1000, axis=0)
    ref = run_v3(seed=0, actions=actions)
    assert ref["terminated"][-1] and ref["rewards"][-1] == -100 and len(ref["rewards"]) < 400
    return actions, ref


# ------------------------------------------------------------------ registry
def test_register_is_idempotent_and_make_works():
    register_envs()
    register_envs()
    assert ENV_ID in gym.registry
    spec = gym.spec(ENV_ID)
    assert spec.max_episode_steps is None  # the env counts the 1000 frames itself
    env = gym.make(ENV_ID, action_repeat=2, track_seed=7)
    obs, info = env.reset(seed=0)
    assert obs.shape == (N_FEATURES,) and obs.dtype == np.float32
    assert env.observation_space.contains(obs)
    assert env.action_space == gym.make("CarRacing-v3").action_space
    assert info["frames"] == 0 and info["tiles_total"] > 200
    env.close()


# ------------------------------------------------------------------ features
def test_features_at_start_are_meaningful():
    env = CarRacingState()
    obs, info = env.reset(seed=3)
    assert abs(obs[IDX["v_forward"]]) < 0.05 and abs(obs[IDX["yaw_rate"]]) < 0.01
    assert abs(obs[IDX["lateral_offset"]]) < 0.05  # car starts on the centre line
    assert obs[IDX["heading_cos"]] > 0.999 and abs(obs[IDX["heading_sin"]]) < 0.03
    assert np.all(obs[[IDX[f"grass_{w}"] for w in ("fl", "fr", "rl", "rr")]] == 0)
    pairs = obs[AHEAD].reshape(-1, 2)
    # the look-ahead points lie ahead, at their nominal distance (straight-line distance <= arc length)
    assert np.all(pairs[:4, 1] > 0.2)
    norms = np.hypot(pairs[:, 0], pairs[:, 1]) * AHEAD_SCALE
    assert np.all(norms <= AHEAD_DIST + 0.5) and np.all(norms[:3] > 0.9 * AHEAD_DIST[:3])
    assert obs[IDX["tiles_visited"]] == pytest.approx(info["tiles_visited"] / info["tiles_total"])
    assert obs[IDX["track_progress"]] < 0.01


def _drive(env: CarRacingState, seed: int, policy, steps: int) -> np.ndarray:
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for t in range(steps):
        obs, _, term, trunc, _ = env.step(policy(t, obs))
        out.append(obs)
        if term or trunc:
            break
    return np.array(out)


def _drives(env: CarRacingState) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "random": _drive(env, 0, lambda t, o: rng.uniform([-1, 0, 0], [1, 1, 1]).astype(np.float32), 300),
        "full_gas_spin": _drive(env, 1, lambda t, o: _a(rng.uniform(-1, 1), 1.0, 0.0), 300),
        "full_gas_then_brake": _drive(env, 2, lambda t, o: _a(0.0, 1.0, 0.0) if t < 110 else _a(-1, 0, 1), 300),
        "leave_playfield": _drive(env, 0, lambda t, o: _a(0.0, 0.5, 0.0), 400),
        "controller": _drive(env, 4, lambda t, o: hand_controller(o), 300),
    }


def test_features_finite_and_in_range_over_drives():
    env = CarRacingState()
    drives = _drives(env)
    for name, obs in drives.items():
        assert np.all(np.isfinite(obs)), name
        assert np.all(obs >= FEATURE_LOW) and np.all(obs <= FEATURE_HIGH), name
        assert all(env.observation_space.contains(o) for o in obs), name
    # the drives exercise the features: top speed, grass, spin, wheel spin, off-road
    gas = drives["full_gas_then_brake"]
    assert gas[:, IDX["v_forward"]].max() > 0.7
    assert gas[:, IDX["wheel_speed_rl"]].max() > gas[:, IDX["v_forward"]].max() + 0.05  # rear wheels spin
    assert drives["full_gas_spin"][:, IDX["yaw_rate"]].__abs__().max() > 0.5
    off = drives["leave_playfield"]
    assert len(off) < 400  # terminated at the playfield border
    assert off[-1, IDX["grass_fl"]] == 1 and off[-1, IDX["off_road_time"]] == 1.0
    assert abs(off[-1, IDX["lateral_offset"]]) == 5.0  # saturated far from the road
    on = drives["controller"]
    assert np.abs(on[:, IDX["lateral_offset"]]).max() < 1.0  # the controller stays on the road
    assert on[:, IDX["grass_rl"]].max() == 0.0


def test_raw_features_respect_documented_ranges(monkeypatch):
    """Before clipping, the dynamic features stay inside their documented ranges."""
    monkeypatch.setattr(car_module, "FEATURE_LOW", np.full(N_FEATURES, -np.inf, dtype=np.float32))
    monkeypatch.setattr(car_module, "FEATURE_HIGH", np.full(N_FEATURES, np.inf, dtype=np.float32))
    drives = _drives(CarRacingState())
    obs = np.concatenate(list(drives.values()))
    saturating = {"lateral_offset"} | {n for n in FEATURE_NAMES if n.startswith("ahead_")}
    for i, name in enumerate(FEATURE_NAMES):
        if name in saturating:
            continue
        assert FEATURE_LOW[i] <= obs[:, i].min() and obs[:, i].max() <= FEATURE_HIGH[i], name
    # on the road the look-ahead pairs are O(1) bearing vectors
    on = drives["controller"][:, AHEAD]
    assert np.abs(on).max() < 1.6


# --------------------------------------------------------- v3 equivalence
def test_full_episode_equals_car_racing_v3(v3_full_episode):
    actions, ref = v3_full_episode
    env = gym.make(ENV_ID)
    env.reset(seed=1)
    total = 0.0
    for t, act in enumerate(actions):
        obs, r, term, trunc, info = env.step(act)
        assert (r, term, trunc) == (ref["rewards"][t], ref["terminated"][t], ref["truncated"][t]), t
        assert info["frames"] == t + 1
        total += r
        if term or trunc:
            break
    assert t == 999 and trunc and not term
    assert total == sum(ref["rewards"])
    assert np.array_equal(env.unwrapped.track_points(), ref["track"][:, 2:4])


def test_leaving_playfield_equals_car_racing_v3(v3_leaves_playfield):
    actions, ref = v3_leaves_playfield
    env = gym.make(ENV_ID)
    env.reset(seed=0)
    rewards = []
    for act in actions:
        obs, r, term, trunc, info = env.step(act)
        rewards.append(r)
        if term or trunc:
            break
    assert rewards == ref["rewards"]
    assert term and not trunc and r == -100 and info["out_of_playfield"] and not info["lap_finished"]
    assert np.all(np.isfinite(obs)) and env.observation_space.contains(obs)


@pytest.mark.parametrize("k", [3, 4])
def test_action_repeat_sums_v3_rewards_and_truncates_at_1000_frames(v3_full_episode, k):
    actions, ref = v3_full_episode
    env = gym.make(ENV_ID, action_repeat=k)
    env.reset(seed=1)
    total, steps = 0.0, 0
    while True:
        start = steps * k
        obs, r, term, trunc, info = env.step(actions[start])
        steps += 1
        frames = min(start + k, 1000)
        expected = 0.0
        for fr in ref["rewards"][start:frames]:
            expected += fr
        assert r == expected and info["frames"] == frames
        total += r
        if term or trunc:
            break
    assert trunc and not term and info["frames"] == 1000 and steps == math.ceil(1000 / k)
    assert total == pytest.approx(sum(ref["rewards"]), abs=1e-9)


@pytest.mark.parametrize("k", [2, 5])
def test_action_repeat_terminates_like_v3(v3_leaves_playfield, k):
    actions, ref = v3_leaves_playfield
    env = CarRacingState(action_repeat=k)
    env.reset(seed=0)
    total = 0.0
    while True:
        _, r, term, trunc, info = env.step(actions[0])
        total += r
        if term or trunc:
            break
    assert term and info["frames"] == len(ref["rewards"])
    assert total == pytest.approx(sum(ref["rewards"]), abs=1e-9)


def test_steer_throttle_actions_are_the_equivalent_carracing_actions():
    rng = np.random.default_rng(3)
    two = np.repeat(rng.uniform(-1, 1, size=(100, 2)).astype(np.float32), 5, axis=0)
    two[:, 1] = np.where(two[:, 1] > -0.4, 0.2 + 0.3 * np.abs(two[:, 1]), two[:, 1])  # mostly gas, some brake
    st = CarRacingState(action_mode="steer_throttle", action_repeat=2)
    native = CarRacingState(action_repeat=2)
    assert st.action_space.shape == (2,) and st.action_space.low.tolist() == [-1, -1]
    assert st.observation_space == native.observation_space
    obs_st, _ = st.reset(seed=4)
    obs_native, _ = native.reset(seed=4)
    assert np.array_equal(obs_st, obs_native)
    braked = 0
    for act in two:
        three = np.array([act[0], max(act[1], 0.0), max(-act[1], 0.0)], dtype=np.float32)
        braked += three[2] > 0
        out_st, out_native = st.step(act), native.step(three)
        assert np.array_equal(out_st[0], out_native[0]) and out_st[1:4] == out_native[1:4]
        if out_st[2] or out_st[3]:
            break
    assert out_st[3] and native.frames == 1000 and braked > 50  # a whole episode, with braking in it
    with pytest.raises(ValueError, match="action_mode must be one of 'carracing', 'steer_throttle'"):
        CarRacingState(action_mode="pedals")


# ------------------------------------------------------------------ tracks
def test_fixed_track_seed_gives_the_same_track_whatever_the_reset_seed():
    env = CarRacingState(track_seed=123)
    tracks = []
    for seed in (0, 1, None, 99):
        env.reset(seed=seed)
        tracks.append(env.track_points())
    for tr in tracks[1:]:
        assert np.array_equal(tr, tracks[0])
    # it is the track CarRacing-v3 builds for reset(seed=123)
    v3 = gym.make("CarRacing-v3")
    v3.reset(seed=123)
    assert np.array_equal(np.array(v3.unwrapped.track)[:, 2:4], tracks[0])
    other = CarRacingState(track_seed=124)
    other.reset(seed=0)
    assert other.track_points().shape != tracks[0].shape or not np.allclose(other.track_points(), tracks[0])


def test_random_tracks_differ_between_reset_seeds():
    env = CarRacingState()
    env.reset(seed=0)
    a = env.track_points()
    env.reset(seed=1)
    b = env.track_points()
    env.reset()  # the env RNG continues: another new track
    c = env.track_points()
    env.reset(seed=0)
    assert np.array_equal(env.track_points(), a)
    for x, y in ((a, b), (a, c), (b, c)):
        assert x.shape != y.shape or not np.allclose(x, y)


# ---------------------------------------------------------- off-road aid
@pytest.mark.parametrize("k", [1, 3])
def test_max_off_road_frames_terminates_after_that_many_frames(k):
    limit = 25
    free = CarRacingState()  # same drive without the option: find the first all-off-road frame
    free.reset(seed=0)
    first_off = None
    for frame in range(1, 400):
        _, r_free, term, _, info = free.step(_a(0.0, 0.5, 0.0))
        assert not term
        if info["off_road_frames"] == 1:
            first_off = frame
            break
    assert first_off is not None

    env = CarRacingState(max_off_road_frames=limit, off_road_penalty=50.0, action_repeat=k)
    env.reset(seed=0)
    for _ in range(400):
        _, r, term, trunc, info = env.step(_a(0.0, 0.5, 0.0))
        if term or trunc:
            break
    assert term and info["off_road_terminated"] and not info["out_of_playfield"]
    assert info["off_road_frames"] == limit
    assert info["frames"] == first_off + limit - 1
    assert r <= -50.0  # the penalty lands on the terminating step


# ---------------------------------------------------------- missed-tile aid
def test_missed_tiles_are_the_unvisited_tiles_the_car_has_passed_by_the_margin():
    env = CarRacingState(missed_tile_penalty=25.0)
    env.reset(seed=3)
    n = len(env.road)
    for k in range(1, 20):
        env.road[k].road_visited = k not in (4, 9)
    env._progress = 9 + car_module.MISSED_TILE_MARGIN + 0.5  # tile 9 is passed, tile 10 not yet
    assert env._newly_missed_tiles() == 2 and env.tiles_missed == 2
    assert env._newly_missed_tiles() == 0  # each tile counts once
    env._progress = 3.2  # driving backwards checks nothing
    assert env._newly_missed_tiles() == 0
    env._progress = n - 4.0  # nor does a jump of more than half a lap
    assert env._newly_missed_tiles() == 0 and env.tiles_missed == 2


def _cutting_driver(obs: np.ndarray) -> np.ndarray:
    """Steers at the centre-line point 10 tiles ahead and holds about 55 units/s: it cuts corners."""
    steer = np.clip(2.0 * obs[FEATURE_NAMES.index("ahead_10_x")], -1.0, 1.0)
    return np.array([steer, 0.3 if obs[0] < 0.55 else -0.2], dtype=np.float32)


def test_missed_tile_penalty_is_subtracted_once_at_the_first_tile_left_unvisited():
    plain = CarRacingState(action_mode="steer_throttle", action_repeat=2)
    aided = CarRacingState(action_mode="steer_throttle", action_repeat=2, missed_tile_penalty=25.0)
    obs, _ = plain.reset(seed=0)  # on this track the corner-cutting driver leaves tiles unvisited
    aided.reset(seed=0)
    penalised, first = 0, None
    for t in range(500):
        a = _cutting_driver(obs)
        obs, r0, t0, tr0, i0 = plain.step(a)
        before = aided.tiles_missed
        _, r1, t1, tr1, i1 = aided.step(a)
        assert (t0, tr0, i0["tiles_visited"]) == (t1, tr1, i1["tiles_visited"])  # same physics
        if before == 0 and i1["tiles_missed"] > 0:
            first = t
        assert r1 == pytest.approx(r0 - (25.0 if first == t else 0.0))
        penalised += r0 - r1
        if t0 or tr0:
            break
    assert tr0 and not i0["lap_finished"]
    assert i1["tiles_missed"] == i1["tiles_total"] - i1["tiles_visited"] > 0  # every unvisited tile is counted
    assert first is not None and penalised == pytest.approx(25.0)


@pytest.mark.parametrize("options, charged", [({"env_steps": 100}, 25.0), ({"env_steps": 900}, 100.0), (None, 100.0)])
def test_missed_tile_penalty_ramp_charges_its_share_of_the_penalty_given_the_env_steps_at_reset(options, charged):
    plain = CarRacingState(action_mode="steer_throttle", action_repeat=2)
    aided = CarRacingState(action_mode="steer_throttle", action_repeat=2, missed_tile_penalty=100.0,
                           missed_tile_penalty_ramp=400)
    obs, _ = plain.reset(seed=0)  # the corner-cutting driver misses tiles here (see the test above)
    aided.reset(seed=0, options=options)
    penalised = 0.0
    for _ in range(500):
        a = _cutting_driver(obs)
        obs, r0, t0, tr0, _ = plain.step(a)
        _, r1, *_ = aided.step(a)
        penalised += r0 - r1
        if t0 or tr0:
            break
    assert penalised == pytest.approx(charged)


def test_missed_tile_penalty_must_be_non_negative():
    with pytest.raises(ValueError, match="missed_tile_penalty must be a finite number >= 0"):
        CarRacingState(missed_tile_penalty=-1.0)
    with pytest.raises(ValueError, match="missed_tile_penalty_ramp must be an integer >= 0"):
        CarRacingState(missed_tile_penalty_ramp=-5)


# --------------------------------------------------------------- stall aid
def drive_to_end(env, action, steps):
    """Step with ``action(frames so far)`` until the episode ends: the last reward, terminated and info."""
    for _ in range(steps):
        _, r, term, trunc, info = env.step(action(env.frames))
        if term or trunc:
            break
    return r, term, info


def charged_on_the_last_step(r, info, k, penalty=40.0):
    """Whether ``r`` is the time cost of the ending step's frames (action repeat ``k``) plus ``penalty``."""
    frames_in_step = (info["frames"] - 1) % k + 1
    return r == pytest.approx(-0.1 * frames_in_step - penalty)


@pytest.mark.parametrize("k", [1, 3])
def test_max_stall_frames_ends_a_standing_car_as_an_open_lap(k):
    free = CarRacingState()  # the same standing car without the option: the last frame with a new tile
    free.reset(seed=0)
    last_new, visited = 0, free.tile_visited_count
    for frame in range(1, 60):
        _, _, term, _, info = free.step(_a(0.0, 0.0, 0.0))
        assert not term
        if info["tiles_visited"] > visited:
            last_new, visited = frame, info["tiles_visited"]
    limit = 30
    env = CarRacingState(max_stall_frames=limit, missed_tile_penalty=40.0, action_repeat=k)
    env.reset(seed=0)
    r, term, info = drive_to_end(env, lambda frames: _a(0.0, 0.0, 0.0), 100)
    assert term and info["stall_terminated"] and not info["lap_finished"] and not info["off_road_terminated"]
    assert info["frames"] == last_new + limit
    assert charged_on_the_last_step(r, info, k)  # the open lap's penalty lands on that step


def test_max_stall_frames_charges_no_second_penalty_and_spares_a_driving_car():
    env = CarRacingState(max_stall_frames=30, missed_tile_penalty=40.0)
    env.reset(seed=0)
    env.tiles_missed = 1  # the open lap was already charged at a missed tile
    r, _, info = drive_to_end(env, lambda frames: _a(0.0, 0.0, 0.0), 100)
    assert info["stall_terminated"] and r == pytest.approx(-0.1)
    driving = CarRacingState(max_stall_frames=30)
    driving.reset(seed=0)
    for _ in range(60):  # full gas from the start: a new tile every 12 frames or fewer
        _, _, term, _, info = driving.step(_a(0.0, 1.0, 0.0))
        assert not term
    assert info["tiles_visited"] >= 10


def test_max_stall_frames_leaves_a_car_off_the_road_to_max_off_road_frames():
    # the off-road drive of test_max_off_road_frames_terminates_after_that_many_frames, with a stall
    # limit far shorter than the off-road one: off the road only the off-road limit ends the episode
    env = CarRacingState(max_stall_frames=30, max_off_road_frames=120, missed_tile_penalty=40.0)
    env.reset(seed=0)
    stall_on_grass = []
    for _ in range(600):
        _, r, term, trunc, info = env.step(_a(0.0, 0.5, 0.0))
        if info["off_road_frames"]:
            stall_on_grass.append(env.stall_frames)
        if term or trunc:
            break
    assert term and info["off_road_terminated"] and not info["stall_terminated"]
    assert info["off_road_frames"] == 120 and len(stall_on_grass) == 120
    assert max(stall_on_grass) == 0  # the count restarts on every frame with all wheels on the grass


@pytest.mark.parametrize("k", [1, 3])
def test_off_road_open_lap_charges_the_open_lap_once_at_the_off_road_end(k):
    # the straight drive off the road of test_max_off_road_frames_terminates_after_that_many_frames
    def drive(tiles_missed=0, **kwargs):
        env = CarRacingState(max_off_road_frames=25, missed_tile_penalty=40.0, action_repeat=k, **kwargs)
        env.reset(seed=0)
        env.tiles_missed = tiles_missed
        rewards = []
        for _ in range(400):
            _, r, term, trunc, info = env.step(_a(0.0, 0.5, 0.0))
            rewards.append(r)
            if term or trunc:
                return rewards, info

    free, info_free = drive()
    assert info_free["off_road_terminated"] and info_free["tiles_missed"] == 0  # no tile charged on the way
    charged, info = drive(off_road_open_lap=True)
    assert info["off_road_terminated"] and info["frames"] == info_free["frames"]
    assert charged[:-1] == free[:-1]
    assert charged[-1] == pytest.approx(free[-1] - 40.0)  # the open lap lands on the terminating step
    # an open lap already charged at a missed tile is not charged again
    again, info = drive(tiles_missed=1, off_road_open_lap=True)
    assert info["off_road_terminated"] and again[-1] == pytest.approx(free[-1])


def test_off_road_open_lap_must_be_a_bool():
    with pytest.raises(ValueError, match="off_road_open_lap must be true or false"):
        CarRacingState(off_road_open_lap=1)


def test_max_stall_frames_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="max_stall_frames must be None or an integer >= 1"):
        CarRacingState(max_stall_frames=0)



# --------------------------------------------------------------- rest aid
@pytest.mark.parametrize("k", [1, 3])
def test_max_rest_frames_ends_a_car_braked_to_a_standstill_as_an_open_lap(k):
    # full gas for 42 frames (a whole number of steps for k = 1 and 3), then full brake: find, frame by
    # frame without the option, the frame from which the hull stays slower than REST_SPEED
    def action(frame):  # frame: the step's first physics frame, counted from 0
        return _a(0.0, 1.0, 0.0) if frame < 42 else _a(0.0, 0.0, 1.0)

    free = CarRacingState()
    free.reset(seed=0)
    resting = []
    for frame in range(120):
        free.step(action(frame))
        vx, vy = free.car.hull.linearVelocity
        resting.append(math.hypot(vx, vy) < car_module.REST_SPEED)
    first_rest = resting.index(True)  # 0-based frame; the car stays at rest from there (checked below)
    assert first_rest > 42 and all(resting[first_rest:])
    limit = 25
    env = CarRacingState(max_rest_frames=limit, missed_tile_penalty=40.0, action_repeat=k)
    env.reset(seed=0)
    r, term, info = drive_to_end(env, action, 120)
    assert term and info["rest_terminated"] and not info["stall_terminated"] and not info["lap_finished"]
    assert info["frames"] == first_rest + limit
    assert charged_on_the_last_step(r, info, k)  # the open lap's penalty lands on that step


def test_max_rest_frames_charges_no_second_penalty_and_spares_a_driving_car():
    env = CarRacingState(max_rest_frames=25, missed_tile_penalty=40.0)
    env.reset(seed=0)
    env.tiles_missed = 1  # the open lap was already charged at a missed tile
    r, _, info = drive_to_end(env, lambda frames: _a(0.0, 0.0, 1.0), 100)  # braking: at rest from the start
    assert info["rest_terminated"] and info["frames"] == 25 and r == pytest.approx(-0.1)
    driving = CarRacingState(max_rest_frames=1)  # even one frame at rest would end it
    driving.reset(seed=0)
    for _ in range(300):  # full gas from the start, off the road and on across the grass
        _, _, term, _, info = driving.step(_a(0.0, 1.0, 0.0))
        assert not term
    assert info["frames"] == 300 and driving.rest_frames == 0


def test_max_rest_frames_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="max_rest_frames must be None or an integer >= 1"):
        CarRacingState(max_rest_frames=0)


# --------------------------------------------------------------- frame penalty
@pytest.mark.parametrize("k", [1, 3])
def test_frame_penalty_charges_its_amount_on_every_physics_frame_and_nothing_else(k):
    def drive(**kwargs):  # full gas along the start straight and off it: tiles, then grass, then the end
        env = CarRacingState(action_repeat=k, max_off_road_frames=40, missed_tile_penalty=30.0, **kwargs)
        env.reset(seed=0)
        rewards, frames = [], []
        for _ in range(400):
            _, r, term, trunc, info = env.step(_a(0.3, 1.0, 0.0))
            rewards.append(r)
            frames.append(info["frames"])
            if term or trunc:
                return rewards, frames, info

    free, frames, info_free = drive()
    charged, frames_charged, info = drive(frame_penalty=0.25)
    assert frames_charged == frames and info["off_road_terminated"] and info_free["off_road_terminated"]
    per_step = np.diff([0] + frames)
    assert set(per_step[:-1]) == {k}
    np.testing.assert_allclose(np.subtract(charged, free), -0.25 * per_step, atol=1e-9)


@pytest.mark.parametrize("bad", [0, 2, 95, -0.5, float("nan"), True])
def test_lap_complete_percent_must_be_a_fraction(bad):
    with pytest.raises(ValueError, match=r"lap_complete_percent must be a fraction of the tiles in \(0, 1\]"):
        CarRacingState(lap_complete_percent=bad)
    assert CarRacingState(lap_complete_percent=1).lap_complete_percent == 1


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), True, "0.1"])
def test_frame_penalty_must_be_a_finite_number_at_least_zero(bad):
    with pytest.raises(ValueError, match="frame_penalty must be a finite number >= 0"):
        CarRacingState(frame_penalty=bad)


# --------------------------------------------------------------- time-left charge
@pytest.mark.parametrize(
    "aid, action, ended_by",
    [
        ({"max_stall_frames": 30}, _a(0.0, 0.0, 0.0), "stall_terminated"),  # a car left standing on the road
        ({"max_rest_frames": 25}, _a(0.0, 0.0, 1.0), "rest_terminated"),  # braking from the start
        ({"max_off_road_frames": 25}, _a(0.0, 0.5, 0.0), "off_road_terminated"),  # straight off the road
    ],
)
@pytest.mark.parametrize("k", [1, 3])
def test_charge_time_left_charges_the_frames_left_at_an_aid_end_only(aid, action, ended_by, k):
    def drive(**kwargs):
        env = CarRacingState(missed_tile_penalty=40.0, action_repeat=k, **aid, **kwargs)
        env.reset(seed=0)
        rewards = []
        for _ in range(400):
            _, r, term, trunc, info = env.step(action)
            rewards.append(r)
            if term or trunc:
                return rewards, info

    free, info_free = drive()
    charged, info = drive(charge_time_left=True)
    assert info_free[ended_by] and info[ended_by] and info["frames"] == info_free["frames"] < 1000
    assert charged[:-1] == free[:-1]
    assert charged[-1] - free[-1] == pytest.approx(-0.1 * (1000 - info["frames"]))


def test_charge_time_left_charges_nothing_at_the_time_limit_and_must_be_a_bool():
    def drive(**kwargs):  # coasting on the road: no aid ends it before the time limit
        env = CarRacingState(max_episode_frames=60, max_stall_frames=100, **kwargs)
        env.reset(seed=0)
        rewards = [env.step(_a(0.0, 0.0, 0.0))[1] for _ in range(60)]
        return rewards, env.frames

    assert drive(charge_time_left=True) == drive()
    with pytest.raises(ValueError, match="charge_time_left must be true or false"):
        CarRacingState(charge_time_left=1)


# ------------------------------------------------------------- aid features
def test_aid_features_append_the_stall_count_and_the_missed_tile_flag_to_the_same_features():
    plain = CarRacingState(action_mode="steer_throttle", action_repeat=2)
    aided = CarRacingState(action_mode="steer_throttle", action_repeat=2, aid_features=True)
    assert aided.observation_space.shape == (N_FEATURES + 2,)
    space = aided.observation_space
    assert (space.low[N_FEATURES:] == 0).all() and (space.high[N_FEATURES:] == 1).all()
    o0, _ = plain.reset(seed=0)  # the corner-cutting driver misses tiles on this track
    o1, _ = aided.reset(seed=0)
    np.testing.assert_array_equal(o1[:N_FEATURES], o0)
    flags = []
    for _ in range(500):
        a = _cutting_driver(o0)
        o0, _, t0, tr0, _ = plain.step(a)
        o1, _, _, _, info = aided.step(a)
        np.testing.assert_array_equal(o1[:N_FEATURES], o0)  # the same 43 features, the same physics
        assert o1[N_FEATURES] == np.float32(min(aided.stall_frames / 100.0, 1.0))
        flags.append((o1[N_FEATURES + 1], info["tiles_missed"]))
        if t0 or tr0:
            break
    assert all(flag == (1.0 if missed else 0.0) for flag, missed in flags)
    assert flags[0][0] == 0.0 and flags[-1][0] == 1.0  # the flag turns on at the first miss and stays


def test_aid_features_stall_time_counts_the_frames_a_standing_car_waits_on_the_road():
    env = CarRacingState(aid_features=True, action_repeat=2)
    env.reset(seed=0)  # the car stands on the start tile and brakes: no new tile, 2 frames a step
    stall = [env.step(_a(0.0, 0.0, 1.0))[0][N_FEATURES] for _ in range(55)]
    expected = [min(2 * (t + 1), 100) / 100 for t in range(55)]  # frames / 100, saturating at 1
    np.testing.assert_allclose(stall, expected, rtol=0, atol=1e-6)


def test_aid_features_must_be_a_bool():
    with pytest.raises(ValueError, match="aid_features must be true or false"):
        CarRacingState(aid_features=1)


def test_aid_features_reach_the_pixel_env_privileged_state_and_leave_its_frames_alone():
    from td3_lightning.envs.car_racing_pixels import CarRacingPixels

    kw = dict(action_mode="steer_throttle", action_repeat=2)
    frames, aided = CarRacingPixels(**kw), CarRacingPixels(aid_features=True, **kw)
    state = CarRacingState(aid_features=True, **kw)
    assert aided.privileged_observation_space.shape == (N_FEATURES + 2,)
    f0, info0 = frames.reset(seed=0)  # the corner-cutting driver misses its first tiles on this track
    f1, info1 = aided.reset(seed=0)
    o, _ = state.reset(seed=0)
    missed_at = None
    for t in range(60):
        np.testing.assert_array_equal(f1, f0)  # the same frames with and without the option
        np.testing.assert_array_equal(info1.get("privileged_obs", o), o)  # the state env's 45 features, each step
        a = _cutting_driver(o)
        f0, *_ = frames.step(a)
        f1, _, _, _, info1 = aided.step(a)
        o, _, _, _, info = state.step(a)
        if missed_at is None and info["tiles_missed"]:
            missed_at = t
    assert missed_at is not None and info1["privileged_obs"][N_FEATURES + 1] == 1.0


# --------------------------------------------------------------- gas at rest
@pytest.mark.parametrize("throttle", [-1.0, -0.5, 0.0, 0.6])
def test_gas_at_rest_gives_a_standing_car_gas_of_half_throttle_plus_one_half(throttle):
    env = CarRacingState(action_mode="steer_throttle", gas_at_rest=True, action_repeat=2)
    plain = CarRacingState(action_repeat=2)  # CarRacing's own [steer, gas, brake]
    o0, _ = env.reset(seed=0)
    plain.reset(seed=0)
    assert o0[IDX["v_forward"]] == 0.0  # the car stands at the start
    obs, r, *_ = env.step(np.array([0.2, throttle], dtype=np.float32))
    expected, r_expected, *_ = plain.step(_a(0.2, (throttle + 1.0) / 2.0, 0.0))
    np.testing.assert_array_equal(obs, expected)
    assert r == r_expected


def test_gas_at_rest_drives_a_moving_car_as_the_plain_axis_until_it_stands():
    # full gas, then a light brake down to a standstill and on
    actions = [np.array([0.0, 1.0], np.float32)] * 15 + [np.array([0.0, -0.3], np.float32)] * 60
    def drive(gas_at_rest):
        env = CarRacingState(action_mode="steer_throttle", gas_at_rest=gas_at_rest, action_repeat=2)
        env.reset(seed=0)
        speeds, observations = [], []
        for a in actions:
            vx, vy = env.car.hull.linearVelocity
            speeds.append(math.hypot(vx, vy))  # at the start of the step
            observations.append(env.step(a)[0])
        return np.array(speeds), np.array(observations)

    speeds, plain = drive(False)
    _, mapped = drive(True)
    first_rest = int(np.argmax(speeds[1:] < car_module.REST_SPEED)) + 1  # the first step that starts at rest
    assert 15 < first_rest < len(actions) - 1 and speeds[1:first_rest].min() >= car_module.REST_SPEED
    np.testing.assert_array_equal(mapped[:first_rest], plain[:first_rest])  # the same while it moves
    assert plain[-1, IDX["v_forward"]] == 0.0  # the plain axis leaves it standing ...
    assert mapped[first_rest, IDX["gas_level"]] > 0.0  # ... gas_at_rest gives gas 0.35 at rest


def test_gas_at_rest_needs_steer_throttle_and_a_bool():
    with pytest.raises(ValueError, match="gas_at_rest needs action_mode 'steer_throttle'"):
        CarRacingState(gas_at_rest=True)
    with pytest.raises(ValueError, match="gas_at_rest must be true or false"):
        CarRacingState(action_mode="steer_throttle", gas_at_rest="yes")

def test_recovery_starts_put_the_car_at_rest_beside_a_random_point_with_the_tiles_behind_it_visited():
    env = CarRacingState(recovery_starts=1.0, recovery_start_offset=30.0, action_mode="steer_throttle")
    distances, starts = [], []
    for seed in range(8):
        obs, info = env.reset(seed=seed)
        k, n = info["start_tile"], info["tiles_total"]
        starts.append(k)
        assert 0 <= k < n and all(t.road_visited for t in env.road[: k + 1])
        # beyond them, only what the wheels touch in the reset's first frame (credited to the first step;
        # a start beside the road can stand on a neighbouring part of the track)
        touched = [i for i, t in enumerate(env.road) if t.road_visited and i > k]
        assert info["tiles_visited"] == k + 1 + len(touched) and len(touched) <= 4
        beta, x, y = env.track[k][1:4]
        dx, dy = np.asarray(env.car.hull.position) - (x, y)
        distances.append(math.hypot(dx, dy))
        # the car stands across the road from point k: the offset is along the road's normal (cos b, sin b)
        assert abs(-dx * math.sin(beta) + dy * math.cos(beta)) < 0.05
        assert abs(obs[IDX["v_forward"]]) < 0.01
        assert obs[IDX["tiles_visited"]] == pytest.approx(info["tiles_visited"] / n)
    assert max(distances) <= 30.0 + 0.05 and max(distances) > car_module.TRACK_WIDTH  # some start on the grass
    assert len(set(starts)) == len(starts)


@pytest.mark.parametrize("angle", [0.0, 20.0])
def test_a_recovery_start_points_along_the_road_within_its_angle(angle, monkeypatch):
    headings = []  # the angle each car is built with (its first physics frame turns it by up to 3 degrees)
    real_car = car_module.Car

    def car(world, init_angle, x, y):
        headings.append(init_angle)
        return real_car(world, init_angle, x, y)

    monkeypatch.setattr(car_module, "Car", car)
    env = CarRacingState(recovery_starts=1.0, recovery_start_offset=0.0, recovery_start_angle=angle)
    turns = []
    for seed in range(6):
        _, info = env.reset(seed=seed)
        beta, x, y = env.track[info["start_tile"]][1:4]
        assert np.allclose(env.car.hull.position, (x, y), atol=0.05)  # on the centre line (after one frame)
        turns.append(math.degrees(headings[-1] - beta))
    assert max(abs(t) for t in turns) <= angle
    assert (max(turns) - min(turns) > 5.0) == (angle > 0)  # drawn, not fixed
    with pytest.raises(ValueError, match=r"recovery_start_angle must be in \[0, 180\] degrees"):
        CarRacingState(recovery_start_angle=181.0)


def test_a_recovery_start_earns_only_the_tiles_it_visits_itself():
    env = CarRacingState(recovery_starts=1.0, recovery_start_offset=5.0)
    for seed in range(3):
        _, info = env.reset(seed=seed)
        n, start_visited = info["tiles_total"], info["start_tile"] + 1
        total = 0.0
        for action in block_actions(seed, frames=300):
            _, r, term, trunc, info = env.step(action)
            total += r
            if term or trunc:
                break
        assert not info["out_of_playfield"]
        # CarRacing's rewards: 1000/N per tile visited after the start, -0.1 per frame
        assert total == pytest.approx((info["tiles_visited"] - start_visited) * 1000.0 / n - 0.1 * info["frames"])


def test_recovery_starts_is_a_fraction_of_resets_and_off_by_default():
    plain = CarRacingState()
    _, info = plain.reset(seed=0)
    assert info["start_tile"] == 0 and plain.car.hull.angle == pytest.approx(plain.track[0][1], abs=0.01)
    env = CarRacingState(recovery_starts=0.5)
    recovered = [env.reset(seed=s)[1]["start_tile"] > 0 for s in range(40)]
    assert 10 <= sum(recovered) <= 30
    with pytest.raises(ValueError, match=r"recovery_starts must be a fraction in \[0, 1\]"):
        CarRacingState(recovery_starts=1.5)
    with pytest.raises(ValueError, match="recovery_start_offset must be a finite number >= 0"):
        CarRacingState(recovery_start_offset=-1.0)


# ---------------------------------------------------------------- render
def test_rgb_render_and_no_drawing_without_render_mode():
    env = gym.make(ENV_ID, render_mode="rgb_array")
    env.reset(seed=2)
    env.step(_a(0.0, 1.0, 0.0))
    frame = env.render()
    assert frame.shape == (400, 600, 3) and frame.dtype == np.uint8
    assert frame.std() > 10  # a real picture, not a blank frame
    env.close()

    quiet = CarRacingState()
    quiet.reset(seed=2)
    for _ in range(20):
        quiet.step(_a(0.0, 1.0, 0.0))
    assert quiet.surf is None  # nothing was ever drawn


# ------------------------------------------------------ hand controller
def hand_controller(obs: np.ndarray, lat_accel: float = 60.0, decel: float = 50.0) -> np.ndarray:
    """Pure pursuit on the look-ahead points plus a curvature speed limit, from features only."""
    speed = float(obs[IDX["v_forward"]]) * 100.0
    pts = obs[AHEAD].reshape(-1, 2).astype(np.float64) * AHEAD_SCALE[:, None]
    # steering: pure pursuit towards the centre-line point at a speed-dependent distance
    reach = min(max(0.25 * speed + 6.0, 7.0), 45.0)
    x = float(np.interp(reach, AHEAD_DIST, pts[:, 0]))
    y = float(np.interp(reach, AHEAD_DIST, pts[:, 1]))
    steer = math.atan(2.0 * WHEELBASE * math.sin(math.atan2(x, y)) / max(math.hypot(x, y), 1e-6))
    # speed: curvature between look-ahead points gives the cornering speed; allow braking distance
    seg = np.diff(pts, axis=0)
    heading = np.unwrap(np.arctan2(seg[:, 0], seg[:, 1]))
    step = np.diff(AHEAD_DIST)
    curvature = np.abs(np.diff(heading)) / (0.5 * (step[1:] + step[:-1]))
    corner_speed = np.sqrt(lat_accel / np.maximum(curvature, 1e-6))
    allowed = np.sqrt(corner_speed**2 + 2.0 * decel * np.maximum(AHEAD_DIST[1:-1] - 5.0, 0.0))
    target = min(95.0, float(allowed.min()))
    gas = brake = 0.0
    if speed < target:
        gas = 1.0 if speed < target - 3.0 else 0.3
    elif speed > target + 5.0:
        brake = 0.8
    rear_spin = 50.0 * float(obs[IDX["wheel_speed_rl"]] + obs[IDX["wheel_speed_rr"]]) - speed
    if rear_spin > 10.0:  # traction control
        gas = 0.0
    return _a(steer, gas, brake)


def controller_score(track_seed: int | None, seed: int = 0) -> tuple[float, dict]:
    env = CarRacingState(track_seed=track_seed)
    obs, _ = env.reset(seed=seed)
    total = 0.0
    while True:
        obs, r, term, trunc, info = env.step(hand_controller(obs))
        total += r
        if term or trunc:
            return total, info


@pytest.mark.parametrize("track_seed", [1, 3])
def test_hand_controller_on_features_drives_the_lap(track_seed):
    score, info = controller_score(track_seed)
    assert info["lap_finished"] and info["frames"] < 1000
    assert score > 800


def test_a_closed_lap_is_reported_as_gymnasiums_is_success():
    import torch

    from td3_lightning import TD3
    from td3_lightning.evaluation import run_episode

    shipped = Path(car_module.__file__).parents[1] / "checkpoints" / "car_random_tracks.ckpt"
    actor = TD3.load_from_checkpoint(shipped, map_location="cpu").actor.eval()

    def drive(obs):
        with torch.no_grad():
            return actor(torch.as_tensor(obs)[None])[0].numpy()

    env = CarRacingState(action_mode="steer_throttle", action_repeat=2)
    closed = run_episode(env, drive, seed=3)  # the shipped driver closes this lap in about 300 steps
    assert closed["success"] == 1.0 and closed["length"] < 500
    coasting = run_episode(env, lambda obs: np.zeros(2, dtype=np.float32), seed=3)
    assert coasting["success"] == 0.0 and coasting["length"] == 500  # the time limit, lap open
    assert math.isnan(run_episode(gym.make("Pendulum-v1"), lambda obs: np.zeros(1, np.float32), seed=0)["success"])


def test_a_training_aid_in_the_evaluations_env_kwargs_is_warned_of_and_not_asked_for_by_a_checkpoint():
    import warnings

    from td3_lightning.data import ReplayDataModule
    from td3_lightning.envs import env_overrides, training_aid_names, training_aids_set

    assert set(training_aid_names("CarRacingState-v0")) <= set(inspect_keywords(CarRacingState))  # real keywords
    assert training_aid_names("CarRacingPixels-v0") == CarRacingState.TRAINING_AIDS
    aided = {"max_stall_frames": 50, "frame_penalty": 0.1, "action_repeat": 2}
    dm = ReplayDataModule("CarRacingState-v0", env_kwargs=aided)
    for stage, played, fix in (("validate", "this validate plays", "leave them out to score by its own rules"),
                               ("test", "this test plays", "leave them out to score by its own rules")):
        with pytest.warns(UserWarning) as caught:
            dm.setup(stage)
        assert [str(w.message) for w in caught] == [
            f"data.env_kwargs sets max_stall_frames, frame_penalty, training aids of CarRacingState-v0: {played} by "
            f"those changed rules, so its return is not the env's score; {fix}"]
    with warnings.catch_warnings():  # at their defaults, or given to the training env only: nothing to say
        warnings.simplefilter("error")
        ReplayDataModule("CarRacingState-v0", env_kwargs={"frame_penalty": 0.0, "action_repeat": 2},
                         train_env_kwargs={"max_stall_frames": 50}).setup("validate")
    assert training_aids_set("CarRacingState-v0", {"recovery_starts": 0.1, "aid_features": True}) == [
        "recovery_starts"]  # the aid features only add what the aids charge to the observation
    # a checkpoint trained with aids in env_kwargs is played by the env's rules: only its other kwargs are asked for
    trained = {"max_stall_frames": 50, "action_repeat": 2}
    assert env_overrides(trained, "CarRacingState-v0", {}) == ["--data.env_kwargs.max_stall_frames 50",
                                                               "--data.env_kwargs.action_repeat 2"]
    assert env_overrides(trained, "CarRacingState-v0", {}, ignore=training_aid_names("CarRacingState-v0")) == [
        "--data.env_kwargs.action_repeat 2"]


def inspect_keywords(cls: type) -> list[str]:
    import inspect

    return list(inspect.signature(cls.__init__).parameters)
