"""Tiny environments with known answers, for tests."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np


class ConstantRewardEnv(gym.Env):
    """Reward 1 on every step, never terminated, truncated after ``horizon`` steps.

    The task is infinite-horizon: with correct bootstrapping through truncation every
    Q value converges to ``1 / (1 - gamma)``.
    """

    def __init__(self, horizon: int = 20, action_low: float = -1.0, action_high: float = 1.0, obs_dim: int = 2):
        self.horizon = horizon
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (obs_dim,), np.float32)
        self.action_space = gym.spaces.Box(action_low, action_high, (1,), np.float32)
        self.t = 0

    def _obs(self) -> np.ndarray:
        return self.np_random.uniform(-1, 1, self.observation_space.shape).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, dtype=np.float32)), action
        self.t += 1
        return self._obs(), 1.0, False, self.t >= self.horizon, {}


class CountingEnv(gym.Env):
    """Observation ``[t, seed % 1000]``: the step within the episode and the episode's reset
    seed (modulo 1000, so that float32 holds it exactly).

    Episodes are truncated after ``horizon`` steps, or terminated at step ``end_at`` when set,
    so a stored transition that crossed a reset would show a jump in ``t`` or ``seed``."""

    def __init__(self, horizon: int = 7, end_at: int | None = 5):
        self.horizon, self.end_at = horizon, end_at
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.t, self.seed = 0, -1.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.seed = 0, float(seed % 1000 if seed is not None else -1)
        return np.array([self.t, self.seed], np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.end_at is not None and self.t == self.end_at and self.seed % 2 == 0
        return np.array([self.t, self.seed], np.float32), 1.0, terminated, self.t >= self.horizon, {}


class EnvStepsEnv(CountingEnv):
    """Observation ``[t, n]``: the step within the episode and the reset option ``env_steps`` the
    episode started with (-1 without it)."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed = float((options or {}).get("env_steps", -1))
        return np.array([self.t, self.seed], np.float32), {}


class DiscreteActionEnv(ConstantRewardEnv):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Discrete(3)


class UnboundedActionEnv(ConstantRewardEnv):
    def __init__(self):
        super().__init__()
        self.action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)


class ImageObsEnv(ConstantRewardEnv):
    def __init__(self):
        super().__init__()
        self.observation_space = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)


class TwoActionEnv(ConstantRewardEnv):
    """ConstantRewardEnv with a 2-D action (same observations)."""

    def __init__(self, obs_dim: int = 3):
        super().__init__(obs_dim=obs_dim)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


class ActionRewardEnv(ConstantRewardEnv):
    """ConstantRewardEnv whose reward is the action: an episode's return is the sum of its actions."""

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float(np.asarray(action).reshape(-1)[0]), terminated, truncated, info


class NonFiniteEnv(ConstantRewardEnv):
    """ConstantRewardEnv whose ``bad_at``-th step (counted over the instance's lifetime, 1-based)
    returns ``value`` as the reward (``field="reward"``) or in the observation (``field="obs"``),
    or whose ``bad_at``-th reset returns it in the observation (``field="reset"``)."""

    def __init__(self, bad_at: int = 100, field: str = "reward", value: float = float("nan"), horizon: int = 20):
        super().__init__(horizon=horizon)
        self.bad_at, self.field, self.value = bad_at, field, value
        self.steps = self.resets = 0

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.resets += 1
        if self.field == "reset" and self.resets == self.bad_at:
            obs = obs.copy()
            obs[0] = self.value
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.steps == self.bad_at and self.field != "reset":
            if self.field == "reward":
                reward = self.value
            else:
                obs = obs.copy()
                obs[1] = self.value
        return obs, reward, terminated, truncated, info


class NoDisplayEnv(ConstantRewardEnv):
    """Says it renders rgb_array frames but fails to, as MuJoCo does without an OpenGL context."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode: str | None = None):
        super().__init__()
        self.render_mode = render_mode

    def render(self):
        # as glfw says it without a display (GLFWError is a UserWarning issued from the glfw module)
        warnings.warn_explicit("(65544) b'X11: The DISPLAY environment variable is missing'", UserWarning,
                               "glfw/__init__.py", 1, module="glfw")
        raise RuntimeError("an OpenGL platform library has not been loaded into this process\nsecond line")


def register() -> None:
    for name, cls in [
        ("ConstantReward-v0", ConstantRewardEnv),
        ("ActionReward-v0", ActionRewardEnv),
        ("Counting-v0", CountingEnv),
        ("EnvSteps-v0", EnvStepsEnv),
        ("DiscreteAction-v0", DiscreteActionEnv),
        ("UnboundedAction-v0", UnboundedActionEnv),
        ("ImageObs-v0", ImageObsEnv),
        ("NonFinite-v0", NonFiniteEnv),
        ("TwoActions-v0", TwoActionEnv),
        ("NoDisplay-v0", NoDisplayEnv),
    ]:
        env_id = f"td3test/{name}"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=cls)
