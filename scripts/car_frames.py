"""A strip of frames from one drive of a car policy, for the README.

    python scripts/car_frames.py --ckpt_path td3_lightning/checkpoints/car_random_tracks.ckpt --seed 0 --out docs/car_drive.png
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from PIL import Image

from td3_lightning import TD3
from td3_lightning.evaluation import run_episode
from td3_lightning.envs import make_env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt_path", required=True)
    parser.add_argument("--seed", type=int, default=0, help="env seed (the track)")
    parser.add_argument("--frames", type=int, default=4, help="frames in the strip")
    parser.add_argument("--width", type=int, default=300, help="width of each frame in pixels")
    parser.add_argument("--out", default="car_drive.png")
    args = parser.parse_args()

    model = TD3.load_from_checkpoint(args.ckpt_path, map_location="cpu").eval()
    # a 2-action policy drives with action_mode steer_throttle, a 3-action one with CarRacing's actions
    mode = "steer_throttle" if len(model.hparams.action_low) == 2 else "carracing"
    env = make_env("CarRacingState-v0", {"action_repeat": 2, "action_mode": mode}, render_mode="rgb_array")

    def policy(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model.policy(torch.as_tensor(obs).unsqueeze(0))[0].numpy()

    frames: list[np.ndarray] = []
    stats = run_episode(env, policy, args.seed, frames)
    picks = np.linspace(len(frames) // 10, len(frames) - 1, args.frames).astype(int)
    tiles = [Image.fromarray(frames[i]) for i in picks]
    height = int(tiles[0].height * args.width / tiles[0].width)
    strip = Image.new("RGB", (args.width * len(tiles), height))
    for k, tile in enumerate(tiles):
        strip.paste(tile.resize((args.width, height)), (k * args.width, 0))
    strip.save(args.out)
    print(f"seed {args.seed}: return {stats['return']:.1f} in {int(stats['length'])} steps; frames {picks.tolist()} -> {args.out}")


if __name__ == "__main__":
    main()
