"""Choosing ``best`` on more episodes than a validation plays: every checkpoint that the checkpoint callback
kept is played on the same ``selection.episodes`` deterministic episodes when ``fit`` ends, and the one that
succeeds most often (``info["is_success"]``; CarRacing: the lap was closed), then with the highest mean return,
becomes the run's ``best`` (``--ckpt_path best``, what ``validate``, ``test`` and ``export`` take by default).
"""

from __future__ import annotations

import inspect
import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
import numpy as np
import torch

from td3_lightning.declarations import check_declared
from td3_lightning.checkpointing import SELECTION_FILE, atomic_path, first_free_seed, seeds_overlap
from td3_lightning.data import ReplayDataModule
from td3_lightning.errors import UserInputError
from td3_lightning.evaluation import numpy_policy, run_episode


def check_selection_options(options: Mapping[str, Any], checkpoint: Mapping[str, Any] | None = None,
                            checkpointing: bool | None = True) -> None:
    """One clear line for a :class:`CheckpointSelection` option out of its declared range, or for a selection
    without candidates (``checkpoint``: the checkpoint callback's options; ``checkpointing``:
    ``trainer.enable_checkpointing``)."""
    check_declared("selection", CheckpointSelection, options)
    if options["episodes"] == 0 or checkpoint is None:
        return
    if checkpointing is False:
        raise UserInputError("selection.episodes chooses among the kept checkpoints, and trainer.enable_checkpointing "
                             "is false; turn checkpointing on or set --selection.episodes 0")
    top_k = checkpoint.get("save_top_k", 1)
    if checkpoint.get("monitor") is None:
        raise UserInputError("selection.episodes chooses among the best checkpoints by checkpoint.monitor, and "
                             "checkpoint.monitor is null (no best checkpoint); set --checkpoint.monitor val/return, "
                             "or --selection.episodes 0")
    if not (top_k == -1 or top_k >= 2):
        raise UserInputError(f"selection.episodes chooses among the checkpoints kept by checkpoint.monitor, and "
                             f"checkpoint.save_top_k is {top_k}; keep several, e.g. --checkpoint.save_top_k 5, or set "
                             "--selection.episodes 0")


#: the episodes of a fit, by env seed: what they are, their option group, and its options of the first seed and count
SEED_RANGES = (("validation", "data", "eval_seed", "eval_episodes"), ("selection", "selection", "seed", "episodes"),
               ("test", "data", "test_seed", "test_episodes"))


class _Episodes(NamedTuple):
    name: str
    option: str  # of the first seed
    default: int  # of that option
    start: int
    count: int

    def overlaps(self, start: int, count: int) -> bool:
        return seeds_overlap(self.start, self.count, start, count)


def check_seed_ranges(options: Mapping[str, Mapping[str, Any]]) -> None:
    """A fit's validation, selection and test episodes share no env seed (``options``: the parsed ``data`` and
    ``selection`` groups), so that no checkpoint is chosen on the episodes that test it; one line names the fix."""
    owners = {"data": ReplayDataModule, "selection": CheckpointSelection}
    ranges = [_Episodes(name, f"{group}.{seed}", inspect.signature(owners[group]).parameters[seed].default,
                        options[group][seed], options[group][count])
              for name, group, seed, count in SEED_RANGES if options.get(group) is not None and options[group][count]]
    for i, first in enumerate(ranges):
        for second in ranges[i + 1:]:
            if not first.overlaps(second.start, second.count):
                continue
            at_default = first.start == first.default and second.start != second.default  # move the one set
            moved, kept = (second, first) if at_default else (first, second)
            others = [r for r in ranges if r is not moved]
            free = first_free_seed(moved.count, [(r.start, r.count) for r in others],
                                   (moved.default, *(r.start + r.count for r in ranges)))
            why = ("checkpoints would be chosen on the episodes that test them" if "test" in (moved.name, kept.name)
                   else "the selection would replay the validation's own episodes")
            raise UserInputError(
                f"the {moved.name} episodes ({moved.option} {moved.start}: seeds {moved.start}-"
                f"{moved.start + moved.count - 1}) share env seeds with the {kept.name} episodes ({kept.option} "
                f"{kept.start}: seeds {kept.start}-{kept.start + kept.count - 1}), so {why}; move them apart"
                + (f", e.g. --{moved.option} {free}" if free is not None else ""))


def rank_key(summary: Mapping[str, Any]) -> tuple[float, float]:
    """Larger is better: successful episodes (None where the env reports none: 0), then the mean return."""
    return summary["successes"] or 0, summary["return"]


def choose(summaries: Mapping[str, Mapping[str, float]]) -> str:
    """The candidate with the largest :func:`rank_key` (the first listed among equals)."""
    return max(summaries, key=lambda name: rank_key(summaries[name]))


def summarize(episodes: list[dict[str, float]]) -> dict[str, Any]:
    """Mean, std (population) and min of the returns, and the count of successful episodes (None when the env
    reports no ``info["is_success"]``)."""
    returns = np.array([e["return"] for e in episodes], dtype=np.float64)
    reported = [e["success"] for e in episodes if not math.isnan(e["success"])]
    return {"return": float(returns.mean()), "return_std": float(returns.std()), "return_min": float(returns.min()),
            "successes": sum(s > 0 for s in reported) if reported else None, "episodes": len(episodes)}


def describe(summary: Mapping[str, Any]) -> str:
    """``return -1430.9 ± 51.4`` and, where the env reports successes, ``, 486 of 500 successful``."""
    text = f"return {summary['return']:.1f} ± {summary['return_std']:.1f}"
    if summary["successes"] is not None:
        text += f", {summary['successes']} of {summary['episodes']} successful"
    return text


def play(policy: torch.nn.Module, env: Any, seeds: list[int]) -> list[dict[str, float]]:
    """Each seed's deterministic episode with ``policy`` (on the CPU)."""
    act = numpy_policy(policy)
    return [run_episode(env, act, seed) for seed in seeds]


class CheckpointSelection(L.Callback):
    """When ``fit`` ends, plays each checkpoint kept by ``checkpoint.save_top_k`` on more validation episodes and
    makes the one with the most successes, then the highest return, ``best`` (``checkpoints/selection.json``).

    Args:
        episodes: deterministic episodes each kept checkpoint plays when fit ends (>= 0; 0 = off).
        seed: env seed of the first selection episode (>= 0); keep it apart from data.eval_seed and data.test_seed.
    """

    def __init__(self, episodes: int = 0, seed: int = 2_000_000) -> None:
        check_selection_options(locals())
        self.episodes, self.seed = episodes, seed

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        callback = trainer.checkpoint_callback
        if self.episodes == 0 or trainer.global_rank != 0 or callback is None:
            return
        kept = callback.kept_best() if hasattr(callback, "kept_best") else [Path(p) for p in callback.best_k_models]
        candidates = sorted((p for p in kept if p.is_file()), key=lambda p: p.stat().st_mtime_ns)  # as written
        if len(candidates) < 2:
            print(f"selection: {len(candidates)} kept checkpoint(s) on disk, nothing to choose among; best stays "
                  f"the run's best by {callback.monitor}", flush=True)
            return
        env = trainer.datamodule.make_eval_env()  # type: ignore[attr-defined]
        summaries = self._play_each(type(pl_module), candidates, env)
        if not summaries:
            print(f"selection: no candidate could be played; best stays the run's best by {callback.monitor}",
                  flush=True)
            return
        # beside the newest best checkpoint on disk, where `--ckpt_path best` looks (an earlier run's folder when
        # a resumed run kept none); the names relative to it
        known = callback.known_best() if hasattr(callback, "known_best") else callback.best_k_models
        folder = max((Path(p) for p in known if Path(p).is_file()), key=lambda p: p.stat().st_mtime_ns).parent
        named = {os.path.relpath(path, folder): summary for path, summary in summaries.items()}
        chosen = os.path.relpath(choose(summaries), folder)
        result = {"chosen": chosen, "episodes": self.episodes, "seed": self.seed, "monitor": callback.monitor,
                  "candidates": named}
        try:
            with atomic_path(folder / SELECTION_FILE) as tmp:
                tmp.write_text(json.dumps(result, indent=2) + "\n")
        except OSError as err:
            print(f"selection: could not write {folder / SELECTION_FILE} ({err}); best stays the run's best by "
                  f"{callback.monitor}; the choice was {folder / chosen}", flush=True)
            return
        print(f"selection: best is {os.path.normpath(folder / chosen)} ({describe(named[chosen])}); "
              f"{folder / SELECTION_FILE}")

    def _play_each(self, module_class: type[L.LightningModule], candidates: list[Path], env: Any
                   ) -> dict[str, dict[str, Any]]:
        """Each candidate's summary over the selection episodes, by path; one that cannot be loaded is skipped with a
        line."""
        seeds = list(range(self.seed, self.seed + self.episodes))
        summaries: dict[str, dict[str, Any]] = {}
        try:
            for path in candidates:
                start = time.perf_counter()
                try:
                    model = module_class.load_from_checkpoint(path, map_location="cpu")
                except Exception as err:  # replaced or damaged since it was kept: the others still count
                    first = (str(err).strip().splitlines() or [""])[0]
                    print(f"selection: skipped {path.name} ({type(err).__name__}: {first})", flush=True)
                    continue
                summaries[str(path)] = summary = summarize(play(model.policy.eval(), env, seeds))
                print(f"selection: {path.name}: {describe(summary)}, {time.perf_counter() - start:.0f} s", flush=True)
        finally:
            env.close()
        return summaries
