"""Results on the reference environments: train several seeds with the project's own configs,
test each final policy on 100 deterministic episodes, and turn the runs into a table and a plot.

    python benchmarks/reference_results.py run --config pendulum.yaml --seeds 0 1 2   # train + test
    python benchmarks/reference_results.py table                                    # markdown table + plot

Runs live in ``runs/<config name>/seed<S>/`` (the usual ``lightning_logs/version_N`` inside). The
``test`` of the final ``last.ckpt`` writes ``test_results.json`` into its own version folder.

``run`` can be stopped at any time and run again with the same arguments: a seed with a test result
is skipped, a seed with a ``last.ckpt`` but no test result continues its training from there
(``fit --ckpt_path last``) and is then tested, and any other seed starts fresh. So a
1M-step budget can be spread over several sittings. ``table`` lists unfinished seeds separately,
with the last step they were evaluated at.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path("runs")


def seed_state(folder: Path) -> str:
    """``done`` (a test result exists), ``resume`` (a ``last.ckpt`` but no test result) or ``new``."""
    if any(folder.glob("lightning_logs/version_*/test_results.json")):
        return "done"
    if any(folder.glob("lightning_logs/version_*/checkpoints/last.ckpt")):
        return "resume"
    return "new"


def latest_last_ckpt(folder: Path) -> Path:
    """The ``last.ckpt`` of the highest-numbered version (version_10 after version_9)."""
    found = sorted(folder.glob("lightning_logs/version_*/checkpoints/last.ckpt"), key=lambda p: _version(p.parents[1]))
    if not found:
        raise SystemExit(f"error: no last.ckpt under {folder}/lightning_logs/version_*/checkpoints; "
                         "did the training run write checkpoints (trainer.enable_checkpointing)?")
    return found[-1]


def run(config: str, seeds: list[int], extra: list[str]) -> None:
    name = Path(config).stem
    for seed in seeds:
        folder = ROOT / name / f"seed{seed}"
        state = seed_state(folder)
        if state == "done":
            print(f"{name} seed {seed}: already tested, skipped (delete {folder} to redo it)")
            continue
        base = [sys.executable, "-m", "td3_lightning"]
        common = ["--config", config, "--seed_everything", str(seed), "--trainer.default_root_dir", str(folder)]
        resume = ["--ckpt_path", "last"] if state == "resume" else []
        print(f"{name} seed {seed}: {'continuing from its last.ckpt' if resume else 'training'}", flush=True)
        subprocess.run([*base, "fit", *common, *resume, *extra], check=True)
        subprocess.run([*base, "test", *common, "--ckpt_path", str(latest_last_ckpt(folder))], check=True)


def _version(path: Path) -> int:
    return int(path.name.split("_")[-1])


def collect() -> dict[str, list[dict[str, float]]]:
    """For every config name, the test results of each seed's latest test run."""
    out: dict[str, list[dict[str, float]]] = {}
    for env_dir in sorted(p for p in ROOT.glob("*") if p.is_dir()):
        for seed_dir in sorted(env_dir.glob("seed*")):
            results = sorted(seed_dir.glob("lightning_logs/version_*/test_results.json"), key=lambda p: _version(p.parent))
            if results:
                res = json.loads(results[-1].read_text())
                res["seed"] = float(seed_dir.name[4:])
                out.setdefault(env_dir.name, []).append(res)
    return out


def read_seed(seed_dir: Path) -> tuple[list[tuple[int, float]], float]:
    """One seed's ``val/return`` curve over all its training versions (a resumed run logs into a new
    version folder; where two versions log the same step, the later one counts), and its training
    time in hours: per version, the wall-clock span of its logged values, summed."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points: dict[int, float] = {}
    seconds = 0.0
    for version in sorted(seed_dir.glob("lightning_logs/version_*"), key=_version):
        times: list[float] = []
        for events in sorted(version.glob("events.out.tfevents.*")):
            acc = EventAccumulator(str(events))
            acc.Reload()
            for tag in acc.Tags()["scalars"]:
                scalars = acc.Scalars(tag)
                times += [scalars[0].wall_time, scalars[-1].wall_time]
                if tag == "val/return":
                    points.update((e.step + 1, e.value) for e in scalars)
        if times:
            seconds += max(times) - min(times)
    return sorted(points.items()), seconds / 3600


def read_runs(env_dir: Path) -> dict[str, tuple[list[tuple[int, float]], float]]:
    """Per seed with evaluations: its curve and training hours (see :func:`read_seed`)."""
    return {d.name: run for d in sorted(env_dir.glob("seed*")) if (run := read_seed(d))[0]}


def _mean_std(values: list[float]) -> str:
    return f"{statistics.mean(values):.1f} ± {statistics.pstdev(values) if len(values) > 1 else 0.0:.1f}"


def table() -> None:
    """Print the markdown table (tested seeds only) and the unfinished seeds; write the plot.

    Two measures per config: the test return of the final policy (100 episodes, the project's
    measure) and the best evaluation during training, the mean over seeds of each seed's highest
    ``val/return`` (the TD3 paper's "max average return"; it depends on how often a run evaluates).
    """
    results = collect()
    # every run with an evaluation, finished or not (the event files are read once, here)
    runs = {p.name: r for p in sorted(ROOT.glob("*")) if p.is_dir() and (r := read_runs(p))}
    curves = {name: {seed: curve for seed, (curve, _) in by_seed.items()} for name, by_seed in runs.items()}
    print("| config | seeds | test return, mean ± std over seeds | per seed (mean of 100 episodes) "
          "| best evaluation during training, mean ± std | training hours per seed |")
    print("|---|---|---|---|---|---|")
    for name, rows in results.items():
        means = [r["test/return"] for r in rows]
        per_seed = ", ".join(f"{r['test/return']:.1f}" for r in rows)
        logged = [runs[name][seed] for r in rows if (seed := f"seed{r['seed']:.0f}") in runs.get(name, {})]
        if len(logged) == len(rows):
            best = _mean_std([max(v for _, v in curve) for curve, _ in logged])
            hours = ", ".join(f"{h:.2f}" for _, h in logged)
        else:
            best = hours = "n/a (no evaluation logged)"
        print(f"| {name} | {len(rows)} | {_mean_std(means)} | {per_seed} | {best} | {hours} |")
    unfinished = [(name, seed, points) for name, by_seed in curves.items()
                  for seed, points in by_seed.items() if seed_state(ROOT / name / seed) != "done"]
    if unfinished:
        print("\nnot tested yet (training unfinished or stopped; `run` again with the same arguments continues it):")
        for name, seed, points in unfinished:
            step, value = points[-1]
            best_step, best = max(points, key=lambda p: p[1])
            print(f"- {name} {seed}: last evaluated at step {step} (return {value:.1f}; best {best:.1f} at {best_step})")
    _plot(curves)


def _steps_label(steps: float, _position: object = None) -> str:
    """Tick label for a step count: 20000 -> ``20k``, 1000000 -> ``1M``."""
    if abs(steps) >= 1_000_000:
        return f"{steps / 1_000_000:g}M"
    if abs(steps) >= 1000:
        return f"{steps / 1000:g}k"
    return f"{steps:g}"


def _plot(curves: dict[str, dict[str, list[tuple[int, float]]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    if not curves:
        return
    columns = min(4, len(curves))
    rows = -(-len(curves) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.5 * rows), squeeze=False)
    for ax in axes.flat[len(curves) :]:
        ax.set_visible(False)
    for ax, (name, by_seed) in zip(axes.flat, curves.items()):
        for seed, points in by_seed.items():
            steps, values = zip(*points)
            ax.plot(steps, values, label=seed)
        ax.set_title(name)
        ax.set_xlabel("training steps")
        ax.xaxis.set_major_formatter(_steps_label)
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
        ax.set_ylabel("evaluation return")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path = ROOT / "reference_results.png"
    fig.savefig(path)
    print(f"\nplot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train and test one config over several seeds")
    r.add_argument("--config", required=True)
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    sub.add_parser("table", help="print the results table and write the plot")
    args, extra = parser.parse_known_args()
    if args.command == "run":
        run(args.config, args.seeds, extra)
    else:
        table()


if __name__ == "__main__":
    main()
