"""Results on the reference environments: train several seeds with the project's own configs,
test each final policy on 100 deterministic episodes, and turn the runs into a table and a plot.

    python benchmarks/reference_results.py run --config pendulum.yaml --seeds 0 1 2   # train + test
    python benchmarks/reference_results.py table                                    # markdown table + plot

Runs live in ``runs/<config name>/seed<S>/`` (the usual ``lightning_logs/version_N`` inside):
``version_0`` is the training run, the ``test`` of its ``last.ckpt`` writes ``test_results.json``
into the next version folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path("runs")


def run(config: str, seeds: list[int], extra: list[str]) -> None:
    name = Path(config).stem
    for seed in seeds:
        folder = ROOT / name / f"seed{seed}"
        base = [sys.executable, "-m", "td3_lightning"]
        common = ["--config", config, "--seed_everything", str(seed), "--trainer.default_root_dir", str(folder)]
        subprocess.run([*base, "fit", *common, *extra], check=True)
        last = sorted(folder.glob("lightning_logs/version_*/checkpoints/last.ckpt"))[-1]
        subprocess.run([*base, "test", *common, "--ckpt_path", str(last)], check=True)


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


def eval_curves(env_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    curves = {}
    for seed_dir in sorted(env_dir.glob("seed*")):
        events = sorted(seed_dir.glob("lightning_logs/version_0/events.out.tfevents.*"))
        if not events:
            continue
        acc = EventAccumulator(str(events[-1]))
        acc.Reload()
        if "val/return" in acc.Tags()["scalars"]:
            curves[seed_dir.name] = [(e.step + 1, e.value) for e in acc.Scalars("val/return")]
    return curves


def table() -> None:
    results = collect()
    print("| config | seeds | test return, mean ± std over seeds | per seed (mean of 100 episodes) |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        means = [r["test/return"] for r in rows]
        std = statistics.pstdev(means) if len(means) > 1 else 0.0
        per_seed = ", ".join(f"{r['test/return']:.1f}" for r in rows)
        print(f"| {name} | {len(rows)} | {statistics.mean(means):.1f} ± {std:.1f} | {per_seed} |")
    _plot(results)


def _plot(results: dict[str, list[dict[str, float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.5), squeeze=False)
    for ax, name in zip(axes[0], names):
        for seed, points in eval_curves(ROOT / name).items():
            steps, values = zip(*points)
            ax.plot(steps, values, label=seed)
        ax.set_title(name)
        ax.set_xlabel("training steps")
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
