"""Hyperparameter search with Optuna: ``python -m td3_lightning tune``.

    python -m td3_lightning tune --config pendulum.yaml --n_trials 20 --trainer.max_steps 5000

Each trial is a short ``fit`` of the config with the trial's parameters, built by the same
command line machinery as ``python -m td3_lightning fit`` (:class:`~td3_lightning.cli.TD3CLI`
with ``run=False``); every fit option given on the command line (``--trainer.max_steps 5000``,
``--data.eval_episodes 5``, ...) applies to every trial. A trial writes its run (logs,
checkpoints, ``config.yaml``) under ``<study_dir>/trial_<number>`` and its value is the
``val/return`` of its last validation. At each validation the trial reports ``val/return``
to Optuna, whose median pruner stops trials that do worse than the median of earlier trials
at the same training step: a pruned trial stops the way a finished one does, so its
checkpoints and logs are complete.

The study lives in a database (``--storage``, an Optuna RDB URL, default
``sqlite:///tune.db``): run the same command again and it adds trials to the same study;
start it on several machines with one ``postgresql://`` or ``mysql://`` URL and they share
the study. At the end it prints the study's trials and writes the best trial's full
configuration (``--best_config``), which ``python -m td3_lightning fit --config <file>``
takes as it is.

Optuna is an optional dependency: ``pip install -c constraints.txt -e ".[tune]"``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from td3_lightning.commands import PROG, OneLineParser, plain_text
from td3_lightning.declarations import parse_range
from td3_lightning.errors import (DuplicateKeyError, UniqueKeyLoader, UserInputError, did_you_mean, warning_lines,
                                  yaml_problem)
from td3_lightning.trainer_options import SEED_RANGE, check_folder_option

if TYPE_CHECKING:
    import lightning as L
    import optuna

TUNE = f"{PROG} tune"
METRIC = "val/return"

#: The search space used without ``--space``: fit option -> Optuna distribution.
DEFAULT_SPACE: dict[str, dict[str, Any]] = {
    "model.actor_lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
    "model.critic_lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
    "model.exploration_noise": {"type": "float", "low": 0.05, "high": 0.3},
    "model.policy_noise": {"type": "float", "low": 0.1, "high": 0.4},
    "model.tau": {"type": "float", "low": 1e-3, "high": 2e-2, "log": True},
    "data.batch_size": {"type": "categorical", "choices": [64, 128, 256]},
    "model.hidden_dims": {"type": "categorical", "choices": [[64, 64], [256, 256], [400, 300]]},
}

_ENTRY_KEYS = {"float": {"low", "high", "log", "step"}, "int": {"low", "high", "log", "step"},
               "categorical": {"choices"}}
_SQLITE_TIMEOUT_S = 60  # processes sharing one SQLite file wait this long for each other's writes
# errors of processes that create a new database's tables together (SQLite, PostgreSQL, MySQL wording)
_RACES = ("already exists", "locked", "unique constraint", "duplicate key", "duplicate entry")
_HEARTBEAT_S = 60  # a trial whose process died is marked failed after 2 missed heartbeats


# ----------------------------------------------------------------------------- the search space
class _SpaceLoader(UniqueKeyLoader):
    """YAML as fit configs read it: ``3e-3`` is a float (YAML 1.1 reads a number with an exponent
    but no dot as a string); an entry given twice is refused."""


_SpaceLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_space(path: str | None) -> dict[str, dict[str, Any]]:
    """The space of ``--space`` (YAML or JSON), or :data:`DEFAULT_SPACE`; entries checked for form."""
    if path is None:
        space: Any = DEFAULT_SPACE
    else:
        file = Path(path)
        if not file.is_file():
            problem = "is a folder, not a file" if file.is_dir() else "not found"
            raise UserInputError(f"space file {problem}: {path}; pass a YAML or JSON file of the search space to "
                                 "--space")
        try:
            space = yaml.load(file.read_text(encoding="utf-8"), Loader=_SpaceLoader)  # noqa: S506 - a SafeLoader
        except DuplicateKeyError as err:
            raise UserInputError(f"space file {path} gives `{err.key}` twice (lines {err.first} and {err.second}): "
                                 "the second would silently replace the first; keep one") from None
        except UnicodeDecodeError:
            raise UserInputError(f"space file {path} is not a text file; pass a YAML or JSON file of the search "
                                 "space to --space") from None
        except yaml.YAMLError as err:
            raise UserInputError(f"space file {path} is not valid YAML or JSON: {yaml_problem(err)}") from None
        if not isinstance(space, dict) or not space:
            raise UserInputError(
                f"space file {path}: expected a mapping of fit option to distribution, e.g. "
                "'model.actor_lr: {type: float, low: 1e-4, high: 1e-3, log: true}', got " + repr(space)[:80]
            )
    for name, entry in space.items():
        _check_entry(str(name), entry)
    return {str(name): dict(entry) for name, entry in space.items()}


def _check_entry(name: str, entry: Any) -> None:
    where = f"space entry {name}"
    if not isinstance(entry, dict) or entry.get("type") not in _ENTRY_KEYS:
        got = entry.get("type") if isinstance(entry, dict) else entry
        raise UserInputError(f"{where}: type must be float, int or categorical, got {got!r}; "
                             "e.g. {type: float, low: 1e-4, high: 1e-3, log: true}")
    kind = entry["type"]
    extra = set(entry) - _ENTRY_KEYS[kind] - {"type"}
    if extra:
        raise UserInputError(f"{where}: unknown key(s) {', '.join(sorted(extra))} for type {kind}; "
                             f"a {kind} entry takes {', '.join(sorted(_ENTRY_KEYS[kind]))}")
    if kind == "categorical":
        choices = entry.get("choices")
        if not isinstance(choices, list) or not choices:
            raise UserInputError(f"{where}: choices must be a non-empty list, got {choices!r}")
        return
    number = float if kind == "float" else int
    low, high = entry.get("low"), entry.get("high")
    for what, value in (("low", low), ("high", high)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (number is int and int(value) != value):
            raise UserInputError(f"{where}: {what} must be a finite {kind}, got {value!r}")
    if not low < high:
        raise UserInputError(f"{where}: low must be below high, got low={low} high={high}")
    if not isinstance(entry.get("log", False), bool):
        raise UserInputError(f"{where}: log must be true or false, got {entry['log']!r}")
    step = entry.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0
                             or (number is int and int(step) != step)):
        raise UserInputError(f"{where}: step must be {'an int' if kind == 'int' else 'a float'} above 0 (or left "
                             f"out), got {step!r}")
    if entry.get("log") and low <= 0:
        raise UserInputError(f"{where}: a log scale needs low > 0, got low={low}")
    if entry.get("log") and entry.get("step") is not None:
        raise UserInputError(f"{where}: log and step cannot be combined; drop one of them")


def _choice_value(choice: Any) -> Any:
    """Optuna stores None, bool, int, float and str choices; lists and mappings are stored as JSON."""
    return choice if choice is None or isinstance(choice, (bool, int, float, str)) else json.dumps(choice)


def suggest(trial: optuna.Trial, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The trial's value for every entry of ``space``."""
    params = {}
    for name, entry in space.items():
        kind = entry["type"]
        if kind == "categorical":
            params[name] = trial.suggest_categorical(name, [_choice_value(c) for c in entry["choices"]])
        elif kind == "float":
            params[name] = trial.suggest_float(name, float(entry["low"]), float(entry["high"]),
                                               log=bool(entry.get("log", False)), step=entry.get("step"))
        else:
            params[name] = trial.suggest_int(name, int(entry["low"]), int(entry["high"]),
                                             log=bool(entry.get("log", False)), step=int(entry.get("step") or 1))
    return params


def as_args(params: dict[str, Any]) -> list[str]:
    """``{"model.tau": 0.01}`` -> ``["--model.tau=0.01"]`` (JSON values; strings as they are)."""
    return [f"--{name}={value if isinstance(value, str) else json.dumps(value)}" for name, value in params.items()]


def _bounds(entry: dict[str, Any]) -> list[tuple[str, Any]]:
    """What the trials of ``entry`` can draw at its edges, as the values they would be: (``low``, value),
    (``high``, value), or (``choice``, value) for every choice."""
    if entry["type"] == "categorical":
        return [("choice", _choice_value(c)) for c in entry["choices"]]
    number = float if entry["type"] == "float" else int
    return [("low", number(entry["low"])), ("high", number(entry["high"]))]


# ----------------------------------------------------------------------------- the command line machinery
def _build_cli(args: list[str], callbacks: list[L.Callback] | None = None, instantiate: bool = True,
               seed: bool = True) -> Any:
    """A :class:`TD3CLI` for ``args`` (fit options, no subcommand), built as ``main`` builds it; with
    ``instantiate`` False the options are parsed and checked only, with ``seed`` False the global random state
    is left as it is."""
    from td3_lightning.cli import TD3CLI, cli_kwargs, ignore_expected_warnings
    from td3_lightning.data import ReplayDataModule
    from td3_lightning.module import TD3

    ignore_expected_warnings()  # as the fit command does
    kwargs = cli_kwargs()
    if callbacks:
        kwargs["trainer_defaults"]["callbacks"] = list(callbacks)
    cli_class = TD3CLI if instantiate and seed else _cli_class(instantiate)
    try:
        return cli_class(TD3, ReplayDataModule, args=args, run=False, **kwargs)
    except argparse.ArgumentError as err:
        from td3_lightning.user_input import one_line_parse_error

        raise UserInputError(one_line_parse_error(str(err))) from None


def _cli_class(instantiate: bool) -> type:
    """:class:`TD3CLI` that leaves the seed as configured (true: a seed per trial, drawn when it runs) and, unless
    ``instantiate``, builds no env, model or trainer."""
    from td3_lightning.cli import TD3CLI

    class Unseeded(TD3CLI):
        def instantiate_classes(self) -> None:
            if instantiate:
                super().instantiate_classes()

        def set_seed(self, seed: Any) -> None:
            pass

    return Unseeded


def dry_run(base: list[str], space: dict[str, dict[str, Any]] | None = None) -> None:
    """Build what a trial builds from ``base`` (env, model, callbacks, Trainer) and run nothing, then again with
    each edge of each ``space`` entry (:func:`_bounds`): what fit refuses only while building (an env's keyword
    arguments, an env the model cannot drive, a Trainer argument Lightning refuses) is said before the study is
    opened or anything is written."""
    from td3_lightning.cli import RANK_ZERO_LOGS

    quiet = [logging.getLogger(name) for name in RANK_ZERO_LOGS]  # "GPU available" and such: the trials say them
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as told:  # each build says the config's warnings: said once below
            _build_cli(base, seed=False)
            for name, entry in (space or {}).items():
                for which, value in _bounds(entry):
                    try:
                        _build_cli([*base, *as_args({name: value})], seed=False)
                    except UserInputError as err:
                        raise UserInputError(f"space entry {name}: a trial with {which} {value!r} would be refused "
                                             f"({err}); keep the space to values fit takes") from None
    finally:
        for log, level in zip(quiet, levels):
            log.setLevel(level)
    said: set[tuple[type[Warning], str]] = set()
    for warning in told:  # passed the filters when recorded: shown as they are, once each
        if (warning.category, str(warning.message)) not in said:
            said.add((warning.category, str(warning.message)))
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)


def _fit_options(cli: Any) -> list[str]:
    from td3_lightning._lightning import cli_option_names

    return sorted(o[2:] for o in cli_option_names(cli, []) if "." in o)


def without_idle_entries(cli: Any, space: dict[str, dict[str, Any]], given: bool) -> dict[str, dict[str, Any]]:
    """``space`` without the entries that do nothing in the config of ``cli`` (model.tau under hard target updates or
    without target networks), at its values and at each edge of every other entry: left out of the default space,
    refused in a ``given`` one (no trial would differ)."""
    from td3_lightning.rules import idle_reason

    config = {group: options.as_dict() if (options := cli.config.get(group)) else {} for group in ("model", "data")}

    def why_idle(name: str) -> str | None:
        why = idle_reason(name, config["model"], config["data"])
        if why is None:
            return None
        for other, entry in space.items():
            group, _, option = other.partition(".")
            if other == name or group not in config:
                continue
            for _, value in _bounds(entry):
                varied = {**config, group: {**config[group], option: value}}
                if idle_reason(name, varied["model"], varied["data"]) is None:
                    return None  # another entry's trials make it act
        return why

    idle = {name: why for name in space if (why := why_idle(name))}
    if given and idle:
        name, why = next(iter(idle.items()))
        raise UserInputError(f"space entry {name} does nothing in this config ({why}): its trials would not differ; "
                             "leave it out of the space")
    return {name: entry for name, entry in space.items() if name not in idle}


def check_space(cli: Any, base: list[str], space: dict[str, dict[str, Any]]) -> None:
    """Every name of ``space`` a fit option, every bound and choice a value of its type and inside its range (the
    checks fit runs on its options, :func:`td3_lightning.cli.check_options`): before any trial runs."""
    from td3_lightning.cli import check_options
    from td3_lightning.user_input import one_line_parse_error

    options = _fit_options(cli)
    for name, entry in space.items():
        if name not in options:
            raise UserInputError(
                f"space entry {name}: no fit option of that name{did_you_mean(name, options)}; "
                "the names are fit options as --help lists them without the dashes, e.g. model.actor_lr"
            )
        for which, value in _bounds(entry):
            try:
                config = cli.parser.parse_args([*base, *as_args({name: value})])
            except argparse.ArgumentError as err:
                refused = one_line_parse_error(str(err))
                hint = "; use type: int" if entry["type"] == "float" and "expected an int" in refused else ""
                raise UserInputError(f"space entry {name}: {value!r} is not a valid value ({refused}){hint}") from None
            try:
                check_options(config)
            except UserInputError as err:
                raise UserInputError(f"space entry {name}: {which} {value!r} is out of the option's range: {err}; "
                                     "keep the space inside it") from None


#: fit options that change what a run shows or where it writes, not its val/return
_DISPLAY_ONLY = ("config", "trainer.default_root_dir", "trainer.enable_progress_bar", "trainer.enable_model_summary",
                 "progress_bar.", "learning_curve.", "test_report.", "selection.")


def search_values(cli: Any, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What makes trials comparable, by resolved value (as the database gives it back, JSON): every fit
    option (``trainer.max_steps``: 1500 however it was written) but those of the space and those that only
    change what a run shows, and every entry of the space (``space model.tau``)."""
    values: dict[str, Any] = {}
    for group, content in cli.config.as_dict().items():
        items = content.items() if isinstance(content, dict) else [(None, content)]
        for key, value in items:
            name = group if key is None else f"{group}.{key}"
            if name not in space and not name.startswith(_DISPLAY_ONLY):
                values[name] = value
    values.update({f"space {name}": entry for name, entry in space.items()})
    return json.loads(json.dumps(values, default=str))


def check_budget(cli: Any, space: dict[str, dict[str, Any]]) -> None:
    """A trial must validate before its last step (its value is the last ``val/return``): the shortest
    ``trainer.max_steps`` against the longest ``trainer.val_check_interval`` (the space's bounds
    where the space searches them)."""
    trainer = cli.config.get("trainer") or {}

    def extreme(name: str, pick: Any) -> Any:
        entry = space.get(name)
        if entry is None:
            return trainer.get(name.split(".", 1)[1])
        values = entry["choices"] if entry["type"] == "categorical" else [entry["low"], entry["high"]]
        numbers = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        return pick(numbers) if len(numbers) == len(values) else None

    if trainer.get("limit_val_batches") in (0, 0.0):
        raise UserInputError("trainer.limit_val_batches 0 leaves every trial without a validation, so without a "
                             f"{METRIC} for Optuna; leave it unset or above 0")
    steps, interval = extreme("trainer.max_steps", min), extreme("trainer.val_check_interval", max)
    if isinstance(steps, int) and steps > 0 and isinstance(interval, int) and interval > steps:
        raise UserInputError(
            f"trainer.val_check_interval {interval} is above trainer.max_steps {steps}: a trial would train "
            f"{steps} steps without a validation, so without a {METRIC} for Optuna; set "
            f"--trainer.val_check_interval to at most {steps} (or raise --trainer.max_steps)"
        )


def _overridden(overrides: list[str]) -> set[str]:
    """The fit options that the command line sets (``--name value`` or ``--name=value``)."""
    return {a[2:].split("=", 1)[0] for a in overrides if a.startswith("--")}


# ----------------------------------------------------------------------------- the study
def open_study(storage_url: str, study_name: str, pruner: Any, sampler_seed: int | None,
               fingerprint: dict[str, Any], legacy: dict[str, Any] | None = None) -> optuna.Study:
    """Create the study, or load it when it exists (``load_if_exists``) and check it is the same search:
    ``fingerprint`` (:func:`search_values`) against the values it was started with, or a study started by
    an earlier version, which kept the option text, against ``legacy``."""
    import optuna

    engine_kwargs = {"connect_args": {"timeout": _SQLITE_TIMEOUT_S}} if storage_url.startswith("sqlite") else None
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                # the heartbeat is "experimental"
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                storage = optuna.storages.RDBStorage(storage_url, engine_kwargs=engine_kwargs,
                                                     heartbeat_interval=_HEARTBEAT_S, grace_period=2 * _HEARTBEAT_S)
            break
        except Exception as err:  # noqa: BLE001 - sqlalchemy errors, missing database drivers, bad URLs
            first = (str(err).strip().splitlines() or [""])[0][:200]
            # processes that open a new database together race to create its tables: the loser tries again
            if attempt < 4 and any(m in first.lower() for m in _RACES):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise UserInputError(
                f"cannot open the storage {storage_url} ({type(err).__name__}: {first}); pass a database URL that "
                "can be opened to --storage, e.g. sqlite:///tune.db or postgresql://user:password@host/db"
            ) from None
    sampler = optuna.samplers.TPESampler(seed=sampler_seed)
    study = optuna.create_study(storage=storage, study_name=study_name, direction="maximize", sampler=sampler,
                                pruner=pruner, load_if_exists=True)
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        raise UserInputError(f"study {study_name} in {storage_url} minimizes its value; tune maximizes {METRIC}: "
                             "pass another --study_name")
    theirs = study.user_attrs.get(_SEARCH_ATTR)
    old = study.user_attrs.get("search")  # an earlier version's record: the config's name and the option text
    if theirs is None and old is not None and old != legacy:
        differ = [k for k in (legacy or {}) if (legacy or {})[k] != old.get(k)]
        raise UserInputError(f"study {study_name} in {storage_url} was run with another {' and '.join(differ)} "
                             f"({'; '.join(f'{k}: {json.dumps(old.get(k))}' for k in differ)}); " + _SAME)
    if theirs is None:  # a new study, or one whose option text matches: its values from now on
        study.set_user_attr(_SEARCH_ATTR, fingerprint)
    elif theirs != fingerprint:
        differ = sorted((k for k in {*theirs, *fingerprint} if theirs.get(k, _UNSET) != fingerprint.get(k, _UNSET)),
                        key=lambda k: (not k.startswith("space "), k))  # the space first
        shown = [f"{k} {_shown(theirs, k)} in the study, {_shown(fingerprint, k)} now" for k in differ[:5]]
        more = f" (and {len(differ) - 5} more)" if len(differ) > 5 else ""
        raise UserInputError(f"study {study_name} in {storage_url} was run with other values: "
                             f"{'; '.join(shown)}{more}; " + _SAME)
    return study


_SEARCH_ATTR = "search_values"
_NUMBER = re.compile(r"-(?:\d|\.\d|inf\b)")  # a negative value, not an option
_SAME = "run it with the same config, fit options and space, or pass another --study_name"
_UNSET = object()


def _shown(values: dict[str, Any], key: str) -> str:
    return json.dumps(values[key]) if key in values else "unset"


def run_trial(trial: optuna.Trial, base: list[str], space: dict[str, dict[str, Any]], study_dir: Path) -> float:
    """One short fit with the trial's parameters; its value is the last ``val/return``."""
    import optuna

    params = suggest(trial, space)
    folder = study_dir / f"trial_{trial.number}"
    print(f"trial {trial.number}: {_params_text(params)} -> {folder}", flush=True)
    from td3_lightning.callbacks import ReportValReturn  # Lightning is imported when a trial runs

    report = ReportValReturn(trial)
    # no selection when a trial ends: its value is the last val/return, not the best checkpoint
    cli = _build_cli([*base, *as_args(params), "--trainer.default_root_dir", str(folder), "--selection.episodes", "0"],
                     callbacks=[report])
    trial.set_user_attr("seed_everything", cli.config.get("seed_everything"))  # drawn when the config says true
    try:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    except SystemExit:
        if cli.trainer.interrupted:  # Lightning ends a run on Ctrl+C (SIGTERM) with sys.exit(1) (0); Optuna fails
            from td3_lightning.stops import stop_of  # the trial on the KeyboardInterrupt

            stop = stop_of(cli.trainer.callbacks)
            raise TrialStopped(stop.signal if stop is not None else "SIGINT") from None
        raise
    except Exception as err:  # a full disk (TensorBoard's files included), a folder that refuses writes, no memory
        from td3_lightning.stops import refusal_of

        refusal = refusal_of(err, cli.trainer)
        if refusal is None:
            raise
        raise refusal.going_on(f"then run the same command again: the study keeps its trials (trial {trial.number} "
                               "as FAIL)", False) from None
    if report.pruned_at is not None:
        print(f"trial {trial.number}: pruned at step {report.pruned_at} ({METRIC} {report.last_value:.2f})")
        raise optuna.TrialPruned(f"{METRIC} {report.last_value} at step {report.pruned_at}")
    if report.last_value is None:
        raise UserInputError(
            f"trial {trial.number} ran no validation, so it has no {METRIC}: set --trainer.val_check_interval "
            "to at most --trainer.max_steps (and --trainer.limit_val_batches above 0)"
        )
    print(f"trial {trial.number}: {METRIC} {report.last_value:.2f}", flush=True)
    return report.last_value


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in params.items())


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trials_table(study: optuna.Study, names: list[str]) -> str:
    """One row per trial of the study: number, state, value and the parameters."""
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    best = _best_number(study)
    header = ["trial", "state", METRIC, *names]
    rows = [[f"{t.number}{'*' if t.number == best else ''}", t.state.name,
             "" if t.value is None else f"{t.value:.2f}", *(_fmt(t.params[n]) if n in t.params else "" for n in names)]
            for t in trials]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    return "\n".join(lines)


def _best_number(study: optuna.Study) -> int | None:
    import optuna

    complete = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))]
    return max(complete, key=lambda t: (t.value, -t.number)).number if complete else None


_BEST_HEADER = "# the best trial of the study "  # the first line of a --best_config that tune wrote


def write_best_config(study: optuna.Study, base: list[str], path: Path, storage_url: str) -> int | None:
    """The best trial's full fit configuration, written atomically to ``path``; its number (None: no
    trial completed, nothing written)."""
    from td3_lightning.checkpointing import atomic_path

    best = _best_number(study)
    if best is None:
        return None
    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == best)
    seed = trial.user_attrs.get("seed_everything")
    seed_args = as_args({"seed_everything": seed}) if seed is not None else []
    cli = _build_cli([*base, *as_args(trial.params), *seed_args], instantiate=False, seed=False)
    text = cli.parser.dump(cli.config, skip_none=False)
    steps = (cli.config.get("trainer") or {}).get("max_steps")
    header = (f"{_BEST_HEADER}{study.study_name} ({storage_url}): trial {best}, {METRIC} "
              f"{trial.value:.2f} (its last validation)\n#   {PROG} fit --config {path.name}\n")
    if isinstance(steps, int) and steps > 0:
        header += (f"# a trial's length is in it (trainer.max_steps {steps}): a full run overrides it, e.g. "
                   f"--trainer.max_steps {10 * steps}\n")
    with atomic_path(path) as tmp:
        tmp.write_text(header + text)
    return best


# ----------------------------------------------------------------------------- main
def _parser() -> OneLineParser:
    space = "\n".join(f"  {name}: {json.dumps(entry)}" for name, entry in DEFAULT_SPACE.items())
    parser = OneLineParser(
        prog=TUNE, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{TUNE} --config <yaml> [--storage URL] [--n_trials N] [--space FILE] [...] [any fit option]",
        description=plain_text(__doc__.split("\n\n", 2)[2]),
        epilog=f"Any other option is a fit option ({PROG} fit --help) and applies to every "
               f"trial; a fit option that names a parameter of the space fixes it (it is left out of the "
               f"search).\n\nThe default space (--space replaces it; a YAML or JSON file of such entries; types "
               f"float and int take low, high, log, step; categorical takes choices; an entry that does nothing in "
               f"the config is left out: model.tau under model.target_update_every or model.target_networks "
               f"false):\n{space}",
    )
    parser.add_argument("-c", "--config", required=True, metavar="FILE",
                        help="the fit config (a YAML file or a bundled config name)")
    parser.add_argument("--storage", default="sqlite:///tune.db", metavar="URL",
                        help="Optuna RDB URL of the study's database (default: sqlite:///tune.db); one "
                             "postgresql:// or mysql:// URL lets many machines share the study")
    parser.add_argument("--study_name", metavar="NAME",
                        help="the study's name (default: the config file's name without .yaml); "
                             "an existing study of that name is continued")
    parser.add_argument("--n_trials", type=int, default=20, metavar="N",
                        help="trials this command runs (>= 1; default: 20)")
    parser.add_argument("--space", metavar="FILE",
                        help="YAML or JSON file of the search space (default: the space below)")
    parser.add_argument("--study_dir", metavar="FOLDER",
                        help="folder of the trials' runs, trial_<number> each (default: tune/<study_name>)")
    parser.add_argument("--best_config", default="best_config.yaml", metavar="OUT",
                        help="where the best trial's config is written, in an existing folder; an existing file only "
                             "if tune wrote it (default: best_config.yaml)")
    parser.add_argument("--pruner", choices=["median", "none"], default="median",
                        help=f"median: stop a trial whose {METRIC} is below the median of earlier trials at the "
                             "same step; none: run every trial to the end (default: median)")
    parser.add_argument("--pruner_startup_trials", type=int, default=5, metavar="N",
                        help="trials that finish before the median pruner stops any (>= 0; default: 5)")
    parser.add_argument("--pruner_warmup_steps", type=int, default=0, metavar="N",
                        help="training steps before the median pruner judges a trial (>= 0; default: 0)")
    parser.add_argument("--sampler_seed", type=int, default=None, metavar="SEED",
                        help=f"seed of the TPE sampler, in [0, {SEED_RANGE[1]}] (default: none, a random one)")
    return parser


def check_tune_options(ns: argparse.Namespace, parser: OneLineParser) -> None:
    """The options of tune's own ``parser`` as ``ns`` holds them, each against what it takes (a number against the
    range its help declares): one-line :class:`UserInputError`."""
    for action in parser.actions():
        declared, value = parse_range(action.help or "")[0], getattr(ns, action.dest, None)
        if declared is not None and value is not None and value not in declared:
            raise UserInputError(f"{action.option_strings[-1]} must be {declared.words()}, got {value}")
    if ns.study_name == "":
        raise UserInputError("--study_name must not be empty; leave it unset for the config file's name")
    check_folder_option("--study_dir", ns.study_dir)
    _check_best_config(ns.best_config, ns.config)


def _check_best_config(path: str, config: str) -> None:
    """``--best_config``: a file in an existing folder, neither the config the study reads nor a file that tune
    did not write (it is replaced at the end of every run)."""
    if path == "":
        raise UserInputError("--best_config must be the file to write, e.g. --best_config best_config.yaml; got ''")
    target = Path(path).expanduser()
    if target.is_dir():
        raise UserInputError(f"--best_config {path} is a folder; give the file to write, e.g. --best_config "
                             f"{target / 'best_config.yaml'}")
    if not target.parent.is_dir():
        problem = "is a file, not a folder" if target.parent.exists() else "does not exist"
        raise UserInputError(f"--best_config {path}: the folder {target.parent} {problem}; --best_config must be a "
                             "file in an existing folder (create the folder first)")
    from td3_lightning.user_input import CONFIG_DIR

    if (CONFIG_DIR / target.name).is_file() and target.resolve().parent == Path.cwd().resolve():
        raise UserInputError(f"--best_config {path} has the name of a bundled config: here `--config {target.name}` "
                             "would read it instead of the bundled one; give another name, e.g. --best_config "
                             "best_config.yaml")
    if not target.is_file():
        return
    if Path(config).is_file() and os.path.samefile(config, target):
        raise UserInputError(f"--best_config {path} is the config this study reads (--config {config}); "
                             "write the best config to another file")
    with open(target, "rb") as stream:
        written_by_tune = stream.read(len(_BEST_HEADER)) == _BEST_HEADER.encode()
    if not written_by_tune:
        raise UserInputError(f"--best_config {path} exists and tune did not write it; choose another file, or delete "
                             "it by hand if you no longer need it")


def tune(argv: list[str]) -> None:
    """The ``tune`` subcommand; :class:`UserInputError` for bad input, before anything is written."""
    parser = _parser()
    ns, overrides = parser.parse_known_args(argv)
    try:
        import optuna  # noqa: F401  (installed? the study imports it)
    except ImportError:
        raise UserInputError("tune needs Optuna, which is not installed: install td3_lightning's tune extra, "
                             'pip install -c constraints.txt -e ".[tune]"') from None
    check_tune_options(ns, parser)
    stray = [a for a in overrides if a.startswith("-") and not a.startswith("--") and not _NUMBER.match(a)]
    if stray:
        raise UserInputError(f"unknown option {stray[0]}; {TUNE} --help lists the options")
    if "ckpt_path" in _overridden(overrides):
        raise UserInputError("--ckpt_path: every trial is a fit from scratch; leave --ckpt_path out")
    space = load_space(ns.space)
    fixed = _overridden(overrides) & set(space)
    space = {k: v for k, v in space.items() if k not in fixed}
    if not space:
        raise UserInputError("the fit options on the command line fix every parameter of the space: nothing to search")
    from td3_lightning import cli  # noqa: F401  Lightning, whose import sets its own format of warnings ...

    with warning_lines():  # ... and this package's as warning: lines again (__main__ set them before the import)
        search(ns, overrides, space)


def search(ns: argparse.Namespace, overrides: list[str], space: dict[str, dict[str, Any]]) -> None:
    """The study of ``tune``'s parsed options ``ns``, the fit ``overrides`` and the search ``space``: checked against
    fit's checks, then its trials run."""
    import optuna

    from td3_lightning.user_input import resolve_config_args

    base = resolve_config_args(["--config", ns.config, *overrides])  # a bundled config's name, as fit takes it
    parse_only = _build_cli(base, instantiate=False, seed=False)  # the config and the fit options, checked
    check_space(parse_only, base, space)
    space = without_idle_entries(parse_only, space, given=ns.space is not None)
    check_budget(parse_only, space)
    dry_run(base, space)  # what fit checks while it builds env, model and Trainer, at each edge of the space
    study_name = ns.study_name or Path(ns.config).stem
    study_dir = Path(ns.study_dir or Path("tune") / study_name)
    fingerprint = search_values(parse_only, space)
    legacy = json.loads(json.dumps({"config": Path(ns.config).name, "fit_options": overrides, "space": space}))

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this command prints its own lines
    pruner = (optuna.pruners.MedianPruner(n_startup_trials=ns.pruner_startup_trials,
                                          n_warmup_steps=ns.pruner_warmup_steps)
              if ns.pruner == "median" else optuna.pruners.NopPruner())
    with storage_refusals(ns.storage):
        study = open_study(ns.storage, study_name, pruner, ns.sampler_seed, fingerprint, legacy)
    print(f"study {study_name} in {ns.storage}: {len(study.trials)} trial(s) so far; running {ns.n_trials} more, "
          f"runs under {study_dir}/trial_<number>", flush=True)
    from td3_lightning.cli import quiet_tensorboard_refusals
    from td3_lightning.stops import kept_ctrl_c

    try:
        with storage_refusals(ns.storage), quiet_tensorboard_refusals(), kept_ctrl_c():
            run_study(study, base, space, study_dir, ns.n_trials)
    except KeyboardInterrupt as stopped:
        print(trials_table(study, list(space)))
        print("interrupted: the study keeps its trials (the interrupted one as FAIL); run the same command again "
              "to continue it", file=sys.stderr)
        from td3_lightning.stops import EXIT_CODES

        sys.exit(EXIT_CODES[getattr(stopped, "signal", "SIGINT")])  # Ctrl-C between trials: SIGINT

    print(trials_table(study, list(space)))
    best = write_best_config(study, base, Path(ns.best_config), ns.storage)
    if best is None:
        print(f"no trial has completed yet, so no {ns.best_config} was written")
    else:
        print(f"best: trial {best} ({METRIC} {study.best_value:.2f}); its config: {ns.best_config} "
              f"({PROG} fit --config {ns.best_config})")


@contextlib.contextmanager
def storage_refusals(storage_url: str) -> Iterator[None]:
    """A study's storage that fails a write (a read-only database file, a full disk, a lock held too long) as one
    line."""
    import optuna

    try:
        yield
    except optuna.exceptions.StorageInternalError as err:
        cause = err.__cause__ or err.__context__ or err
        first = (str(cause).strip().splitlines() or [""])[0][:200]
        raise UserInputError(f"the storage {storage_url} failed a write ({first}); make sure the database can be "
                             "written (a writable file, space on its disk, no lock held elsewhere), then run the same "
                             "command again") from None


def run_study(study: optuna.Study, base: list[str], space: dict[str, dict[str, Any]], study_dir: Path,
              n_trials: int) -> None:
    """``n_trials`` more trials of ``study``. A trial's :class:`UserInputError` (a value of the space
    that the fit rejects) fails the trial and ends the search with that error."""
    quiet = _SaidByTheCommand()
    optimize_log = logging.getLogger("optuna.study._optimize")  # where Optuna reports a failed trial
    optimize_log.addFilter(quiet)
    try:
        study.optimize(lambda trial: run_trial(trial, base, space, study_dir), n_trials=n_trials)
    finally:
        optimize_log.removeFilter(quiet)


class TrialStopped(KeyboardInterrupt):
    """A trial's fit stopped by ``signal`` (SIGINT or SIGTERM): the study stops too, with that signal's status."""

    def __init__(self, signal: str) -> None:
        super().__init__(signal)
        self.signal = signal


class _SaidByTheCommand(logging.Filter):
    """Drops Optuna's report of a trial failed by Ctrl+C or by a :class:`UserInputError` (a traceback, then "failed
    with value None"): the command says it in its own ``interrupted:`` or ``error:`` line."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], (KeyboardInterrupt, UserInputError)):
            self.said = True
            return False
        return not (self.said and "failed with value" in record.getMessage())


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m td3_lightning tune``: bad input is one ``error:`` line, exit status 2."""
    try:
        tune(sys.argv[1:] if argv is None else list(argv))
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
