"""Options declared once: the range and the choices read from a class's signature and ``Args`` lines, and the
refusals made of them (``td3_lightning/declarations.py``)."""

from __future__ import annotations

import math
from typing import Literal

import pytest

from td3_lightning.declarations import Range, check_declared, one_of, options_of, parse_range
from td3_lightning.errors import UserInputError
from td3_lightning.user_input import one_line_parse_error


class Example:
    """A class that declares its options as the project's do.

    Args:
        gamma: discount factor, in [0, 1].
        tau: Polyak rate, in (0, 1] (1 = hard copy).
        critics: number of critics (>= 2).
        bins: bins of the value distribution (0 = off, else >= 2).
        lr: learning rate (> 0); decays with the schedule.
        steps: schedule length (>= 1; null = trainer.max_steps).
        mode: auto, cnn or none.
        name: any text.
    """

    def __init__(self, gamma: float = 0.99, tau: float = 0.005, critics: int = 2, bins: int = 0, lr: float = 3e-4,
                 steps: int | None = None, mode: Literal["auto", "cnn", "none"] = "auto", name: str = "x") -> None:
        pass


def test_a_range_is_read_from_the_help_line():
    assert parse_range("discount factor, in [0, 1].") == (Range(0.0, True, 1.0, True), "")
    assert parse_range("Polyak rate, in (0, 1] (1 = hard copy).") == (Range(0.0, False, 1.0, True), "1 = hard copy")
    assert parse_range("number of critics (>= 2).") == (Range(2.0, True), "")
    assert parse_range("updates per transition (> 0); max_steps still counts") == (Range(0.0, False), "")
    assert parse_range("weight (>= 0; 0 = off).") == (Range(0.0, True), "0 = off")
    assert parse_range("bins (0 = off, else >= 2).") == (Range(2.0, True, zero_off=True), "")
    assert parse_range("a mean in [-1, 1e3) of x") == (Range(-1.0, True, 1000.0, False), "")
    assert parse_range("env seed of the first episode.") == (None, "")
    assert parse_range("hidden sizes, e.g. [256, 256]") == (None, "")


def test_a_range_takes_its_numbers_and_says_itself_as_the_help_does():
    assert 0 in Range(0.0, True, 1.0, True) and 1 in Range(0.0, True, 1.0, True) and 1.01 not in Range(0, True, 1, True)
    assert 0 not in Range(0.0, False, 1.0, True) and 1 not in Range(0.0, True, 1.0, False)
    assert 0 in Range(2.0, True, zero_off=True) and 1 not in Range(2.0, True, zero_off=True)
    assert Range(0.0, False, 1.0, True).words() == "in (0, 1]" and Range(0.5, True).words() == ">= 0.5"
    assert Range(2.0, True, zero_off=True).words() == "0 (off) or >= 2"
    assert one_of(("a", "b")) == "a or b" and one_of(("a", "b", "c")) == "a, b or c"
    assert one_of(("a", "b", "c", "d")) == "one of a, b, c, d" and one_of(("a",)) == "a"


def test_the_options_of_a_class_come_from_its_signature_and_its_args():
    options = options_of(Example)
    assert list(options) == ["gamma", "tau", "critics", "bins", "lr", "steps", "mode", "name"]
    assert options["steps"].nullable and not options["critics"].nullable
    assert options["critics"].kind is int and options["gamma"].kind is float and options["name"].kind is None
    assert options["mode"].choices == ("auto", "cnn", "none") and options["mode"].range is None
    assert options["tau"].default == 0.005 and options["tau"].help == "Polyak rate, in (0, 1] (1 = hard copy)."
    assert options["name"].range is None and options["name"].problem("g", "anything") is None


@pytest.mark.parametrize("values, message", [
    ({"gamma": 1.5}, "g.gamma must be in [0, 1], got 1.5"),
    ({"gamma": math.nan}, "g.gamma must be in [0, 1], got nan"),
    ({"tau": 0.0}, "g.tau must be in (0, 1] (1 = hard copy), got 0.0"),
    ({"critics": 1}, "g.critics must be >= 2, got 1"),
    ({"critics": 2.0}, "g.critics must be an integer >= 2, got 2.0"),
    ({"lr": "fast"}, "g.lr must be a number > 0, got 'fast'"),
    ({"lr": True}, "g.lr must be a number > 0, got true"),
    ({"gamma": None}, "g.gamma must be a number in [0, 1], got null"),
    ({"critics": -(10 ** 400)}, f"g.critics must be >= 2, got {-(10 ** 400)}"),  # exact: no float overflow
    ({"bins": 1}, "g.bins must be 0 (off) or >= 2, got 1"),
    ({"steps": 0}, "g.steps must be >= 1 (null = trainer.max_steps), got 0"),
    ({"mode": "mlp"}, "g.mode must be auto, cnn or none, got 'mlp'"),
    ({"gamma": 0.5, "critics": 0}, "g.critics must be >= 2, got 0"),
])
def test_a_value_outside_its_declaration_is_one_line(values, message):
    with pytest.raises(UserInputError) as refused:
        check_declared("g", Example, values)
    assert str(refused.value) == message


def test_values_inside_their_declarations_and_options_left_out_pass():
    check_declared("g", Example, {"gamma": 0.0, "tau": 1, "critics": 3, "bins": 0, "lr": 1e-9, "steps": None,
                                  "mode": "cnn", "name": "x"})
    check_declared("g", Example, {"bins": 2})  # an option an older checkpoint lacks is left out
    check_declared("g", Example, {"critics": 10 ** 400, "steps": 10 ** 400})
    check_declared("g", Example, {})


def test_a_parser_s_refused_choice_is_told_as_the_declaration_says():
    message = 'Parser key "model.encoder":\n  Expected a typing.Literal[\'auto\', \'cnn\', \'none\']. Got value: mlp'
    assert one_line_parse_error(message) == "model.encoder must be auto, cnn or none, got 'mlp'"
    assert one_line_parse_error(message.replace("mlp", "None")) == "model.encoder must be auto, cnn or none, got null"
    in_a_file = ('Parser key "data":\nUnable to load config \'d.yaml\'\n  - Parser key "data.sampler":\n    Expected a '
                 "typing.Literal['uniform', 'lap']. Got value: per")  # --data d.yaml, or --data '{sampler: per}'
    assert one_line_parse_error(in_a_file) == "data.sampler must be uniform or lap, got 'per'"
    missing = ('Parser key "data":\nUnable to load config \'d.yaml\'\n  - Parser key "data": Unable to load config '
               '"d.yaml"')
    assert one_line_parse_error(missing).startswith("invalid value for data: 'd.yaml' is neither its options nor")
