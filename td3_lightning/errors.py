"""The one exception type for bad user input, the hints of its messages ("did you mean", where YAML broke), the
YAML loader that refuses a key given twice, and this package's warnings printed as ``warning:`` lines. Imports no
torch: ``--help`` is answered with it."""

from __future__ import annotations

import contextlib
import difflib
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


class UserInputError(Exception):
    """Bad input from the user (config, env id, checkpoint, ...).

    The message names the problem and the fix in one line; the command line prints it
    without a traceback and exits with status 2.
    """


class MachineRefusal(UserInputError):
    """What the machine refused a run (a write, memory), told as one line: ``what`` happened, then how to go on (by
    default: run the command again; a fit names its checkpoint, :func:`td3_lightning.stops.standing_of`)."""

    def __init__(self, what: str, go_on: str = "then run the command again", resumable: bool = False) -> None:
        super().__init__(f"{what}; {go_on}")
        self.what = what

    def going_on(self, go_on: str, resumable: bool) -> MachineRefusal:
        """The same refusal with another way on (``resumable``: it names a checkpoint to go on from)."""
        return type(self)(self.what, go_on, resumable)


class NonFiniteError(UserInputError):
    """A NaN or an infinity in what the environment returned, in a training loss or in the
    weights. Training stops with one line naming the quantity and the step; no checkpoint
    with non-finite weights is ever written."""


def did_you_mean(name: str, choices: list[str], cutoff: float = 0.7) -> str:
    """`` (did you mean <choice>?)`` for the closest of ``choices`` in ``name``'s dotted group (``model.``
    matches ``model.*`` only; a misspelt group, ``modle.``, the closest group's) by its last part; ``""`` when
    none is close enough."""
    group, _, last = name.rpartition(".")
    groups = sorted({c.rpartition(".")[0] for c in choices})
    if group not in groups:
        group = next(iter(difflib.get_close_matches(group, groups, n=1, cutoff=cutoff)), group)
    siblings = {c.rpartition(".")[2]: c for c in choices if c.rpartition(".")[0] == group}
    close = difflib.get_close_matches(last, list(siblings), n=1, cutoff=cutoff)
    return f" (did you mean {siblings[close[0]]}?)" if close else ""


def yaml_problem(err: Any) -> str:
    """What a ``yaml.YAMLError`` found and where (line and column), without PyYAML's ``"<unicode string>"``."""
    mark, context = getattr(err, "problem_mark", None), getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None)
    if problem is None:
        return " ".join(str(err).split())
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    context_text = getattr(err, "context", None)
    around = f" ({context_text} at line {context.line + 1})" if context_text and context else ""
    return f"{problem}{where}{around}"


CKPT_PATH_TAKES = "--ckpt_path takes last, best or a .ckpt file that td3_lightning wrote"


#: the installed package's own folder: the shipped checkpoints are its checkpoints/*.ckpt
PACKAGE_DIR = Path(__file__).resolve().parent


def package_file(path: str | Path) -> Path | None:
    """The installed package's file that a relative ``td3_lightning/...`` path names (None: no such file)."""
    where = Path(path)
    if str(path) == "" or where.is_absolute() or where.parts[:1] != ("td3_lightning",):
        return None
    inside = (PACKAGE_DIR.parent / where).resolve()
    return inside if inside.is_file() and inside.is_relative_to(PACKAGE_DIR) else None


def shipped_path(path: str) -> str:
    """``path``, or for a ``td3_lightning/...`` path that names no file here the installed package's file
    (``td3_lightning/checkpoints/car_taught.ckpt`` from any folder)."""
    found = None if Path(path).is_file() else package_file(path)
    return str(found) if found is not None else path


def check_checkpoint_file(path: str | Path, option: str = "--ckpt_path", takes: str = CKPT_PATH_TAKES,
                          run_names: bool = True) -> None:
    """One-line :class:`UserInputError` unless ``path`` (what ``option`` names) is an existing file: the part of
    a checkpoint's check that needs no torch (``takes``: what the option takes)."""
    if str(path) == "":
        raise UserInputError(f"{option} must name a checkpoint file, got ''; {takes}")
    if not Path(path).is_file():
        problem = "is a folder, not a file" if Path(path).is_dir() else "not found"
        named = Path(path).stem if run_names and Path(path).name in ("last.ckpt", "best.ckpt") else ""
        if run_names and not named and Path(path).name == str(path) and not Path(path).suffix:  # a misspelt name
            named = next(iter(difflib.get_close_matches(str(path).lower(), ("last", "best"), n=1, cutoff=0.7)), "")
        hint = f" (or {option} {named}: the newest {named} checkpoint of the runs here)" if named else ""
        raise UserInputError(f"checkpoint file {problem}: {path}; pass an existing .ckpt file to {option}{hint}")


class DuplicateKeyError(ValueError):
    """A YAML mapping gives ``key`` twice, at lines ``first`` and ``second``."""

    def __init__(self, key: Any, first: int, second: int) -> None:
        super().__init__(key)
        self.key, self.first, self.second = key, first, second


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, raising :class:`DuplicateKeyError` for a mapping that gives a key twice (which it
    would resolve to the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges, it is no key
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                if key in lines:
                    raise DuplicateKeyError(key, lines[key], key_node.start_mark.line + 1)
                lines[key] = key_node.start_mark.line + 1
            except TypeError:  # an unhashable key: PyYAML's own error follows
                break
        return super().construct_mapping(node, deep=deep)


_format_warning = warnings.formatwarning


def said_as_warning(message: Any, category: type[Warning], filename: str, lineno: int, line: str | None = None) -> str:
    """This package's own warnings as ``warning: <text>`` lines, without its source file and line; others as usual."""
    if Path(filename).resolve().is_relative_to(PACKAGE_DIR) and issubclass(category, UserWarning):
        return f"warning: {message}\n"
    return _format_warning(message, category, filename, lineno, line)


@contextlib.contextmanager
def warning_lines() -> Iterator[None]:
    """This package's warnings as ``warning:`` lines while a command runs (the format is put back after it)."""
    previous, warnings.formatwarning = warnings.formatwarning, said_as_warning
    try:
        yield
    finally:
        warnings.formatwarning = previous
