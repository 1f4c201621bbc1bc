"""A per-track survey of a car driver: many tracks, every failure classified, the worst ones drawn.

    OMP_NUM_THREADS=1 python scripts/track_survey.py --ckpt td3_lightning/checkpoints/car_random_tracks.ckpt \\
        --config car.yaml --data.env_kwargs.aid_features false --seeds 1000000 1001000 --out survey_state

Each env seed ``A .. B-1`` is one track, driven once by the checkpoint's deterministic actor on the
config's evaluation env (``data.env_id`` and ``data.env_kwargs``, as ``test`` plays it: CarRacing's
unmodified rules, no ``train_env_kwargs``). ``--out`` gets ``survey.json`` (one record per track) and a
PNG frame strip of each of the ``--strips`` worst tracks; a summary is printed.

Failure classes. A track is ``ok`` when its lap closed (``info["is_success"]``: every tile visited) with
a return of at least ``PASS_RETURN`` (850). Every other track gets the first class below that fits how its
episode ended. The car's state is read after every env step (``action_repeat`` physics frames) from the
env's info and state vector; ``W`` is ``WINDOW_FRAMES`` (100 frames, 2 s); "the end" is the last step.

- ``off_road``: the car left the playfield (CarRacing's -100 end), or at the end all four wheels had
  been off the road for at least ``W`` consecutive frames (the env's ``info["off_road_frames"]``): it
  went onto the grass and did not get back.
- ``standstill``: the hull speed (from the state vector's ``v_forward`` and ``v_right``, in world units
  per second; top speed is about 100) was under ``STANDSTILL_SPEED`` (1, the env's ``REST_SPEED``) at
  every step of the last ``W`` frames or more, with a wheel on the road and a tile left to visit: it
  stopped on the road and stood.
- ``wrong_way``: over the last ``W`` frames the car's position along the centre line (``track_progress``,
  counted through the start) went back by at least one tile: it turned round and drove against the
  direction of the lap, over tiles it had visited.
- ``missed_tile``: the lap is open, the car passed a tile without touching it (``info["tiles_missed"]``
  > 0: its projection on the centre line got ``MISSED_TILE_MARGIN`` tiles past a tile no wheel touched),
  and it went round (its position on the centre line, ``track_progress``, fell by more than half a lap
  from one step to the next, past the start, after it had visited half the tiles) or had visited every
  other tile. The start tile counts as visited from the first frame, so CarRacing closes a lap only when
  every tile is visited: after a miss, a car with no tile left before the start line scores the same
  whether it drives on or stands.
- ``time_limit``: the lap is open at the time limit (``truncated``) and the car had not gone round: too
  slow (a tile it missed on the way, if any, is in ``tiles_missed``).
- ``other``: none of these (under CarRacing's rules an open lap ends only at the time limit or off the
  playfield, and a closed lap scores at least 900; with training aids in ``data.env_kwargs`` an episode
  may end otherwise).

Strips show ``STRIP_FRAMES`` pictures of CarRacing's view: for a track whose failure has an onset (the
step from which the car stood, stayed on the grass or drove backwards, or the step at which the first
tile counted as missed) the ``STRIP_LEAD_FRAMES`` before it, the onset and the last step; else the drive from a tenth of
it to its end.

Deterministic: the actor has no noise, each process computes with one torch thread, and a track's
numbers depend only on its seed, so the same seeds give the same numbers with any ``--workers``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from td3_lightning.evaluation import Policy

#: a lap closed with at least this return is ``ok``; a track under it is a failure
PASS_RETURN = 850.0
#: physics frames at the end of an episode that the ``off_road`` and ``standstill`` tests look at (2 s)
WINDOW_FRAMES = 100
#: hull speed (world units per second; top speed is about 100) under which a car stands (``standstill``)
STANDSTILL_SPEED = 1.0
#: classes in the order the summary lists them
CLASSES = ("ok", "standstill", "off_road", "wrong_way", "missed_tile", "time_limit", "other")
#: frames in each strip
STRIP_FRAMES = 6
#: physics frames before a failure's onset that its strip covers (4 s)
STRIP_LEAD_FRAMES = 200
#: width of each frame of a strip, in pixels
STRIP_WIDTH = 300


@dataclass(frozen=True)
class Step:
    """The car's state after one env step."""

    frames: int  # physics frames since the reset
    speed: float  # hull speed, world units per second
    off_road_frames: int  # consecutive frames, up to now, with all four wheels off the road
    tiles_visited: int
    tiles_missed: int  # tiles passed without a touch so far
    progress: float  # position along the lap from the start tile, 0..1 (the state vector's track_progress)


@dataclass(frozen=True)
class Ending:
    """How an episode ended: its return and the flags of its last step."""

    ret: float
    lap_closed: bool
    truncated: bool
    out_of_playfield: bool
    tiles_total: int


def trailing_frames(trace: list[Step], condition: Callable[[Step], bool]) -> int:
    """Physics frames at the end of ``trace`` over which ``condition(step)`` held at every step."""
    first = spell_start(trace, condition)
    if first == len(trace):
        return 0
    return trace[-1].frames - (trace[first - 1].frames if first > 0 else 0)


def spell_start(trace: list[Step], condition: Callable[[Step], bool]) -> int:
    """Index of the first step of the final run of steps in ``trace`` where ``condition(step)`` holds
    (``len(trace)`` when it does not hold at the last step)."""
    first = len(trace)
    while first > 0 and condition(trace[first - 1]):
        first -= 1
    return first


def stand_frames(trace: list[Step], speed: float = STANDSTILL_SPEED) -> int:
    """Physics frames at the end of ``trace`` with the hull slower than ``speed``."""
    return trailing_frames(trace, lambda s: s.speed < speed)


def window_progress(trace: list[Step], window: int = WINDOW_FRAMES) -> float:
    """Laps (negative: backwards) the car's centre-line position moved over the last ``window`` frames of
    ``trace``, counted through the start (each step moves less than half a lap)."""
    if not trace:
        return 0.0
    moved, stop = 0.0, trace[-1].frames - window
    for a, b in zip(reversed(trace[:-1]), reversed(trace)):
        if b.frames <= stop:
            break
        moved += (b.progress - a.progress + 0.5) % 1.0 - 0.5
    return moved


def went_round(trace: list[Step], tiles_total: int) -> bool:
    """Whether the car passed the start line forward after visiting half the tiles (``track_progress``
    falling by more than half a lap between two steps)."""
    return any(a.progress - b.progress > 0.5 and 2 * b.tiles_visited >= tiles_total for a, b in zip(trace, trace[1:]))


def classify(
    trace: list[Step], end: Ending, window: int = WINDOW_FRAMES, speed: float = STANDSTILL_SPEED,
    pass_return: float = PASS_RETURN,
) -> str:
    """The failure class of one episode (module docstring) from its steps and its ending."""
    if end.lap_closed and end.ret >= pass_return:
        return "ok"
    if not trace:
        return "other"
    last = trace[-1]
    if end.out_of_playfield or last.off_road_frames >= window:
        return "off_road"
    nothing_left = last.tiles_visited + last.tiles_missed >= end.tiles_total  # every tile visited or missed
    if stand_frames(trace, speed) >= window and not nothing_left:
        return "standstill"
    if window_progress(trace, window) * end.tiles_total <= -1.0:
        return "wrong_way"
    if not end.lap_closed and last.tiles_missed > 0 and (nothing_left or went_round(trace, end.tiles_total)):
        return "missed_tile"
    if not end.lap_closed and end.truncated:
        return "time_limit"
    return "other"


# ----------------------------------------------------------------------------------------------- driving
def load_policy(ckpt: str) -> Policy:
    """The deterministic actor of a td3_lightning checkpoint, as ``obs -> action`` on the CPU."""
    from td3_lightning import TD3
    from td3_lightning.evaluation import numpy_policy

    return numpy_policy(TD3.load_from_checkpoint(ckpt, map_location="cpu").eval().policy)


def drive(env: Any, policy: Policy, seed: int, render_at: set[int] | None = None
          ) -> tuple[list[Step], Ending, dict[int, np.ndarray]]:
    """One episode on env seed ``seed``: its steps, its ending, and the frames rendered after the steps
    in ``render_at`` (step 0 is the reset; needs ``render_mode="rgb_array"``)."""
    from td3_lightning.envs.car_racing import FEATURE_NAMES

    iv, ir, ip = (FEATURE_NAMES.index(name) for name in ("v_forward", "v_right", "track_progress"))
    render_at = render_at or set()
    frames: dict[int, np.ndarray] = {}
    obs, info = env.reset(seed=seed)
    if 0 in render_at:
        frames[0] = env.render()
    trace: list[Step] = []
    total, done = 0.0, False
    truncated = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        total += float(reward)
        done = terminated or truncated
        state = info["privileged_obs"] if "privileged_obs" in info else obs  # the pixel env's state vector
        trace.append(Step(
            frames=int(info["frames"]),
            speed=100.0 * math.hypot(float(state[iv]), float(state[ir])),  # the features are speeds / 100
            off_road_frames=int(info["off_road_frames"]),
            tiles_visited=int(info["tiles_visited"]),
            tiles_missed=int(info["tiles_missed"]),
            progress=float(state[ip]),
        ))
        if len(trace) in render_at:
            frames[len(trace)] = env.render()
    end = Ending(ret=total, lap_closed=bool(info["is_success"]), truncated=bool(truncated),
                 out_of_playfield=bool(info["out_of_playfield"]), tiles_total=int(info["tiles_total"]))
    return trace, end, frames


def onset(trace: list[Step], failure: str, speed: float = STANDSTILL_SPEED) -> int | None:
    """The step (1 = the first) where the failure began: from which a ``standstill`` car stood, an
    ``off_road`` one stayed on the grass and a ``wrong_way`` one drove backwards to the end, at which a
    ``missed_tile`` car's first missed tile counted; None for the other classes (and for a car that left
    the playfield on the road)."""
    if failure == "missed_tile":
        return next(i + 1 for i, s in enumerate(trace) if s.tiles_missed > 0)
    if failure == "wrong_way":  # the first of the final run of steps that moved back along the centre line
        first = len(trace)
        while first > 1 and (trace[first - 1].progress - trace[first - 2].progress + 0.5) % 1.0 - 0.5 < 0:
            first -= 1
        return first + 1 if first < len(trace) else None
    if failure == "standstill":
        first = spell_start(trace, lambda s: s.speed < speed)
    elif failure == "off_road":
        first = spell_start(trace, lambda s: s.off_road_frames > 0)
    else:
        return None
    return first + 1 if first < len(trace) else None


def track_record(seed: int, trace: list[Step], end: Ending) -> dict[str, Any]:
    """The survey's record of one track."""
    last = trace[-1]
    failure = classify(trace, end)
    start = onset(trace, failure)
    return {
        "seed": seed,
        "return": end.ret,
        "frames": last.frames,
        "lap_closed": end.lap_closed,
        "tiles_visited": last.tiles_visited,
        "tiles_total": end.tiles_total,
        "tiles_missed": last.tiles_missed,
        "failure": failure,
        "stand_frames": stand_frames(trace),
        "off_road_frames": last.off_road_frames,
        "out_of_playfield": end.out_of_playfield,
        "steps": len(trace),
        "onset_step": start,
        "onset_frame": None if start is None else trace[start - 1].frames,
    }


_WORKER: dict[str, Any] = {}


def _init_worker(ckpt: str, env_id: str, env_kwargs: dict[str, Any]) -> None:
    import torch

    from td3_lightning.envs import make_env

    torch.set_num_threads(1)
    _WORKER["policy"] = load_policy(ckpt)
    _WORKER["env"] = make_env(env_id, env_kwargs)


def _survey_track(seed: int) -> dict[str, Any]:
    env = _WORKER["env"]
    trace, end, _ = drive(env, _WORKER["policy"], seed)
    return track_record(seed, trace, end)


def survey(ckpt: str, env_id: str, env_kwargs: dict[str, Any], seeds: list[int], workers: int = 1,
           progress: bool = False) -> list[dict[str, Any]]:
    """One record per seed (in seed order), played by ``workers`` processes."""
    done: list[dict[str, Any]] = []
    start = time.perf_counter()
    every = max(1, min(100, len(seeds) // 10))  # progress lines on stderr

    def report(record: dict[str, Any]) -> None:
        done.append(record)
        if progress and (len(done) % every == 0 or len(done) == len(seeds)):
            print(f"  {len(done)}/{len(seeds)} tracks, {time.perf_counter() - start:.0f} s", file=sys.stderr,
                  flush=True)

    if workers == 1:
        _init_worker(ckpt, env_id, env_kwargs)
        for seed in seeds:
            report(_survey_track(seed))
    else:
        # fork (where there is one) starts a worker with this process's imports: seconds sooner than spawn
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        with ctx.Pool(workers, initializer=_init_worker, initargs=(ckpt, env_id, env_kwargs)) as pool:
            for record in pool.imap_unordered(_survey_track, seeds, chunksize=4):
                report(record)
    return sorted(done, key=lambda r: r["seed"])


# ----------------------------------------------------------------------------------------------- strips
def strip_steps(steps: int, onset_step: int | None, n: int = STRIP_FRAMES, lead: int = 50) -> list[int]:
    """The steps a strip of a drive of ``steps`` steps shows (0 = the reset): for a failure that began at
    ``onset_step``, ``n - 1`` evenly spaced over the ``lead`` steps up to it, and the last step; else ``n``
    evenly spaced from a tenth of the drive to its end."""
    if onset_step is None:
        picks = np.linspace(steps // 10, steps, n)
    else:
        picks = np.linspace(max(onset_step - lead, 0), onset_step, max(n - 1, 1))
    return sorted(set(picks.round().astype(int).tolist()) | {steps})


def write_strip(env: Any, policy: Policy, record: dict[str, Any], path: Path) -> list[int]:
    """Drive ``record``'s track again on ``env`` (``render_mode="rgb_array"``), save the frames of
    :func:`strip_steps` side by side to ``path``; return the physics frame of each picture."""
    from PIL import Image

    lead = math.ceil(STRIP_LEAD_FRAMES * record["steps"] / record["frames"])  # frames -> steps
    steps = strip_steps(record["steps"], record["onset_step"], lead=lead)
    trace, end, frames = drive(env, policy, record["seed"], set(steps))
    if end.ret != record["return"]:  # drawing never changes the physics; if it ever did, say so
        print(f"warning: seed {record['seed']} scored {end.ret:.1f} when drawn, {record['return']:.1f} in the survey",
              file=sys.stderr)
    shown = [i for i in steps if i in frames]
    tiles = [Image.fromarray(frames[i]) for i in shown]
    height = int(tiles[0].height * STRIP_WIDTH / tiles[0].width)
    strip = Image.new("RGB", (STRIP_WIDTH * len(tiles), height))
    for k, tile in enumerate(tiles):
        strip.paste(tile.resize((STRIP_WIDTH, height)), (k * STRIP_WIDTH, 0))
    strip.save(path)
    return [trace[i - 1].frames if i > 0 else 0 for i in shown]


# ----------------------------------------------------------------------------------------------- summary
def summarize(records: list[dict[str, Any]], worst: int = 10) -> dict[str, Any]:
    """Mean, std, laps closed, tracks under ``PASS_RETURN``, tracks per class and the ``worst`` tracks."""
    returns = np.array([r["return"] for r in records], dtype=np.float64)
    counts = {c: sum(r["failure"] == c for r in records) for c in CLASSES}
    ranked = sorted(records, key=lambda r: (r["return"], r["seed"]))[:worst]
    return {
        "tracks": len(records),
        "mean": float(returns.mean()),
        "std": float(returns.std()),
        "min": float(returns.min()),
        "laps_closed": sum(r["lap_closed"] for r in records),
        "under_pass": int((returns < PASS_RETURN).sum()),
        "classes": counts,
        "worst": [{"seed": r["seed"], "return": r["return"], "failure": r["failure"]} for r in ranked],
    }


def summary_text(s: dict[str, Any]) -> str:
    """The summary as printed."""
    counts = ", ".join(f"{c} {n}" for c, n in s["classes"].items())
    lines = [
        f"{s['tracks']} tracks: return {s['mean']:.1f} ± {s['std']:.1f} (min {s['min']:.1f}); "
        f"laps closed {s['laps_closed']}/{s['tracks']}; under {PASS_RETURN:.0f}: {s['under_pass']}",
        f"classes: {counts}",
        f"worst {len(s['worst'])}:",
    ]
    lines += [f"  seed {w['seed']}: {w['return']:7.1f}  {w['failure']}" for w in s["worst"]]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- command line
ENV_KWARG = "--data.env_kwargs."
ENV_KWARGS_HELP = "--data.env_kwargs.KEY VALUE overrides a keyword of the config's env (as fit and test take it)."


def parse_env_kwargs_options(extra: list[str]) -> dict[str, Any]:
    """``--data.env_kwargs.KEY VALUE`` pairs (as the command line takes them; VALUE read as YAML) as a dict;
    :class:`UserInputError` for anything else."""
    import yaml

    from td3_lightning.errors import UserInputError

    tokens = [part for item in extra for part in (item.split("=", 1) if item.startswith("--") else [item])]
    overrides: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        flag = tokens[i]
        if not flag.startswith(ENV_KWARG) or flag == ENV_KWARG:
            raise UserInputError(f"unrecognized argument {flag}; besides this script's options only "
                                 f"{ENV_KWARG}KEY VALUE overrides are taken")
        value = tokens[i + 1] if i + 1 < len(tokens) else None
        if value is None or value == "" or (value.startswith("--") and not _is_number(value)):
            raise UserInputError(f"{flag} needs a value: give {flag} VALUE")
        try:
            overrides[flag[len(ENV_KWARG):]] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise UserInputError(f"{flag} {value}: not a YAML value ({str(err).splitlines()[0]}); "
                                 "quote it or fix it") from None
        i += 2
    return overrides


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_eval_env(config: str, overrides: dict[str, Any] | None = None) -> tuple[str, dict[str, Any], Any]:
    """``(env_id, env_kwargs, spec)`` of a config's evaluation env, as ``test`` builds it (a path or the
    name of a bundled config), with ``overrides`` of its ``env_kwargs``."""
    import yaml

    from td3_lightning.user_input import resolve_config_args
    from td3_lightning.data import ReplayDataModule
    from td3_lightning.errors import UserInputError
    from td3_lightning.registration import ENTRY_POINTS

    path = resolve_config_args(["--config", config])[1]
    if not os.path.isfile(path):
        raise UserInputError(f"config file not found: {config}; give a YAML file or a bundled config name (car.yaml)")
    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as err:
        raise UserInputError(f"config {path} is not valid YAML ({str(err).splitlines()[0]}); fix the file") from None
    data = (loaded or {}).get("data") if isinstance(loaded, dict) else None
    if not isinstance(data, dict) or "env_id" not in data:
        raise UserInputError(f"config {path} has no data.env_id; give a td3_lightning config such as car.yaml")
    if data["env_id"] not in ENTRY_POINTS:  # the survey reads the car's state (frames, tiles, wheels) from info
        raise UserInputError(f"config {path} drives {data['env_id']}; track_survey and select_driver drive CarRacing "
                             f"tracks: give a config of {' or '.join(ENTRY_POINTS)} (car.yaml, car_pixels.yaml)")
    if overrides:
        data = {**data, "env_kwargs": {**(data.get("env_kwargs") or {}), **overrides}}
    try:
        datamodule = ReplayDataModule(**data)
    except TypeError as err:
        raise UserInputError(f"config {path}: its data section does not fit ReplayDataModule ({err})") from None
    return datamodule.env_id, dict(datamodule.env_kwargs), datamodule.spec


def check_fit(ckpt: str, env_id: str, env_kwargs: dict[str, Any], spec: Any) -> None:
    """One-line error unless the checkpoint's observation and action shapes are the env's."""
    from td3_lightning.checkpointing import check_checkpoint, inspect_checkpoint
    from td3_lightning.envs import trained_on
    from td3_lightning.errors import UserInputError
    from td3_lightning.registration import ENTRY_POINTS

    check_checkpoint(ckpt)
    facts = inspect_checkpoint(ckpt)
    trained_id = facts["env"][0]
    if trained_id is not None and trained_id not in ENTRY_POINTS:
        raise UserInputError(f"{ckpt} was trained on {trained_id}; track_survey and select_driver drive CarRacing "
                             f"tracks: give a checkpoint of {' or '.join(ENTRY_POINTS)}")
    for what, theirs, ours in [("observation shape", facts["obs_shape"], tuple(spec.obs_shape)),
                               ("action shape", facts["action_shape"], (len(spec.action_low),))]:
        if theirs is not None and tuple(theirs) != tuple(ours):
            raise UserInputError(f"checkpoint {what} {tuple(theirs)} != {env_id}'s {tuple(ours)} ({ckpt}); "
                                 "give the --config the checkpoint was trained with"
                                 + trained_on(facts["env"], env_id, env_kwargs, facts.get("model")))


def check_seeds_and_workers(seeds: list[int], workers: int) -> None:
    """One-line errors for a bad ``--seeds A B`` range or ``--workers`` count (this script's and select_driver's)."""
    from td3_lightning.errors import UserInputError

    first, stop = seeds
    if first < 0 or stop <= first:
        raise UserInputError(f"--seeds {first} {stop}: give a range A B of env seeds with 0 <= A < B (B excluded)")
    if workers < 1:
        raise UserInputError(f"--workers {workers}: give at least 1 process")


def check_args(args: argparse.Namespace) -> None:
    """One-line errors for bad arguments, before anything is loaded."""
    from td3_lightning.errors import UserInputError, check_checkpoint_file

    check_seeds_and_workers(args.seeds, args.workers)
    if args.strips < 0:
        raise UserInputError(f"--strips {args.strips}: give 0 (no strips) or more")
    check_checkpoint_file(args.ckpt, "--ckpt", "it takes a .ckpt file of a car driver")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {out} is a file; give a folder (new or empty)")
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        raise UserInputError(f"--out {out} exists and is not empty; give a new folder or add --overwrite "
                             "(which replaces survey.json and the strips, and leaves other files alone)")


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", required=True, help="a td3_lightning checkpoint (.ckpt)")
    parser.add_argument("--config", required=True, help="its config (a path or a bundled name: car.yaml)")
    parser.add_argument("--seeds", type=int, nargs=2, required=True, metavar=("A", "B"),
                        help="env seeds A, A+1, ..., B-1: one track each")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--out", required=True, help="folder for survey.json and the strips (new or empty)")
    parser.add_argument("--strips", type=int, default=10, help="frame strips of the K worst tracks (default 10)")
    parser.add_argument("--overwrite", action="store_true", help="write into a non-empty --out")
    parser.epilog = ENV_KWARGS_HELP
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the survey; print and return its summary."""
    from td3_lightning.errors import UserInputError

    args, extra = parse_args(argv)
    try:
        check_args(args)
        env_id, env_kwargs, spec = read_eval_env(args.config, parse_env_kwargs_options(extra))
        check_fit(args.ckpt, env_id, env_kwargs, spec)
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)

    import torch

    from td3_lightning.envs import make_env

    torch.set_num_threads(1)
    out = Path(args.out)
    try:  # now, not after minutes of driving
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"error: cannot make --out {out} ({err.strerror}); give a folder you can write to", file=sys.stderr)
        sys.exit(2)
    seeds = list(range(args.seeds[0], args.seeds[1]))
    start = time.perf_counter()
    records = survey(args.ckpt, env_id, env_kwargs, seeds, args.workers, progress=True)
    seconds = time.perf_counter() - start
    summary = summarize(records)

    worst = sorted(records, key=lambda r: (r["return"], r["seed"]))[: args.strips]
    if worst:
        policy = load_policy(args.ckpt)
        env = make_env(env_id, env_kwargs, render_mode="rgb_array")
        for record in worst:
            name = f"strip_seed{record['seed']}.png"
            record["strip"] = name
            record["strip_frames"] = write_strip(env, policy, record, out / name)
        env.close()
    report = {
        "ckpt": str(args.ckpt), "config": str(args.config), "env_id": env_id, "env_kwargs": env_kwargs,
        "seeds": list(args.seeds), "pass_return": PASS_RETURN, "window_frames": WINDOW_FRAMES,
        "standstill_speed": STANDSTILL_SPEED, "seconds": round(seconds, 1), "summary": summary, "tracks": records,
    }
    (out / "survey.json").write_text(json.dumps(report, indent=1) + "\n")
    print(summary_text(summary))
    print(f"{len(records)} tracks in {seconds:.0f} s with {args.workers} worker(s); "
          f"{out / 'survey.json'}, {len(worst)} strip(s)")
    return summary


if __name__ == "__main__":
    main()
