"""What the user typed, read: config files (a bundled config's name, a file that is no options) and jsonargparse's
parse errors, each refusal one line that names the problem and the fix."""

from __future__ import annotations

import ast
import difflib
import math
import os
import re
from pathlib import Path
from typing import Any

import yaml

from td3_lightning import commands
from td3_lightning.declarations import one_of
from td3_lightning.errors import DuplicateKeyError, UniqueKeyLoader, UserInputError, did_you_mean, yaml_problem
from td3_lightning.trainer_options import PRECISIONS_TAKEN

CONFIG_DIR = Path(__file__).parent / "configs"

#: a number as a command line writes it (1, -2.5, 3e-4, .5)
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _clean_type(text: str) -> str:
    text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", text)
    text = re.sub(r"\b(?:typing|collections\.abc)\.", "", text)
    text = re.sub(r"\b(?:[a-z_]\w*\.)+([A-Z]\w*)", r"\1", text)  # lightning.pytorch.loggers.Logger -> Logger
    text = re.sub(r"\bLiteral\[([^\]]*)\]", r"\1", text)  # Literal['min', 'max'] -> 'min', 'max'
    return text.replace("NoneType", "None")


def one_line_parse_error(message: str, options: list[str] | None = None, whole_number_hint: bool = False) -> str:
    """jsonargparse's (often multi-line) parse error as one line that names the key; ``whole_number_hint``: a
    whole number written as a float (``1e3``) where an int is expected is told how to write it."""
    options = options or []
    keys = [o[2:] for o in options]
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    first = lines[0] if lines else message
    if first.startswith("unrecognized arguments:"):
        names = [a.split("=", 1)[0] for a in first.split(":", 1)[1].split() if a.startswith("-")]
        name = names[0] if names else first.split(":", 1)[1].strip()
        bare = name.lstrip("-")
        grouped = [o for o in options if "." not in bare and o.rsplit(".", 1)[-1] == bare]  # --gamma: --model.gamma
        started = [o for o in options if o.startswith(name)]  # --seed: --seed_everything
        near = list(dict.fromkeys([*started, *grouped]))
        hint = did_you_mean(name, options) or (f" (did you mean {' or '.join(near)}?)" if 1 <= len(near) <= 2 else "")
        return f"unknown option {name}{hint}; --help lists the options"
    valueless = re.match(r"argument (-[^\s:/]+)[^:]*: expected one argument", first)
    if valueless:
        name = valueless.group(1)
        return (f"option {name} is given without a value: write one after it, e.g. {name} VALUE (--help lists its "
                "default)")
    early = re.match(r"Option '([^']*)' is not accepted before subcommand '(\w+)'", first)
    if early:
        key, sub = early.groups()
        return (f"unknown key {key} in a --config given before the subcommand {sub}: such a file holds each "
                f"subcommand's options under its name ({sub}: {{model: {{gamma: 0.98}}}}); or give the file after "
                f"it: {commands.PROG} {sub} --config FILE")
    unknown = (re.match(r"(?:Group|Subcommand) '([^']*)' does not accept option '([^']*)'", first)
               or re.match(r"()Option '([^']*)' is not accepted$", first))
    if unknown:
        group, key = unknown.groups()
        group = group or "fit"
        key = key if "." in key or group in ("fit", "validate", "test", "predict") else f"{group}.{key}"
        head, _, rest = key.partition(".")
        if head in ("fit", "validate", "test") and rest:  # a section of one subcommand in that subcommand's file
            before = (f", or give the file before the subcommand (--config FILE {head})" if head == group
                      else f" (a `{head}:` section is read by {head} only)")
            return (f"unknown key {key} in the configuration: the file of a `{group}` run holds its options at the "
                    f"top level (trainer:, model:, ...); remove the `{head}:` level{before}")
        grouped = [k for k in keys if "." not in key and k.rsplit(".", 1)[-1] == key]  # `gamma:` for `model: gamma:`
        nested = [k for k in keys if key.endswith("." + k)]  # `trainer: model: gamma:` for `model: gamma:`
        hint = did_you_mean(key, keys) or (f" (did you mean {' or '.join(grouped)}? each option is under its group)"
                                           if 1 <= len(grouped) <= 3 else "") or (
            f" (did you mean {nested[0]}? each group is a section at the top level)" if nested else "")
        return f"unknown key {key} in the configuration{hint}; --help lists the options"
    keyed = re.match(r'Parser key "([^"]+)":\s*(.*)', first)
    missing, section = re.search(r"Unable to load config '([^']*)'", message), re.match(r'Parser key "(\w+)"', first)
    if missing and section and section.group(1) in CONFIG_SECTIONS:
        key, value = section.group(1), missing.group(1)
        if inner := re.search(rf'- (Parser key "{key}\.\w+":.*)', message, re.S):  # a file or mapping of options
            return one_line_parse_error(inner.group(1), options, whole_number_hint)  # with one of them wrong
        return (f"invalid value for {key}: {value!r} is neither its options nor a config file that exists; write the "
                f"{key} options under it (e.g. {_SECTION_EXAMPLE[key]})")
    if keyed:
        key, rest = keyed.group(1), keyed.group(2)
        detail = [rest, *lines[1:]] if rest else lines[1:]
        expected = got = None
        for line in detail:
            if literal := re.match(r"Expected an? typing\.Literal\[(.*)\]\. Got value: (.*)", line):  # a choice
                got = "null" if literal[2] == "None" else repr(literal[2])
                return f"{key} must be {one_of(ast.literal_eval(f'({literal[1]},)'))}, got {got}"
            simple = re.match(r"Expected an? (.+?)\. Got value: (.*)", line)
            if simple and expected is None:
                kind = _clean_type(simple.group(1))
                expected, got = ("an " if kind[:1] in "aeiou" else "a ") + kind, simple.group(2)
            elif line.startswith("Subtypes:"):
                expected = "one of " + _clean_type(line.split(":", 1)[1].strip().strip("[]"))
            elif line.startswith("Given value:"):
                got = line.split(":", 1)[1].strip()
        bare = got.strip().strip("'\"") if got is not None else ""
        if key == "trainer.precision" and got is not None:  # Lightning's type lists precisions TD3 refuses
            return f"trainer.precision must be {PRECISIONS_TAKEN}; got {bare}"
        if expected is not None and got is not None:
            finite = " (a finite number)" if expected == "a float" and got.strip().lower().lstrip("+-") in (
                "nan", "inf", "infinity") else ""
            split = _unclosed_hint(bare)
            if not split and bare[:1] == "{" and re.search(r"\w:[^\s/]", bare):  # {a:1} is a string to YAML
                split = " (YAML needs a space after each colon, e.g. '{a: 1, b: 2}')"
            whole = ""
            if whole_number_hint and expected == "an int":
                try:
                    number = float(bare)
                except ValueError:
                    number = math.nan
                if math.isfinite(number) and number == int(number):
                    whole = f" (a float: write the whole number as {int(number)})"
            braces = (" (a mapping is written in braces, e.g. '{a: 1, b: 2}')"
                      if "dict" in expected and not split and bare[:1] != "{" else "")
            boolean = (" (a whole number, or true for a random seed)" if key == "seed_everything"
                       else " (write true or false)" if expected == "a bool" else "")
            items = [i for i in re.split(r"[\s,]+", bare.strip("()")) if i]  # 64,64 / (64, 64) / '64 64'
            bracket = (f" (a list is written in brackets, e.g. '[{', '.join(items)}]')" if "list" in expected and bare
                       and bare[0] not in "[{" and all(NUMBER.fullmatch(item) for item in items) else "")
            hints = f"{whole}{split}{braces}{boolean}{bracket}"
            return f"invalid value for {key}: expected {expected}{finite}, got {got!r}{hints}"
        return f"invalid value for {key}: " + _clean_type(" ".join(detail))
    return _clean_type(" ".join(lines))


def _unclosed_hint(value: str) -> str:
    """What to say of a ``{...`` or ``[...`` value that is never closed: a word that the shell split off at a space
    (no space in it, ending in ``:`` or ``,``: ``{a:`` of ``{a: 1}`` unquoted), else a missing ``}`` or ``]``; ``""``
    for any other value."""
    closer = {"{": "}", "[": "]"}.get(value[:1])
    if closer is None or value.count(value[0]) <= value.count(closer):
        return ""
    if not re.search(r"\s", value) and (value.endswith((":", ",")) or value == value[0]):
        return " (the shell split it at a space: quote the whole value, e.g. '{a: 1, b: 2}' or '[64, 64]')"
    kind, example = ("mapping", "'{a: 1, b: 2}'") if closer == "}" else ("list", "'[64, 64]'")
    return f" (not a valid YAML or JSON {kind}: a {value[0]} is never closed; add the missing {closer}, e.g. {example})"


def resolve_config_args(args: list[str]) -> list[str]:
    """Let ``--config car.yaml`` (or ``configs/car.yaml``, or ``car``) name a bundled config when no
    such file exists relative to the current folder; a config file that is empty, not YAML or
    not a mapping of options is refused with a line that names it (:func:`check_config_file`)."""
    out = list(args)
    for i, arg in enumerate(out):
        if arg in ("--config", "-c") and i + 1 < len(out):
            out[i + 1] = check_config_file(_bundled(out[i + 1]))
        elif arg.startswith("--config="):
            out[i] = "--config=" + check_config_file(_bundled(arg.split("=", 1)[1]))
    return out


_CONFIG_EXAMPLE = ("e.g. 'trainer: {max_steps: 20000}' and 'model: {gamma: 0.98}' on lines of their own "
                   f"({commands.PROG} fit --print_config prints every option)")


def check_config_file(path: str) -> str:
    """``path`` if it is a config file jsonargparse can read, else :class:`UserInputError` naming the file
    and what to put in it. A value that is no file (``--config '{model: ...}'``, YAML text) is left as it is."""
    if os.path.isdir(path):
        raise UserInputError(f"config file {path} is a folder, not a file; pass a YAML file to --config")
    if not os.path.isfile(path):
        return path
    try:
        with open(path, encoding="utf-8") as stream:
            content = yaml.load(stream, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except DuplicateKeyError as err:
        raise UserInputError(f"config file {path} gives `{shown(err.key)}` twice (lines {err.first} and "
                             f"{err.second}): the second would silently replace the first; merge them into "
                             "one") from None
    except UnicodeDecodeError:
        raise UserInputError(f"config file {path} is not a text file; pass a YAML file to --config") from None
    except yaml.YAMLError as err:
        raise UserInputError(f"config file {path} is not valid YAML: {yaml_problem(err)}") from None
    if content is None:
        raise UserInputError(f"config file {path} is empty (or only comments): write the options in it as YAML, "
                             + _CONFIG_EXAMPLE)
    if not isinstance(content, dict):
        raise UserInputError(f"config file {path} holds {type(content).__name__} {_short(str(content))!r}, not "
                             "options: write them as YAML sections, " + _CONFIG_EXAMPLE)
    _check_sections(path, content)
    return path


#: the sections of a config file that hold a group's options (a mapping, or the name of a file that holds one),
#: each with the example that the lines refusing one give
_SECTION_EXAMPLE = {"trainer": "trainer: {max_steps: 20000}", "model": "model: {gamma: 0.98}",
                    "data": "data: {batch_size: 256}", "checkpoint": "checkpoint: {save_top_k: 5}",
                    "progress_bar": "progress_bar: {refresh_seconds: 1.0}",
                    "learning_curve": "learning_curve: {filename: ''} for no plot",
                    "selection": "selection: {episodes: 500}"}
CONFIG_SECTIONS = tuple(_SECTION_EXAMPLE)


def _check_sections(path: str, content: dict[str, Any], within: str = "") -> None:
    """Each option group's section (also under a ``fit:``/``validate:``/``test:`` section) is a mapping of options,
    a file name or empty; anything else (``model: 5``) is refused naming the section."""
    for key, value in content.items():
        if within == "" and key in commands.TRAINER_SUBCOMMANDS:
            if isinstance(value, dict):
                _check_sections(path, value, f"{key}.")
            elif value is not None:
                raise UserInputError(f"config file {path}: `{key}: {_short(shown(value))}` is not a section of "
                                     f"options: a `{key}:` section holds the {key} run's options (e.g. {key}: "
                                     "{model: {gamma: 0.98}}) in a file given before the subcommand")
        elif key in CONFIG_SECTIONS and value is not None and not isinstance(value, (dict, str)):
            raise UserInputError(f"config file {path}: `{within}{key}: {_short(shown(value))}` is not a section of "
                                 f"options; write the {key} options under it (e.g. {_SECTION_EXAMPLE[key]})")


def _short(text: str, most: int = 40) -> str:
    """``text`` on one line, cut to ``most`` characters with ``...``."""
    text = " ".join(text.split())
    return text if len(text) <= most else text[:most - 3] + "..."


def _bundled(path: str) -> str:
    """``path``, or the bundled config it names (``car.yaml``, or ``car`` without the extension)."""
    given = path
    if os.path.exists(path):
        return path
    if not path.endswith((".yaml", ".yml")):  # YAML text, or a config's name without .yaml
        if not re.fullmatch(r"\w[\w.-]*", path):
            return path
        path = f"{path}.yaml"
        if os.path.exists(path):
            return path
    candidate = CONFIG_DIR / Path(path).name
    if candidate.is_file():
        return str(candidate)
    if not os.path.exists(path):
        bundled = ", ".join(sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
        raise UserInputError(f"config file not found: {given}{_closest_config(path)}; give a path to a YAML file or "
                             f"a bundled config ({bundled})")
    return path


def _closest_config(path: str) -> str:
    """`` (did you mean <file>?)`` for the YAML file in ``path``'s folder, or else the bundled config, whose name is
    closest to ``path``'s (``car.yml``: ``car.yaml``); ``""`` when none is close."""
    where = Path(path)
    folder = where.parent
    here = {p.name: str(folder / p.name) for p in sorted(folder.glob("*.y*ml")) if p.is_file()} \
        if folder.is_dir() else {}
    names = {**{p.name: p.name for p in CONFIG_DIR.glob("*.yaml")}, **here}  # a file there wins, as --config reads
    stems = {_stem(name): shown for name, shown in names.items()}  # by the name without .yaml: nope is no hopper
    close = difflib.get_close_matches(_stem(where.name), list(stems), n=1, cutoff=0.8)
    return f" (did you mean {stems[close[0]]}?)" if close else ""


def _stem(name: str) -> str:
    """``name`` without its ``.yaml`` or ``.yml``."""
    return re.sub(r"\.ya?ml$", "", name, flags=re.I)


def shown(value: Any) -> str:
    """``value`` as it is written on the command line (YAML flow style)."""
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).strip().removesuffix("\n...").strip()
