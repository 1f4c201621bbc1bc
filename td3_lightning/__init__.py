"""TD3 reinforcement learning as a PyTorch Lightning trainer.

The public classes are imported lazily, so that importing ``td3_lightning.envs`` (for
example in an environment subprocess) does not load Lightning. Importing the package
registers its gymnasium environments (``CarRacingState-v0``, ``CarRacingPixels-v0``) with
string entry points: gymnasium is imported, Box2D and Lightning are not.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from td3_lightning.registration import register_envs as _register_envs

# Expected in this design: the target networks stay in eval mode; the endless replay stream
# reports a length so Lightning samples each batch right before it is used; checkpoints
# hold the state after the step's optimizer updates, which is what resuming needs.
warnings.filterwarnings("ignore", message=r"Found \d+ module\(s\) in eval mode")
warnings.filterwarnings("ignore", message=r"Your `IterableDataset` has `__len__` defined")
warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)")
warnings.filterwarnings("ignore", message=r"Using ModelCheckpoint with manual optimization")

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
