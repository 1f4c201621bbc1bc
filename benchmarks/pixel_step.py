"""Cost of one TD3 training step from pixels: the shared-encoder critic vs a privileged critic.

Times ``TD3.td3_update`` (critic step, and the actor step and Polyak update every
``policy_freq`` steps) on random replay batches, no env and no Lightning loop, for both
architectures side by side in one process, alternating ``--rounds`` times; prints the median
training steps/s of each and the ratio.

    python benchmarks/pixel_step.py --size 84 --batch 256
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from td3_lightning.envs.car_racing import N_FEATURES
from td3_lightning.module import TD3

ACTION = ([-1.0, -1.0], [1.0, 1.0])
STATE_DIM = N_FEATURES  # CarRacingState-v0's features, the privileged observation of CarRacingPixels-v0


def make(size: int, privileged: bool, random_shift: int) -> TD3:
    model = TD3([4, size, size], *ACTION, critic_obs_shape=[STATE_DIM] if privileged else None,
                random_shift=random_shift)
    model.stepper.optimizers = [_Plain(o) for o in model.configure_optimizers()]
    model.stepper.direct = True
    model.stepper.check_each_loss = False
    return model


class _Plain:
    """What ``Stepper.step`` calls on a LightningOptimizer, without a Trainer."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)


def batch(size: int, n: int) -> dict[str, torch.Tensor]:
    frames = lambda: torch.randint(0, 256, (n, 4, size, size), dtype=torch.uint8)  # noqa: E731
    return {"obs": frames(), "next_obs": frames(), "action": torch.rand(n, 2) * 2 - 1, "reward": torch.randn(n),
            "terminated": torch.zeros(n, dtype=torch.bool), "critic_obs": torch.randn(n, STATE_DIM),
            "next_critic_obs": torch.randn(n, STATE_DIM)}


def steps_per_second(model: TD3, data: dict[str, torch.Tensor], steps: int) -> float:
    if model.hparams.critic_obs_shape is None:  # the critics see the frames
        data = {k: v for k, v in data.items() if "critic" not in k}
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for i in range(steps):
        one = model.extensions.transform(data, generator)
        model.td3_update(one, torch.randn(data["action"].shape), update_actor=i % 2 == 1)
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=84, help="frame height and width")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20, help="training steps per timing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--random_shift", type=int, default=0, help="DrQ shift (pixels) for both")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = batch(args.size, args.batch)
    models = {"shared encoder (today)": make(args.size, False, args.random_shift),
              "privileged critic": make(args.size, True, args.random_shift)}
    rates: dict[str, list[float]] = {name: [] for name in models}
    for model in models.values():
        steps_per_second(model, data, 2)  # first-call costs
    for _ in range(args.rounds):
        for name, model in models.items():
            rates[name].append(steps_per_second(model, data, args.steps))
    median = {name: statistics.median(r) for name, r in rates.items()}
    print(f"{args.size}x{args.size}, batch {args.batch}, {torch.get_num_threads()} thread(s), "
          f"random_shift {args.random_shift}")
    for name, value in median.items():
        print(f"  {name:24s} {value:7.1f} training steps/s  ({', '.join(f'{r:.1f}' for r in rates[name])})")
    print(f"  ratio {median['privileged critic'] / median['shared encoder (today)']:.2f}x")


if __name__ == "__main__":
    main()
