"""A strip of frames from one drive of a car policy, for the README.

    python scripts/car_frames.py --ckpt_path td3_lightning/checkpoints/car_random_tracks.ckpt \\
        --seed 0 --out docs/car_drive.png

The drive is on the env the checkpoint was trained on (its id and evaluation env_kwargs, kept in the checkpoint).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt_path", required=True, help="a td3_lightning checkpoint of a car driver (.ckpt)")
    parser.add_argument("--seed", type=int, default=0, help="env seed (the track; >= 0)")
    parser.add_argument("--frames", type=int, default=4, help="frames in the strip (>= 1)")
    parser.add_argument("--width", type=int, default=300, help="width of each frame in pixels (>= 16)")
    parser.add_argument("--out", default="car_drive.png", help="the image to write (.png or .jpg)")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """One-line errors for bad arguments, before anything is driven; the env ``(id, kwargs)`` to drive."""
    from td3_lightning.checkpointing import check_checkpoint
    from td3_lightning.errors import UserInputError, check_checkpoint_file
    from td3_lightning.registration import ENTRY_POINTS

    for name, least in (("seed", 0), ("frames", 1), ("width", 16)):
        if getattr(args, name) < least:
            raise UserInputError(f"--{name} {getattr(args, name)}: give at least {least}")
    out = Path(args.out).expanduser()
    if out.suffix.lower() not in IMAGE_SUFFIXES:
        raise UserInputError(f"--out {args.out}: give an image file name ending in {' or '.join(IMAGE_SUFFIXES)}")
    if out.is_dir():
        raise UserInputError(f"--out {args.out} is a folder; give an image file name in it")
    if not out.parent.is_dir():
        raise UserInputError(f"--out {args.out}: the folder {out.parent} does not exist; make it first")
    if out.exists() and not args.overwrite:
        raise UserInputError(f"--out {args.out} exists; give another name or add --overwrite")
    check_checkpoint_file(args.ckpt_path, "--ckpt_path", "it takes a .ckpt file of a car driver", run_names=False)
    facts = check_checkpoint(args.ckpt_path)
    env_id, env_kwargs = facts["env"]
    if env_id is None:  # an early checkpoint that does not say: the state env, with the actions its policy has
        mode = "steer_throttle" if facts["action_shape"] == (2,) else "carracing"
        env_id, env_kwargs = "CarRacingState-v0", {"action_repeat": 2, "action_mode": mode}
    if env_id not in ENTRY_POINTS:
        raise UserInputError(f"{args.ckpt_path} was trained on {env_id}; car_frames drives CarRacing tracks: give a "
                             f"checkpoint of {' or '.join(ENTRY_POINTS)}")
    return env_id, dict(env_kwargs or {})


def main(argv: list[str] | None = None) -> None:
    from td3_lightning.errors import UserInputError

    args = parse_args(argv)
    try:
        env_id, env_kwargs = check_args(args)
    except UserInputError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)

    import numpy as np
    import torch
    from PIL import Image

    from td3_lightning import TD3
    from td3_lightning.envs import make_env
    from td3_lightning.evaluation import run_episode

    model = TD3.load_from_checkpoint(args.ckpt_path, map_location="cpu").eval()
    env = make_env(env_id, env_kwargs, render_mode="rgb_array")

    def policy(obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model.policy(torch.as_tensor(obs).unsqueeze(0))[0].numpy()

    frames: list[np.ndarray] = []
    stats = run_episode(env, policy, args.seed, frames)
    env.close()
    picks = np.linspace(len(frames) // 10, len(frames) - 1, args.frames).astype(int)
    tiles = [Image.fromarray(frames[i]) for i in picks]
    height = int(tiles[0].height * args.width / tiles[0].width)
    strip = Image.new("RGB", (args.width * len(tiles), height))
    for k, tile in enumerate(tiles):
        strip.paste(tile.resize((args.width, height)), (k * args.width, 0))
    strip.save(Path(args.out).expanduser())
    print(f"seed {args.seed}: return {stats['return']:.1f} in {int(stats['length'])} steps; frames {picks.tolist()} "
          f"-> {args.out}")


if __name__ == "__main__":
    main()
