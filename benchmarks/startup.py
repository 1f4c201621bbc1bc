"""Start-up time of the command line: how long a user waits for ``--help`` or an error.

Each command is a fresh interpreter; this checkout and ``--baseline DIR`` (another checkout, e.g.
``git worktree add /tmp/base <commit>``) alternate, ``--repeats`` times, and the table gives the
median wall time of each.

    python benchmarks/startup.py --repeats 5 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: what a user types -> the arguments of ``python -m td3_lightning``
COMMANDS: dict[str, list[str]] = {
    "`--help` (the subcommands)": ["--help"],
    "`fit --help`": ["fit", "--help"],
    "`fit --help full`": ["fit", "--help", "full"],
    "an unknown subcommand (`fitt`)": ["fitt"],
    "`export --help`": ["export", "--help"],
    "`export` of a missing checkpoint": ["export", "--ckpt_path", "missing.ckpt", "--out", "a.pt"],
    "`tune --help`": ["tune", "--help"],
    "a bad value (`fit --model.gamma 2`)": ["fit", "--config", "pendulum.yaml", "--model.gamma", "2"],
}


def seconds(checkout: Path, args: list[str]) -> float:
    """Wall time of ``python -m td3_lightning <args>`` with ``checkout``'s package, in an empty folder."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "td3_lightning", *args], cwd=cwd, env=env, capture_output=True,
                       check=False, timeout=300)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="another checkout's root folder, timed alternately")
    args = parser.parse_args()
    checkouts = {"this checkout": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeats):
        for what, command in COMMANDS.items():
            for name, checkout in checkouts.items():
                times.setdefault((what, name), []).append(seconds(checkout, command))
    names = list(checkouts)
    print("| command | " + " | ".join(f"{n} (s)" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for what in COMMANDS:
        print(f"| {what} | " + " | ".join(f"{statistics.median(times[what, n]):.2f}" for n in names) + " |")


if __name__ == "__main__":
    main()
