"""Each option is declared once: its type and default in its class's ``__init__`` signature (choices as a
``Literal``), its one-line help and its range in the class docstring's ``Args`` (what ``--help`` shows).

A range is written ``(>= 1)``, ``(> 0)``, ``in [0, 1]`` or ``in (0, 1]``, its note after a ``;`` or in brackets
(``(>= 0; 0 = off)``, ``in (0, 1] (1 = hard copy)``); ``0 = off`` beside a range that leaves 0 out lets 0 in too
(``(0 = off, else >= 2)``). The range checks, the refusals' wording, the options table of ``docs/options.md`` and
the bad-input walk (``tests/test_bad_input.py``) are all read from these declarations: nothing else lists a range.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from td3_lightning.errors import UserInputError

_NUMBER = r"(-?\d+(?:\.\d+)?(?:e-?\d+)?)"


@dataclass(frozen=True)
class Range:
    """The numbers an option takes: ``low``/``high`` (None: unbounded), whether each is included, and whether 0
    (off) is taken besides."""

    low: float | None
    low_in: bool
    high: float | None = None
    high_in: bool = False
    zero_off: bool = False

    def __contains__(self, value: float) -> bool:
        if self.zero_off and value == 0:
            return True
        above = self.low is None or value > self.low or (self.low_in and value == self.low)
        return above and (self.high is None or value < self.high or (self.high_in and value == self.high))

    def words(self) -> str:
        """The range as the help writes it: ``>= 1``, ``in (0, 1]``, ``0 (off) or >= 2``."""
        if self.high is not None:
            text = f"in {'[' if self.low_in else '('}{_fmt(self.low)}, {_fmt(self.high)}{']' if self.high_in else ')'}"
        else:
            text = f"{'>=' if self.low_in else '>'} {_fmt(self.low)}"
        return f"0 (off) or {text}" if self.zero_off else text


def _fmt(value: float | None) -> str:
    return str(int(value)) if value is not None and value == int(value) else str(value)


def parse_range(help_text: str) -> tuple[Range | None, str]:
    """The range a help line declares, and its note (``""`` when none): ``(None, "")`` for a line without one."""
    if interval := re.search(rf"in ([\[(]){_NUMBER}, {_NUMBER}([\])])(?: \(([^)]*)\))?", help_text):
        found = Range(float(interval[2]), interval[1] == "[", float(interval[3]), interval[4] == "]")
        note = interval[5] or ""
    elif low := re.search(rf"\(([^()]*?)(?<![<>=!])(>=?) {_NUMBER}(?:; ([^)]*))?\)", help_text):
        found = Range(float(low[3]), low[2] == ">=", zero_off="0 = off" in low[1])
        note = low[4] or ""
    else:
        return None, ""
    if "0 = off" in note and 0 not in found:
        found, note = Range(found.low, found.low_in, found.high, found.high_in, zero_off=True), ""
    return found, note


@dataclass(frozen=True)
class Option:
    """One declared option: its name, one-line help, default, choices (a ``Literal``), range and note, and whether
    ``null`` is taken."""

    name: str
    help: str
    default: Any
    choices: tuple[Any, ...] = ()
    range: Range | None = None
    note: str = ""
    nullable: bool = False
    kind: type | None = None  # int or float, for a number option

    def takes(self) -> str:
        """What the option takes, as its refusal says it."""
        if self.choices:
            return one_of(self.choices)
        return self.range.words() + (f" ({self.note})" if self.note else "") if self.range else ""

    def problem(self, group: str, value: Any) -> str | None:
        """``<group>.<name> must be <what it takes>, got <value>``, or None for a value it takes."""
        if value is None and self.nullable:
            return None
        if self.choices:
            ok = value in self.choices
        elif self.range is not None:
            if isinstance(value, bool) or not isinstance(value, numbers.Integral if self.kind is int else numbers.Real):
                kind = "an integer" if self.kind is int else "a number"
                return f"{group}.{self.name} must be {kind} {self.takes()}, got {_written(value)}"
            ok = value == value and value in self.range  # NaN is no number in range (and huge ints stay exact)
        else:
            return None
        return None if ok else f"{group}.{self.name} must be {self.takes()}, got {_written(value)}"


def _written(value: Any) -> str:
    """``value`` as a config writes it: null, true, false; text quoted."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else repr(value)


def one_of(choices: tuple[Any, ...]) -> str:
    """``a or b``, ``a, b or c``, ``one of a, b, c, d``."""
    names = [str(c) for c in choices]
    if len(names) > 3:
        return f"one of {', '.join(names)}"
    return " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _literal(hint: Any) -> tuple[Any, ...]:
    return typing.get_args(hint) if typing.get_origin(hint) is typing.Literal else ()


def _choices(hint: Any) -> tuple[Any, ...]:
    """The values a ``Literal`` hint (or an optional one) allows; none where the union takes other types too
    (``list[float] | Literal["auto"]``: its rules check it)."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    members = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    if not all(_literal(a) for a in members):
        return ()
    return tuple(c for a in members for c in _literal(a))


def _nullable(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint)


def _number(hint: Any) -> type | None:
    """``int`` or ``float`` for a (possibly optional) number hint."""
    return next((kind for kind in (int, float) if hint is kind or kind in typing.get_args(hint)), None)


def help_lines(cls: type) -> dict[str, str]:
    """``name -> help`` from the ``Args:`` section of ``cls``'s docstring (one line each)."""
    doc = inspect.getdoc(cls) or ""
    section = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    return {m[1]: m[2].strip() for m in re.finditer(r"^\s{4}(\w+): (.+)$", section, re.M)}


@functools.cache
def options_of(cls: type) -> dict[str, Option]:
    """Every argument of ``cls.__init__`` as an :class:`Option`, in the signature's order."""
    hints = typing.get_type_hints(cls.__init__)
    helps = help_lines(cls)
    options = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        hint = hints.get(name)
        text = helps.get(name, "")
        choices = _choices(hint)
        found, note = parse_range(text) if not choices else (None, "")
        options[name] = Option(name, text, parameter.default, choices, found, note, _nullable(hint), _number(hint))
    return options


def check_declared(group: str, cls: type, values: Mapping[str, Any]) -> None:
    """Raise :class:`UserInputError` for the first of ``values`` (``cls``'s arguments by name) outside what its
    declaration takes."""
    for name, option in options_of(cls).items():
        if name in values and (problem := option.problem(group, values[name])) is not None:
            raise UserInputError(problem)


def signature_defaults(cls: type) -> dict[str, Any]:
    """The declared defaults of ``cls``'s options (those that have one)."""
    return {name: o.default for name, o in options_of(cls).items() if o.default is not inspect.Parameter.empty}
