"""Vector envs on this machine: 1 env vs several, at a fixed budget of env transitions.

Pendulum-v1 (configs/pendulum.yaml), the same number of transitions after the warm-up for each
row; the final evaluation is the mean of 10 deterministic episodes (seeds 1000-1009).

    python benchmarks/scaling.py --transitions 10000
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile

ROWS = [  # (num_envs, utd_ratio)
    (1, 1.0),
    (4, 0.25),
    (4, 1.0),
]


def run(num_envs: int, utd: float, transitions: int) -> dict[str, float]:
    steps = int(transitions * utd)  # training steps; each collects 1 / utd transitions
    cmd = [
        sys.executable, "-m", "td3_lightning", "fit", "--config", "pendulum.yaml", "--trainer.max_steps", str(steps),
        "--trainer.val_check_interval", str(steps), "--data.num_envs", str(num_envs), "--data.utd_ratio", str(utd),
        "--trainer.logger", "false", "--checkpoint.save_top_k", "0", "--checkpoint.save_last", "false",
        "--learning_curve.filename", "", "--progress_bar.log_seconds", "1e9",
    ]
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)
    rate = re.findall(r"\| (\d+(?:\.\d+)?) steps/s \|", out.stdout)
    val = re.findall(r"val/return (-?\d+(?:\.\d+)?)", out.stdout)
    if out.returncode != 0 or not rate or not val:
        raise RuntimeError(f"run failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return {"steps": steps, "updates_per_sec": float(rate[-1]), "transitions_per_sec": float(rate[-1]) / utd,
            "val_return": float(val[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--transitions", type=int, default=10000, help="env transitions after the warm-up, per row")
    args = parser.parse_args()
    print(f"Pendulum-v1, {args.transitions} transitions after 1000 warm-up steps, 256-256, batch 256\n")
    print("| `num_envs` | `utd_ratio` | training steps (updates) | updates/s | transitions/s | final eval return |")
    print("|---:|---:|---:|---:|---:|---:|")
    for num_envs, utd in ROWS:
        r = run(num_envs, utd, args.transitions)
        print(f"| {num_envs} | {utd} | {r['steps']} | {r['updates_per_sec']:.0f} | {r['transitions_per_sec']:.0f} | "
              f"{r['val_return']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
