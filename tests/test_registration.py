"""The environments register the gymnasium way: on ``import td3_lightning``, cheaply, and nothing else
happens on that import."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import td3_lightning  # registers the envs
from td3_lightning.envs.car_racing import FEATURE_NAMES

IDS = ["CarRacingState-v0", "CarRacingPixels-v0"]


def _python(code: str, cli_env: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    env = {**cli_env, "OMP_NUM_THREADS": "1", "SDL_VIDEODRIVER": "dummy"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_make_with_the_module_prefix_needs_no_prior_import(cli_env, tmp_path):
    code = (
        "import sys, json, gymnasium as gym\n"
        "assert 'td3_lightning' not in sys.modules\n"
        "env = gym.make('td3_lightning:CarRacingState-v0', action_mode='steer_throttle', action_repeat=2)\n"
        "obs, _ = env.reset(seed=3)\n"
        "import td3_lightning\n"
        "print(json.dumps({'file': td3_lightning.__file__, 'obs': obs.shape, 'act': env.action_space.shape,\n"
        "                  'id': env.spec.id, 'cls': type(env.unwrapped).__name__}))\n"
    )
    out = json.loads(_python(code, cli_env, tmp_path).stdout.strip().splitlines()[-1])
    assert out["file"].startswith(str(td3_lightning.__file__).rsplit("td3_lightning", 1)[0])  # this checkout's package
    assert out["obs"] == [43] and out["act"] == [2]
    assert out["id"] == "CarRacingState-v0" and out["cls"] == "CarRacingState"


def test_import_registers_both_ids_without_box2d_or_lightning(cli_env, tmp_path):
    code = (
        "import sys, json, gymnasium as gym\n"
        "before = [i for i in gym.registry if i.startswith('CarRacing')]\n"
        "import td3_lightning\n"
        "after = [i for i in gym.registry if i.startswith('CarRacing')]\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'Box2D', 'pygame', 'lightning', 'torch'})\n"
        "car = [m for m in sys.modules if m.startswith(('td3_lightning.envs', 'gymnasium.envs.box2d'))]\n"
        "specs = {i: [gym.spec(i).entry_point, gym.spec(i).max_episode_steps] for i in after if i not in before}\n"
        "print(json.dumps({'before': before, 'after': after, 'heavy': heavy, 'car': car, 'specs': specs}))\n"
    )
    out = json.loads(_python(code, cli_env, tmp_path).stdout.strip().splitlines()[-1])
    assert out["before"] == ["CarRacing-v3"]
    assert out["after"] == ["CarRacing-v3", *IDS]
    assert out["heavy"] == [] and out["car"] == []
    assert out["specs"] == {
        "CarRacingState-v0": ["td3_lightning.envs.car_racing:CarRacingState", None],
        "CarRacingPixels-v0": ["td3_lightning.envs.car_racing_pixels:CarRacingPixels", None],
    }


def test_import_changes_no_warning_filter(cli_env, tmp_path):
    code = (
        "import json, warnings\n"
        "import gymnasium  # registering needs it, and it adds a filter of its own on import\n"
        "before = [repr(f) for f in warnings.filters]\n"
        "import td3_lightning, td3_lightning.envs\n"
        "print(json.dumps({'before': before, 'after': [repr(f) for f in warnings.filters]}))\n"
    )
    out = json.loads(_python(code, cli_env, tmp_path).stdout.strip().splitlines()[-1])
    assert out["after"] == out["before"]


@pytest.mark.parametrize("env_id", IDS)
def test_env_passes_gymnasiums_env_checker(env_id, monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # off-screen drawing for the render check
    env = gym.make(env_id, render_mode="rgb_array")
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        check_env(env.unwrapped)  # spaces, reset and step API, seeding determinism, rgb_array rendering
    assert [str(w.message) for w in found] == []  # check_env reports what it finds as warnings
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (400, 600, 3) and frame.dtype == np.uint8
    env.close()


def test_random_actions_loop_scores_like_car_racing():
    """The loop of docs/ecosystem.md: plain gymnasium code drives the env."""
    env = gym.make("td3_lightning:CarRacingState-v0", action_mode="steer_throttle", action_repeat=2)
    env.action_space.seed(0)
    obs, info = env.reset(seed=0)
    total, steps, done = 0.0, 0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        total, steps, done = total + reward, steps + 1, terminated or truncated
    env.close()
    assert obs.shape == (len(FEATURE_NAMES),) == (43,)
    assert truncated and not terminated and info["frames"] == 1000 and steps == 500  # 2 frames a step
    # CarRacing's score: -0.1 per frame, +1000/N per visited tile
    tiles, n = info["tiles_visited"], info["tiles_total"]
    assert tiles > 0 and total == pytest.approx(-0.1 * 1000 + 1000 / n * tiles, abs=1e-6)
    assert obs[FEATURE_NAMES.index("tiles_visited")] == pytest.approx(tiles / n, abs=1e-6)
