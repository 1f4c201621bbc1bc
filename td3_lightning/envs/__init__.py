"""Environment creation and the checks TD3 needs before any training starts."""

from __future__ import annotations

import functools
import json
import os
import re
import sys

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from td3_lightning.errors import UserInputError, did_you_mean
from td3_lightning.registration import register_envs


#: the install line of the MuJoCo envs (Walker2d-v5, Ant-v5, ...), from the td3_lightning checkout
MUJOCO_INSTALL = 'pip install -c constraints.txt -e ".[mujoco]"'


@dataclass(frozen=True)
class EnvSpec:
    """What the networks and the replay buffer need to know about an environment."""

    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    action_low: list[float]
    action_high: list[float]
    frame_stack: int = 1  # frames per image observation (the env's ``frame_stack`` attribute)


def make_env(env_id: str, env_kwargs: dict[str, Any] | None = None, render_mode: str | None = None,
             option: str = "data.env_kwargs") -> gym.Env:
    """``gymnasium.make`` with errors that name the option to fix (``option``: the one that gave ``env_kwargs``)."""
    register_envs()
    kwargs = dict(env_kwargs or {})
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if kwargs.get("render_mode") == "human" and sys.platform.startswith("linux") and not (
            os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        raise UserInputError(f"{option}.render_mode human opens a window, and this machine has no display (DISPLAY "
                             "is unset); leave render_mode unset, or record videos with data.record_val / "
                             "data.record_test")
    if kwargs.get("render_mode") == "rgb_array":
        # off-screen drawing: pygame needs no display (and stops printing display errors without one)
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        env = gym.make(env_id, **kwargs)
    except (ImportError, gym.error.DependencyNotInstalled) as err:  # before gym.error.Error, its base class
        entry_point = getattr(gym.registry.get(env_id), "entry_point", "")
        if "mujoco" in f"{err} {entry_point}".lower():  # gymnasium's line names gymnasium's extra, not ours
            raise UserInputError(f"environment '{env_id}' needs MuJoCo, which is not installed: install "
                                 f"td3_lightning's mujoco extra, {MUJOCO_INSTALL}") from None
        raise UserInputError(f"environment '{env_id}' needs a package that is not installed: {err}") from None
    except gym.error.Error as err:  # NameNotFound, VersionNotFound, NamespaceNotFound, ...
        raise UserInputError(
            f"unknown environment id '{env_id}' ({err}); set data.env_id to a registered gymnasium id, "
            "e.g. Pendulum-v1, LunarLander-v3 or CarRacingState-v0"
        ) from None
    except TypeError as err:
        problem = str(err).split(" was raised from the environment creator")[0]
        taken = _keywords(env_id)
        if taken and all(key in taken or key in _MAKE_KEYWORDS for key in kwargs):
            _check_kinds(env_id, env_kwargs or {}, option)  # a known key of the wrong kind: name it
        fix = (f"{env_id} takes {', '.join(taken)} (and gymnasium.make's own, e.g. max_episode_steps)" if taken
               else f"pass only keyword arguments that {env_id} takes")
        unknown = [key for key in kwargs if taken and key not in taken and key not in _MAKE_KEYWORDS]
        close = next((hint for key in unknown if (hint := did_you_mean(f"{option}.{key}",
                                                                        [f"{option}.{k}" for k in taken]))), "")
        given = ", ".join(f"{option}.{key}" for key in unknown) or f"{option} {kwargs}"  # the keys at fault
        raise UserInputError(f"{given} not accepted by '{env_id}': {problem}{close}; {fix}") from None
    except ValueError as err:  # the env's own check of a value given here; any other is the env's own failure
        named = [key for key in env_kwargs or {} if key in str(err)]
        if not named:
            _check_kinds(env_id, env_kwargs or {}, option)  # e.g. float('abc') of a value given as text
            raise
        given = ", ".join(f"{option}.{key} {kwargs[key]!r}" for key in named)
        raise UserInputError(f"{given}: a value that '{env_id}' refuses: {err}; fix it") from None
    try:  # a value the env took without a check, of another kind than its default, fails later (or never)
        _check_kinds(env_id, env_kwargs or {}, option)
    except UserInputError:
        env.close()
        raise
    return env


def _kind(value: Any) -> str | None:
    """``number``, ``true or false`` or ``text`` for a default of that kind (None: any other)."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return "text" if isinstance(value, str) else None


def _check_kinds(env_id: str, env_kwargs: dict[str, Any], option: str) -> None:
    """One line for a keyword argument of another kind than its annotation or default names (text for a number, a
    number for a switch): the env would fail with a traceback at its first step, or not at all."""
    kinds = _default_kinds(env_id) if env_kwargs else {}
    for key, value in env_kwargs.items():
        kind, default = kinds.get(key, (None, None))
        if kind is None or value is None or _kind(value) == kind:
            continue
        raise UserInputError(f"{option}.{key} {value!r}: '{env_id}' takes {kind} there (default {default!r}); fix it")


@functools.lru_cache(maxsize=None)
def _default_kinds(env_id: str) -> dict[str, tuple[str | None, Any]]:
    """The kind (:func:`_kind`) and default of each keyword of ``env_id``'s constructor: the kind its annotation
    names (``int``, ``int | None``, ``Optional[int]``), else its default's; none for one annotated with anything
    else (``Union[int, str]``, ``Any``), whose default says nothing of what it takes.
    Inspected once per env id (every env instance is made through :func:`make_env`)."""
    import inspect

    kinds = {"int": "a number", "float": "a number", "bool": "true or false", "str": "text"}
    annotated: dict[str, str | None] = {}  # the kind an annotation names: X or X | None of one plain type X
    for p in _constructor_params(env_id) or []:
        if p.annotation is not inspect.Parameter.empty:
            text = p.annotation.__name__ if isinstance(p.annotation, type) else str(p.annotation).strip("'\"")
            text = re.sub(r"^Optional\[(.+)\]$", r"\1 | None", text.removeprefix("typing."))
            types = [t.strip() for t in text.split("|") if t.strip() != "None"]
            annotated[p.name] = kinds.get(types[0]) if len(types) == 1 else None
    return {key: (annotated[key] if key in annotated else _kind(default), default)
            for key, default in keyword_defaults(env_id).items()}


#: gymnasium.make's own keyword arguments (not the env constructor's)
_MAKE_KEYWORDS = frozenset({"max_episode_steps", "autoreset", "apply_api_compatibility", "disable_env_checker",
                            "order_enforce"})


def _env_creator(env_id: str) -> Any:
    """What ``env_id``'s registration makes its env with (a class or a function); raises for an unknown id."""
    from gymnasium.envs.registration import load_env_creator

    entry = gym.spec(env_id).entry_point
    return load_env_creator(entry) if isinstance(entry, str) else entry


def _constructor_params(env_id: str) -> list[Any] | None:
    """The parameters of ``env_id``'s constructor, those of the base classes its ``**kwargs`` go to included
    (None: unknown id, or an entry point that cannot be inspected)."""
    import inspect

    try:
        creator = _env_creator(env_id)
        params = list(inspect.signature(creator).parameters.values())
        for base in creator.__mro__[1:] if isinstance(creator, type) else ():
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
                break
            if base is not object and "__init__" in vars(base):
                names = {p.name for p in params}
                inherited = [p for p in inspect.signature(base.__init__).parameters.values()
                             if p.name != "self" and p.name not in names]
                params = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD] + inherited
    except Exception:  # noqa: BLE001 - said without the list by the callers
        return None
    return params


def _keywords(env_id: str) -> list[str] | None:
    """The keyword arguments of ``env_id``'s constructor (None: unknown, or any)."""
    import inspect

    params = _constructor_params(env_id)
    if params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in named]


def keyword_defaults(env_id: str) -> dict[str, Any]:
    """The default of each keyword argument of ``env_id``'s constructor, the registration's kwargs applied
    (empty where the constructor cannot be inspected)."""
    import inspect

    register_envs()
    params = _constructor_params(env_id)
    if params is None:
        return {}
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    return {**defaults, **(gym.spec(env_id).kwargs or {})}


def training_aid_names(env_id: str) -> tuple[str, ...]:
    """The keyword arguments of ``env_id`` that change its rules to help training (its class's ``TRAINING_AIDS``;
    none where the entry point cannot be read)."""
    register_envs()
    try:
        creator = _env_creator(env_id)
    except Exception:  # noqa: BLE001 - an unknown id is said by make_env
        return ()
    return tuple(getattr(creator, "TRAINING_AIDS", ()))


def training_aids_set(env_id: str, env_kwargs: dict[str, Any]) -> list[str]:
    """The training aids of ``env_id`` that ``env_kwargs`` set away from their defaults."""
    defaults = keyword_defaults(env_id)
    return [name for name in training_aid_names(env_id)
            if name in env_kwargs and env_kwargs[name] != defaults.get(name)]


def _plain(value: Any) -> Any:
    """``value`` as a checkpoint stores it (JSON types: a tuple is a list)."""
    return json.loads(json.dumps(value, default=str))


def _shell_word(value: Any) -> str:
    """``value`` as one word of a command line that the CLI reads back as ``value``."""
    import shlex

    import yaml

    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if isinstance(value, str) and (value == "" or yaml.safe_load(value) != value):
        text = json.dumps(value)  # "true", "1", "": quoted, so they stay strings
    return shlex.quote(text)


def _bundled_configs(env_id: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(name, data.env_kwargs, model)`` of each bundled config of ``env_id``, by name."""
    from pathlib import Path

    import yaml

    found = []
    for path in sorted((Path(__file__).parents[1] / "configs").glob("*.yaml")):
        try:
            config = yaml.safe_load(path.read_text()) or {}
            data, model = config.get("data") or {}, config.get("model") or {}
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        if data.get("env_id") == env_id:
            found.append((path.name, dict(data.get("env_kwargs") or {}), dict(model)))
    return found


def env_overrides(trained_kwargs: dict[str, Any], env_id: str, env_kwargs: dict[str, Any],
                  ignore: tuple[str, ...] = ()) -> list[str] | None:
    """The ``--data.env_kwargs.<key> <value>`` options that turn ``env_kwargs`` of ``env_id`` into the
    ``trained_kwargs`` a checkpoint was trained with (a key given on one side only has the constructor's
    default on the other), keys in ``ignore`` left as they are; None when no override can (a keyword the
    trained env did not have)."""
    missing = object()
    defaults = {k: _plain(v) for k, v in keyword_defaults(env_id).items()}
    trained_kwargs, env_kwargs = _plain(trained_kwargs), _plain(env_kwargs)
    overrides = []
    for key in dict.fromkeys(k for k in [*trained_kwargs, *env_kwargs] if k not in ignore):
        theirs = trained_kwargs.get(key, defaults.get(key, missing))
        if theirs is missing:
            return None
        if theirs != env_kwargs.get(key, defaults.get(key, missing)):
            overrides.append(f"--data.env_kwargs.{key} {_shell_word(theirs)}")
    return overrides


def trained_on(trained: tuple[str | None, dict[str, Any] | None], env_id: str, env_kwargs: dict[str, Any],
               model: dict[str, Any] | None = None) -> str:
    """``: it was trained on <env> with data.env_kwargs {...}`` for a checkpoint's ``trained`` env (older
    checkpoints do not say: empty), and what gives it back from ``env_id`` with ``env_kwargs``: the overrides
    ``; add --data.env_kwargs.<key> <value> ...`` for the same env id, else the bundled config that needs the
    fewest of them and, among those, whose model options agree most with the checkpoint's ``model``."""
    trained_id, trained_kwargs = trained or (None, None)
    if trained_id is None or trained_kwargs is None:
        return ""
    flow = ", ".join(f"{k}: {json.dumps(v)}" for k, v in trained_kwargs.items())
    said = f": it was trained on {trained_id} with data.env_kwargs {{{flow}}}"
    if trained_id != env_id:
        fits = [(name, env_overrides(trained_kwargs, trained_id, kwargs), _agreement(options, model or {}))
                for name, kwargs, options in _bundled_configs(trained_id)]
        fits = [(name, overrides, agree) for name, overrides, agree in fits if overrides is not None]
        if not fits:
            return f"{said}; use a config of {trained_id} with those data.env_kwargs"
        name, overrides, _ = min(fits, key=lambda fit: (len(fit[1]), -fit[2]))
        return f"{said}; use --config {' '.join([name, *overrides])}"
    overrides = env_overrides(trained_kwargs, env_id, env_kwargs)
    if overrides is None:
        return said  # a keyword the checkpoint's env did not have: no override gives it back
    if not overrides:
        return f"{said}, as configured: {env_id} itself has changed since"
    return f"{said}; add {' '.join(overrides)}"


def _agreement(options: dict[str, Any], model: dict[str, Any]) -> int:
    """How far a config's model ``options`` agree with a checkpoint's ``model`` hyperparameters: +1 for each option
    the checkpoint has with the same value, -1 for each with another (e.g. hopper_td7.yaml over hopper.yaml for a
    checkpoint with SALE)."""
    return sum(1 if model[key] == value else -1 for key, value in options.items() if key in model)


def check_spaces(env: gym.Env, env_id: str, vector_obs: bool = True) -> EnvSpec:
    """Validate that TD3 can drive ``env`` and return its :class:`EnvSpec`.

    Args:
        env: the environment to inspect.
        env_id: its id, for the messages.
        vector_obs: require a 1-D observation (the MLP networks).
    """
    act, obs = env.action_space, env.observation_space
    if not isinstance(act, gym.spaces.Box):
        raise UserInputError(
            f"'{env_id}' has a {act} action space; TD3 needs a continuous Box action space "
            "(for LunarLander-v3 set data.env_kwargs '{continuous: true}')"
        )
    low, high = np.asarray(act.low, dtype=np.float64), np.asarray(act.high, dtype=np.float64)
    if act.shape is None or len(act.shape) != 1:
        raise UserInputError(f"'{env_id}' has action shape {act.shape}; TD3 needs a 1-D action vector")
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise UserInputError(
            f"'{env_id}' has an unbounded action space (low={low.tolist()}, high={high.tolist()}); "
            "TD3's actor needs finite bounds: wrap the env with gymnasium.wrappers.ClipAction or RescaleAction"
        )
    if not isinstance(obs, gym.spaces.Box) or obs.shape is None:
        raise UserInputError(f"'{env_id}' has a {obs} observation space; TD3 here needs a Box observation space")
    image = len(obs.shape) == 3 and obs.dtype == np.uint8
    if vector_obs and len(obs.shape) != 1 and not image:
        raise UserInputError(
            f"'{env_id}' has {obs.dtype} observations of shape {obs.shape}: TD3 here takes 1-D observation vectors "
            "(MLP) or uint8 images (C, H, W) (CNN encoder); use a state-vector env (e.g. CarRacingState-v0), "
            "CarRacingPixels-v0, or flatten the observation"
        )
    if vector_obs and image and obs.shape[2] < obs.shape[0]:
        if env_id.rpartition(":")[2].startswith("CarRacing-"):  # gymnasium's: the shipped envs are its frames
            use = ("set data.env_id CarRacingPixels-v0 (CarRacing-v3's frames channels first, as they are with "
                   "data.env_kwargs '{grayscale: false, frame_stack: 1}'; --config car_pixels.yaml trains it) or "
                   "CarRacingState-v0 (a state vector)")
        else:
            use = ("register the env with its observations transposed to (C, H, W) in a module of yours "
                   "(gymnasium.register) and set data.env_id to yourmodule:YourEnv-v0")
        raise UserInputError(
            f"'{env_id}' has image observations of shape {obs.shape}, which look channels-last (H, W, C); the CNN "
            f"encoder takes channels first (C, H, W), and the command line cannot transpose them: {use}"
        )
    frame_stack = int(getattr(env.unwrapped, "frame_stack", 1)) if image else 1
    return EnvSpec(tuple(obs.shape), obs.dtype, low.tolist(), high.tolist(), frame_stack)


class SingleEnv:
    """One env behind the vector-env calls the env loop makes, without gymnasium's vector
    wrapper (about 0.1 ms less per step). It answers like ``SyncVectorEnv`` with autoreset off:
    ``reset(seed=[s])`` and ``step(actions)`` take and return arrays with a leading axis of 1;
    observations are copies, in the observation space's dtype."""

    num_envs = 1

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.single_observation_space = env.observation_space
        self.single_action_space = env.action_space
        self._obs_dtype = env.observation_space.dtype

    def reset(self, *, seed: list[int | None] | int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        # for one env the loop resets only when the reset mask is set; the other options go to the env
        rest = {k: v for k, v in (options or {}).items() if k != "reset_mask"} or None
        obs, info = self.env.reset(seed=seed[0] if isinstance(seed, (list, tuple)) else seed, options=rest)
        return np.array(obs, dtype=self._obs_dtype)[None], info

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(actions[0])
        return (np.array(obs, dtype=self._obs_dtype)[None], np.array([reward], dtype=np.float64),
                np.array([terminated], dtype=np.bool_), np.array([truncated], dtype=np.bool_), info)

    def close(self) -> None:
        self.env.close()
