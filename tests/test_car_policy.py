"""The trained CarRacing policy shipped in the package loads and drives."""

from __future__ import annotations

import json
from pathlib import Path

import torch

import td3_lightning
from td3_lightning import TD3
from td3_lightning.cli import main

SHIPPED = Path(td3_lightning.__file__).parent / "checkpoints" / "car_random_tracks.ckpt"
SHIPPED_PIXELS = Path(td3_lightning.__file__).parent / "checkpoints" / "car_pixels.ckpt"
TAUGHT = Path(td3_lightning.__file__).parent / "checkpoints" / "car_taught.ckpt"


def _test_results(argv: list[str], capsys) -> dict:
    main(argv)
    out = capsys.readouterr().out
    path = next(line.split("written to ")[1] for line in out.splitlines() if "test results written to" in line)
    return json.loads(Path(path).read_text())


def _closes_laps(path: Path, seeds_and_least: list[tuple[int, float]]) -> None:
    """The state driver at ``path`` closes the lap of each track seed with a return above its least."""
    from td3_lightning.envs.car_racing import CarRacingState
    from td3_lightning.evaluation import run_episode

    actor = TD3.load_from_checkpoint(path, map_location="cpu").policy.eval()

    def drive(obs):
        with torch.no_grad():
            return actor(torch.as_tensor(obs)[None])[0].numpy()

    env = CarRacingState(action_mode="steer_throttle", action_repeat=2)
    for seed, least in seeds_and_least:
        episode = run_episode(env, drive, seed=seed)
        assert episode["success"] == 1.0 and episode["return"] > least, (seed, episode)


def test_shipped_checkpoint_is_small_and_rebuilds_without_an_env():
    assert SHIPPED.stat().st_size < 5_000_000
    model = TD3.load_from_checkpoint(SHIPPED, map_location="cpu")
    assert model.hparams.obs_shape == [43]
    # action_mode steer_throttle: [steer, throttle]
    assert model.hparams.action_low == [-1.0, -1.0] and model.hparams.action_high == [1.0, 1.0]
    action = model.actor(torch.zeros(5, 43))
    assert action.shape == (5, 2) and action.abs().max() <= 1.0


def test_shipped_policy_drives_held_out_tracks(tmp_path, monkeypatch, capsys):
    """Held-out tracks 80-83: on each of them the shipped driver closes the lap whatever the CPU's float
    rounding (checked with input perturbations of 1e-5: 931.1-939.1, mean at least 934.4), so the test holds
    on any machine."""
    monkeypatch.chdir(tmp_path)
    results = _test_results(["test", "--config", "car.yaml", "--data.env_kwargs.aid_features", "false",
                             "--ckpt_path", str(SHIPPED), "--data.test_episodes", "4", "--data.test_seed", "80"],
                            capsys)
    assert results["test/episodes"] == 4.0
    # an untrained policy scores below 0 on these tracks; the shipped driver closes all four laps (931-939)
    assert results["test/success_rate"] == 1.0 and results["episode_successes"] == [1.0] * 4, results
    assert results["test/return_min"] > 930.5, results
    assert results["test/return"] > 934.0, results


def test_shipped_policy_drives_on_where_the_driver_before_it_stood_still():
    """Tracks on which the driver shipped before braked to a standstill on the road (docs/track_survey.md): the
    shipped driver closes each lap (1e-5 input perturbations: 911.0-912.3, 922.2-922.8, 925.3-926.0)."""
    _closes_laps(SHIPPED, [(1000102, 908.0), (1000885, 919.0), (1000600, 922.0)])


def test_taught_driver_is_small_and_acts_as_recorded_without_reading_its_teacher():
    """``car_taught.yaml``'s driver: 43 features, its teacher named in the hyperparameters and not needed to load
    or act; the actions it gave on these observations when it was trained."""
    assert TAUGHT.stat().st_size < 5_000_000
    model = TD3.load_from_checkpoint(TAUGHT, map_location="cpu")
    assert model.hparams.obs_shape == [43] and model.hparams.critic_obs_shape is None
    assert model.hparams.teacher == "td3_lightning/checkpoints/car_random_tracks.ckpt"
    assert model.extensions.actor_terms["teacher"].teacher == ()  # read only when fitting starts
    obs = torch.randn(4, 43, generator=torch.Generator().manual_seed(123))
    with torch.no_grad():
        torch.testing.assert_close(model.actor(obs), torch.tensor([  # to float32 kernels' few ulps across CPUs
            [0.9999388456344604, -0.038368720561265945], [-0.9982863068580627, -0.9924534559249878],
            [0.9783214926719666, -0.9935483336448669], [-1.0, -0.9999971985816956]]), rtol=0, atol=1e-5)


def test_taught_driver_closes_held_out_laps_faster_than_its_teacher(tmp_path, monkeypatch, capsys):
    """Held-out tracks 80-83, where the teacher scores 931-939 (mean at least 934.4): the taught driver closes
    all four laps at 932.7-940.8 with 1e-5 input perturbations (mean at least 936.4), so the test holds on any
    machine."""
    monkeypatch.chdir(tmp_path)
    results = _test_results(["test", "--config", "car_taught.yaml", "--ckpt_path", str(TAUGHT),
                             "--data.test_episodes", "4", "--data.test_seed", "80"], capsys)
    assert results["episode_successes"] == [1.0] * 4, results
    assert results["test/return_min"] > 932.0, results
    assert results["test/return"] > 935.5, results


def test_taught_driver_drives_on_where_the_driver_before_the_shipped_one_stood_still():
    """The standstill tracks of docs/track_survey.md: the taught driver closes each lap (1e-5 input perturbations:
    913.3-914.2, 924.1-924.8, 927.0-927.8)."""
    _closes_laps(TAUGHT, [(1000102, 912.0), (1000885, 923.0), (1000600, 926.0)])


def test_a_shipped_drivers_path_works_from_any_folder(tmp_path, monkeypatch, capsys):
    """The README's ``td3_lightning/checkpoints/...`` paths are looked up beside the installed package."""
    from td3_lightning.errors import shipped_path
    from td3_lightning.export import main as export

    monkeypatch.chdir(tmp_path)
    assert Path(shipped_path("td3_lightning/checkpoints/car_taught.ckpt")) == TAUGHT.resolve()
    for other in ("nowhere.ckpt", "", "td3_lightning/nowhere.ckpt", "td3_lightning/../README.md"):
        assert shipped_path(other) == other  # said as it was given by whoever reads it
    results = _test_results(["test", "--config", "car_taught.yaml", "--ckpt_path",
                             "td3_lightning/checkpoints/car_taught.ckpt", "--data.test_episodes", "1",
                             "--data.test_seed", "80"], capsys)
    assert results["episode_successes"] == [1.0] and results["test/return"] > 932.0, results
    export(["--ckpt_path", "td3_lightning/checkpoints/car_taught.ckpt", "--out", "taught.ckpt"])
    exported = TD3.load_from_checkpoint(tmp_path / "taught.ckpt", map_location="cpu").actor.state_dict()
    shipped = TD3.load_from_checkpoint(TAUGHT, map_location="cpu").actor.state_dict()
    assert exported.keys() == shipped.keys() and all(torch.equal(exported[k], shipped[k]) for k in shipped)


def test_shipped_pixel_checkpoint_is_small_and_its_actor_reads_frames_only():
    assert SHIPPED_PIXELS.stat().st_size < 5_000_000
    model = TD3.load_from_checkpoint(SHIPPED_PIXELS, map_location="cpu")
    assert model.hparams.obs_shape == [4, 40, 40] and model.hparams.critic_obs_shape == [43]
    frames = torch.randint(0, 256, (3, 4, 40, 40), dtype=torch.uint8)
    action = model.actor(frames)
    assert action.shape == (3, 2) and action.abs().max() <= 1.0


def test_shipped_pixel_driver_drives_held_out_tracks_from_frames(tmp_path, monkeypatch, capsys):
    """Held-out tracks 8-10 from 4 stacked 40x40 gray frames (``car_pixels.yaml``'s env, CarRacing's unmodified
    rules): the pixel driver closes all three laps (933.6, 937.4, 941.4)."""
    monkeypatch.chdir(tmp_path)
    results = _test_results(["test", "--config", "car_pixels.yaml", "--ckpt_path", str(SHIPPED_PIXELS),
                             "--data.test_episodes", "3", "--data.test_seed", "8"], capsys)
    assert results["test/episodes"] == 3.0
    assert results["episode_successes"] == [1.0] * 3, results
    assert results["test/return_min"] > 925.0, results
    assert results["test/return"] > 930.0, results


def test_shipped_drivers_act_as_recorded_on_fixed_observations():
    """The actions both shipped drivers gave on these observations when they were trained."""
    recorded = {
        SHIPPED: [[1.0, -0.9954666495323181], [0.9877885580062866, 0.785707414150238],
                  [0.306755006313324, 0.27855557203292847], [-1.0, -1.0]],
        SHIPPED_PIXELS: [[-0.6395738124847412, -0.42971646785736084], [0.9952227473258972, -0.3600955903530121],
                         [0.9130895733833313, -0.06650747358798981], [0.589087963104248, -0.006425992585718632]],
    }
    for path, expected in recorded.items():
        model = TD3.load_from_checkpoint(path, map_location="cpu")
        g = torch.Generator().manual_seed(123)
        shape = model.hparams.obs_shape
        obs = (torch.randn(4, *shape, generator=g) if len(shape) == 1
               else torch.randint(0, 256, (4, *shape), generator=g, dtype=torch.uint8))
        with torch.no_grad():
            torch.testing.assert_close(model.actor(obs), torch.tensor(expected), rtol=0, atol=1e-5,
                                       msg=path.name)  # recorded on another CPU: float32 kernels differ by ulps
