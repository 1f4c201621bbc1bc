"""Choose a car driver on validation tracks: every candidate checkpoint driven on the same tracks, the most
robust one named.

    OMP_NUM_THREADS=1 python scripts/select_driver.py --config car.yaml --seeds 2000000 2000500 --workers 2 \\
        --ckpts runs/car/lightning_logs/version_0/checkpoints/*.ckpt --out selection.json

Each candidate is surveyed as ``scripts/track_survey.py`` does (the config's evaluation env, CarRacing's
rules, the deterministic actor). The choice is by laps closed, then by the fewest tracks under 850, then by
the mean return: an open lap costs the user a lap, a slower lap a few points. Keep the validation seeds apart
from the training runs' validation tracks (``data.eval_seed``) and from the test tracks you report (e.g.
seeds 1000000-1000999 for test, 2000000 and up for validation).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import track_survey  # noqa: E402  (the survey of one checkpoint, beside this script)


def rank_key(summary: dict[str, Any]) -> tuple[int, int, float]:
    """Larger is better: laps closed, then fewer tracks under the pass return, then the mean return."""
    return summary["laps_closed"], -summary["under_pass"], summary["mean"]


def choose(summaries: dict[str, dict[str, Any]]) -> str:
    """The candidate with the largest :func:`rank_key` (the first listed among equals)."""
    return max(summaries, key=lambda ckpt: rank_key(summaries[ckpt]))


def table(summaries: dict[str, dict[str, Any]], chosen: str) -> str:
    """One line per candidate, the chosen one marked."""
    lines = ["| checkpoint | mean | laps closed | under 850 | standstills | off road | missed tile |",
             "|---|---|---|---|---|---|---|"]
    for ckpt, s in summaries.items():
        mark = " (chosen)" if ckpt == chosen else ""
        c = s["classes"]
        lines.append(f"| {ckpt}{mark} | {s['mean']:.1f} | {s['laps_closed']}/{s['tracks']} | {s['under_pass']} | "
                     f"{c['standstill']} | {c['off_road']} | {c['missed_tile']} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpts", nargs="+", required=True, help="candidate checkpoints (.ckpt)")
    parser.add_argument("--config", required=True, help="their config (a path or a bundled name: car.yaml)")
    parser.add_argument("--seeds", type=int, nargs=2, required=True, metavar=("A", "B"),
                        help="validation env seeds A, A+1, ..., B-1: one track each")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--out", required=True, help="a new JSON file for every candidate's summary and the choice")
    parser.epilog = track_survey.ENV_KWARGS_HELP
    return parser.parse_known_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """One-line errors for bad arguments, before anything is driven."""
    from td3_lightning.errors import UserInputError, check_checkpoint_file

    track_survey.check_seeds_and_workers(args.seeds, args.workers)
    given: dict[Path, str] = {}  # each file, resolved, as first named
    for ckpt in args.ckpts:
        check_checkpoint_file(ckpt, "--ckpts", "each candidate is a .ckpt file")
        resolved = Path(ckpt).resolve()
        if resolved in given:
            first = given[resolved]
            raise UserInputError(f"--ckpts names a checkpoint twice ({first} and {ckpt}); give each candidate once")
        given[resolved] = ckpt
    out = Path(args.out)
    if out.exists():
        raise UserInputError(f"--out {out} exists; give a new file name (nothing is overwritten)")
    if not out.parent.is_dir():
        raise UserInputError(f"--out {out}: its folder {out.parent} does not exist; make it or give another path")


def main(argv: list[str] | None = None) -> str:
    """Survey every candidate, print the table and write ``--out``; return the chosen checkpoint."""
    from td3_lightning.errors import UserInputError

    args, extra = parse_args(argv)
    try:
        check_args(args)
        env_id, env_kwargs, spec = track_survey.read_eval_env(args.config, track_survey.parse_env_kwargs_options(extra))
        for ckpt in args.ckpts:
            track_survey.check_fit(ckpt, env_id, env_kwargs, spec)
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    seeds = list(range(*args.seeds))
    summaries: dict[str, dict[str, Any]] = {}
    start = time.perf_counter()
    for ckpt in args.ckpts:
        print(f"{ckpt}:", file=sys.stderr, flush=True)
        records = track_survey.survey(ckpt, env_id, env_kwargs, seeds, args.workers, progress=True)
        summaries[ckpt] = track_survey.summarize(records)
    chosen = choose(summaries)
    print(table(summaries, chosen))
    Path(args.out).write_text(json.dumps({
        "config": args.config, "env_id": env_id, "env_kwargs": env_kwargs, "seeds": list(args.seeds), "chosen": chosen,
        "seconds": round(time.perf_counter() - start, 1), "candidates": summaries}, indent=1) + "\n")
    print(f"chosen: {chosen} ({len(seeds)} validation tracks each; {args.out})")
    return chosen


if __name__ == "__main__":
    main()
