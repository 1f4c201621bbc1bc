"""The project's gymnasium environments, registered when ``td3_lightning`` is imported.

``import td3_lightning`` is enough for ``gymnasium.make("CarRacingState-v0")``, and
``gymnasium.make("td3_lightning:CarRacingState-v0")`` works in a fresh interpreter because
gymnasium imports the module named before the colon. The entry points are strings, so
registering loads gymnasium alone: the env module, and with it Box2D and pygame, is
imported when an env is made.
"""

from __future__ import annotations

import gymnasium as gym

#: env id -> entry point ("module:class")
ENTRY_POINTS = {
    "CarRacingState-v0": "td3_lightning.envs.car_racing:CarRacingState",
    "CarRacingPixels-v0": "td3_lightning.envs.car_racing_pixels:CarRacingPixels",
}


def register_envs() -> None:
    """Register every env of :data:`ENTRY_POINTS` with gymnasium (idempotent).

    Registered without ``max_episode_steps``: the envs truncate after 1000 physics frames by
    themselves (see :class:`~td3_lightning.envs.car_racing.CarRacingState`).
    """
    for env_id, entry_point in ENTRY_POINTS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, max_episode_steps=None, reward_threshold=900)
