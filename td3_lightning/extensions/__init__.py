"""What TD3 does beyond the paper, each in its own file, plugged into the core at six seams.

- :class:`ActorTerm` (``actor_terms.py``): a weighted term added to the actor's loss
  ``-Q_1(s, pi(s))``, logged as ``train/<name>``: the preactivation penalty, state prediction,
  the teacher.
- :class:`BatchTransform`: a replay batch is passed through these before the update:
  n-step returns, DrQ's random shifts.
- :class:`StepHook`: called before every training step with its number: network resets, hard target copies.
- :class:`TargetSync` (``targets.py``): how the targets follow their networks: Polyak averaging after each actor
  update, or hard copies every ``target_update_every`` steps with what refreshes at a copy.
- :class:`AuxiliaryLoss`: a loss with its own optimizer, stepped on every replay batch before the critic:
  SALE's encoder (``sale.py``).
- ``TargetValue`` (``value_clipping.py``): how the critics' target combines the reward with the next value,
  ``r + discount * next_q``; TD7's value clipping clamps ``next_q`` to the range of earlier targets.

The critic's loss is not a seam: it is the core's (squared error, LAP's on prioritised batches, or the cross-entropy
of distributional critics, ``distributional.py``), and the update returns what it produces for others (losses,
loss terms, LAP's priorities) rather than writing it anywhere.

:func:`build_extensions` turns the module's hyperparameters into these parts; the module calls
them at one place each (see ``docs/options.md``, "How to add an option").
"""

from __future__ import annotations

from td3_lightning.extensions.base import (
    ActorTerm, ActorTerms, ActorView, AuxiliaryLoss, BatchTransform, StepHook, critic_view)
from td3_lightning.extensions.build import (
    Extensions, build_extensions, check_extension_spaces, check_extensions_act)

__all__ = ["ActorTerm", "ActorTerms", "ActorView", "AuxiliaryLoss", "BatchTransform", "StepHook", "critic_view",
           "Extensions", "build_extensions", "check_extension_spaces", "check_extensions_act"]
