"""Env steps per second of the official TD7 implementation (github.com/sfujim/TD7, commit c1c280d; not part of this
repository: clone it elsewhere and pass its folder) on a gymnasium env, for the side-by-side figure of
``compile_mode cudagraphs`` with the TD7 set (``benchmarks/README.md``).

The loop is that of TD7's ``main.py`` (``train_online`` with its default policy checkpoints: random actions first,
then one ``train()`` per env step, run in a burst at each episode's end by ``maybe_train_and_checkpoint``), written
for gymnasium's reset and step. Timed: from the end of the random steps to the end of the last whole episode, so
every timed env step has its update. TD7 picks CUDA when torch sees it.

    python benchmarks/td7_official.py --td7 /path/to/TD7 --env HalfCheetah-v5 --steps 3000 --warmup 1000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--td7", required=True,
                        help="folder of a checkout of github.com/sfujim/TD7 (TD7.py, buffer.py)")
    parser.add_argument("--env", default="HalfCheetah-v5", help="gymnasium env id")
    parser.add_argument("--steps", type=int, default=3000, help="timed env steps (rounded up to whole episodes)")
    parser.add_argument("--warmup", type=int, default=1000, help="random-action env steps before the timed ones")
    args = parser.parse_args()
    folder = Path(args.td7)
    if not (folder / "TD7.py").is_file() or not (folder / "buffer.py").is_file():
        sys.exit(f"error: --td7 {folder} holds no TD7.py and buffer.py; pass a checkout of github.com/sfujim/TD7")
    sys.path.insert(0, str(folder))
    import torch
    import TD7  # noqa: E402 - from the folder given

    env = gym.make(args.env)
    state_dim, action_dim = env.observation_space.shape[0], env.action_space.shape[0]
    agent = TD7.Agent(state_dim, action_dim, float(env.action_space.high[0]))
    sync = torch.cuda.synchronize if agent.device.type == "cuda" else (lambda: None)
    state, _ = env.reset(seed=0)
    episode_return, episode_steps, t, start, timed, allow_train = 0.0, 0, 0, 0.0, 0, False
    while timed < args.steps:
        action = agent.select_action(np.array(state)) if allow_train else env.action_space.sample()
        next_state, reward, terminated, truncated, _ = env.step(action)
        episode_return, episode_steps, t = episode_return + float(reward), episode_steps + 1, t + 1
        agent.replay_buffer.add(state, action, next_state, reward, float(terminated))
        state = next_state
        if terminated or truncated:
            if allow_train:
                agent.maybe_train_and_checkpoint(episode_steps, episode_return)
                timed += episode_steps
            elif t >= args.warmup:  # as TD7's main.py: training starts with the next episode
                allow_train = True
                sync()
                start = time.perf_counter()
            state, _ = env.reset()
            episode_return, episode_steps = 0.0, 0
    sync()
    seconds = time.perf_counter() - start
    print(json.dumps({"env": args.env, "device": str(agent.device), "timed_env_steps": timed,
                      "steps_per_sec": timed / seconds}))


if __name__ == "__main__":
    main()
