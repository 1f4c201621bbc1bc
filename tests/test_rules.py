"""The named rules between options (``td3_lightning/rules.py``): each refuses a known case with its one line, and
the defaults break none."""

from __future__ import annotations

import inspect

import pytest

from td3_lightning import TD3, ReplayDataModule
from td3_lightning.declarations import options_of
from td3_lightning.errors import UserInputError
from td3_lightning.rules import DATA_RULES, MODEL_RULES, check_rules, is_device, is_range

#: per rule: the options that break it (over the defaults) and the line that refuses them
BROKEN = {
    "hidden sizes are positive": (
        {"hidden_dims": [256, 0]}, "model.hidden_dims must be positive sizes, e.g. [256, 256], got [256, 0]"),
    "critic hidden sizes are positive": (
        {"critic_hidden_dims": []}, "model.critic_hidden_dims must be positive sizes, e.g. [1024, 1024], or null (the "
                                    "actor's), got []"),
    "value bins need the range they cover": (
        {"critic_bins": 51}, "model.critic_bins 51 needs model.critic_range: auto, or [low, high], the range of the "
                             "critics' Q values (e.g. [-100, 2000] for HalfCheetah: docs/options.md)"),
    "a value range is [low, high]": (
        {"critic_range": [0.0, float("inf")]},
        "model.critic_range must be [low, high], two finite numbers with low < high, got [0.0, inf]"),
    "an automatic value range needs a discount": (
        {"critic_bins": 51, "critic_range": "auto", "gamma": 1.0},
        "model.critic_range auto holds r / (1 - gamma), unbounded at model.gamma 1.0: set model.gamma below 1, or "
        "model.critic_range [low, high]"),
    "resets come after training steps": (
        {"reset_steps": [100, True]}, "model.reset_steps must be training steps >= 1, e.g. [60000], got [100, True]"),
    "the fixed encoder refreshes at hard target updates": (
        {"embedding_dim": 256}, "model.embedding_dim refreshes the fixed encoder at each hard target update: set "
                                "model.target_update_every (TD7: 250)"),
    "hard target updates copy into target networks": (
        {"target_networks": False, "target_update_every": 250},
        "model.target_update_every copies the networks into their targets, and model.target_networks false has "
        "none: set model.target_update_every 0 (with SALE and value clipping, keep the targets)"),
    "batch renormalisation or LayerNorm": (
        {"batch_renorm": True, "layer_norm": True},
        "model.batch_renorm and model.layer_norm both normalise the hidden layers: choose one"),
    "batch renormalisation is of the plain networks": (
        {"batch_renorm": True, "embedding_dim": 256, "target_update_every": 250},
        "model.batch_renorm normalises the plain networks, and SALE's (model.embedding_dim) normalise their "
        "embeddings by AvgL1Norm: set one of them off"),
    "value clipping takes its bounds at hard target updates": (
        {"value_clipping": True}, "model.value_clipping takes new bounds at each hard target update: set "
                                  "model.target_update_every (TD7: 250)"),
    "batches are sampled in the main process": (
        {"num_workers": 4}, "data.num_workers must be 0, got 4: worker processes would each copy the replay buffer; "
                            "batches are sampled in the main process"),
    "the buffer's device is a torch device": (
        {"buffer_device": "gpu0"}, "data.buffer_device must be auto or a torch device such as cpu or cuda:0, got "
                                   "'gpu0'"),
    "the warm-up fits in the buffer": (
        {"warmup_steps": 2000, "buffer_size": 1000},
        "data.warmup_steps (2000) must not exceed data.buffer_size (1000)"),
}


def _defaults(cls: type) -> dict:
    return {name: o.default for name, o in options_of(cls).items() if o.default is not inspect.Parameter.empty}


def test_every_rule_has_a_known_case():
    assert sorted(BROKEN) == sorted([*MODEL_RULES, *DATA_RULES])


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_rule_is_refused_in_its_own_words(name):
    rules, cls = (MODEL_RULES, TD3) if name in MODEL_RULES else (DATA_RULES, ReplayDataModule)
    changes, line = BROKEN[name]
    assert rules[name].holds(_defaults(cls))  # the defaults keep it
    options = {**_defaults(cls), **changes}
    assert not rules[name].holds(options)
    with pytest.raises(UserInputError) as refused:
        check_rules(rules, options)
    assert str(refused.value) == line


def test_the_defaults_break_no_rule_and_the_constructors_apply_the_rules():
    check_rules(MODEL_RULES, _defaults(TD3))
    check_rules(DATA_RULES, _defaults(ReplayDataModule))
    with pytest.raises(UserInputError, match=r"^model.value_clipping takes new bounds"):
        TD3([3], [-1.0], [1.0], value_clipping=True)
    with pytest.raises(UserInputError, match=r"^data.warmup_steps \(20\) must not exceed data.buffer_size \(10\)$"):
        ReplayDataModule("Pendulum-v1", warmup_steps=20, buffer_size=10)


def test_the_forms_the_rules_read():
    assert is_range([-1, 2.5]) and not is_range([2, 2]) and not is_range([0, 1, 2]) and not is_range([False, 1])
    assert not is_range([0, float("nan")]) and not is_range("0, 1")
    assert is_device("cpu") and is_device("cuda:1") and not is_device("gpu0") and not is_device("cuda:x")
