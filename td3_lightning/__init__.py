"""TD3 reinforcement learning as a PyTorch Lightning trainer.

The public classes are imported lazily, so that importing ``td3_lightning.envs`` (for
example in an environment subprocess) does not load Lightning. Importing the package
registers its gymnasium environments (``CarRacingState-v0``, ``CarRacingPixels-v0``) with
string entry points: gymnasium is imported, Box2D and Lightning are not. It does nothing else
(no warning filter, no logging setting): the command line hides the warnings that a run raises
by design (:func:`td3_lightning.cli.ignore_expected_warnings`).
"""

from __future__ import annotations

import importlib
from typing import Any

from td3_lightning.registration import register_envs as _register_envs

# gymnasium.make("td3_lightning:CarRacingState-v0") imports this package: registering here is what makes it work
_register_envs()

_EXPORTS = {
    "TD3": "td3_lightning.module",
    "Actor": "td3_lightning.networks",
    "CriticEnsemble": "td3_lightning.networks",
    "EnvLoop": "td3_lightning.envloop",
    "RLProgressBar": "td3_lightning.callbacks",
    "TestReport": "td3_lightning.callbacks",
    "ReplayBuffer": "td3_lightning.replay",
    "ReplayDataModule": "td3_lightning.data",
    "make_env": "td3_lightning.envs",
}
__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'td3_lightning' has no attribute {name!r}")
