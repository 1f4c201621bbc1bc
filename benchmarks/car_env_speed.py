"""Env steps per second: CarRacingState-v0 (feature vector) vs CarRacing-v3 (pixels).

Both envs are driven by the same random-action policy with the same seeds (the
action sequence of a round is drawn from one seeded generator and reused for
both envs; episodes are reset with seeds 0, 1, 2, ...).  The two envs are
timed alternately for ``--rounds`` rounds and the median steps/s of each is
reported as a markdown table.

    python benchmarks/car_env_speed.py --steps 3000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import gymnasium as gym
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from td3_lightning.registration import register_envs  # noqa: E402


def random_actions(n: int, seed: int) -> np.ndarray:
    """Uniform random actions in CarRacing's Box: steer -1..1, gas 0..1, brake 0..1."""
    rng = np.random.default_rng(seed)
    low = np.array([-1.0, 0.0, 0.0])
    high = np.array([1.0, 1.0, 1.0])
    return rng.uniform(low, high, size=(n, 3)).astype(np.float32)


def time_env(env_id: str, actions: np.ndarray, **kwargs) -> float:
    """Steps/s of ``env_id`` over ``actions`` (resets, with seeds 0, 1, ..., are timed too)."""
    env = gym.make(env_id, **kwargs)
    episode = 0
    env.reset(seed=episode)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            episode += 1
            env.reset(seed=episode)
    elapsed = time.perf_counter() - start
    env.close()
    return len(actions) / elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000, help="env steps per env per round (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per env (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random-action sequence")
    args = parser.parse_args(argv)

    register_envs()
    rates: dict[str, list[float]] = {"CarRacingState-v0": [], "CarRacing-v3": []}
    for r in range(args.rounds):
        actions = random_actions(args.steps, args.seed + r)
        for env_id in rates:
            rate = time_env(env_id, actions)
            rates[env_id].append(rate)
            print(f"round {r + 1}/{args.rounds} {env_id:18s} {rate:9.1f} steps/s", file=sys.stderr)

    fast = statistics.median(rates["CarRacingState-v0"])
    slow = statistics.median(rates["CarRacing-v3"])
    print()
    print(f"{args.steps} random-action steps per env per round, {args.rounds} alternating rounds, median:")
    print()
    print("| env | steps/s (median) |")
    print("|---|---:|")
    print(f"| CarRacingState-v0 (features) | {fast:,.0f} |")
    print(f"| CarRacing-v3 (pixels) | {slow:,.0f} |")
    print(f"| ratio | {fast / slow:.1f}x |")


if __name__ == "__main__":
    main()
