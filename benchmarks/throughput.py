"""Throughput: td3_lightning (its CLI) vs Stable-Baselines3's TD3 vs a plain PyTorch loop.

Identical settings for all three: LunarLander-v3 (continuous), 256-256 networks, batch 256,
one critic update per env step, policy delay 2, 1000 warm-up steps excluded from the timing.
Each run is a fresh subprocess; the three alternate, ``--repeats`` times; the table gives
the median env steps/s of each, the ratios, and the time split of one training step.

    pip install -c constraints.txt -e ".[bench]"
    python benchmarks/throughput.py --steps 3000 --repeats 3

td3_lightning runs with ``lunar.yaml``'s ``data.steps_per_batch 8`` (eight training steps per
Lightning batch; the same training, bit for bit); ``--ablations`` adds one step per batch.
``--options`` adds td3_lightning with each option beyond the paper switched on (its cost per step).
``--baseline DIR`` adds td3_lightning from another checkout (e.g. ``git worktree add /tmp/base <commit>``),
run alternately with this one, to compare two versions side by side in one run. ``--td7`` adds td3_lightning
with every option of the TD7 configs (and the baseline's, with ``--baseline``).
``--device cuda`` adds td3_lightning with the losses compiled (``compile_mode reduce-overhead``) and with the
update captured as CUDA graphs (``compile_mode cudagraphs``) beside eager and the plain loop.
``--configs car walker2d halfcheetah_td7`` times those configs instead, eager against ``cudagraphs`` on a GPU and
against ``trainer.precision bf16-mixed`` on the CPU (``--config-steps``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

WARMUP = 1000
ENV_ID = "LunarLander-v3"


class RunRefused(Exception):
    """td3_lightning's command line refused the run with one ``error:`` line."""


# ----------------------------------------------------------------------------- the three runs
def run_td3_lightning(steps: int, device: str, extra: tuple[str, ...] = (), hooked: bool = False,
                      checkout: str | None = None, config: str = "lunar.yaml") -> dict[str, float]:
    """The normal CLI path; the progress bar's final rate excludes the warm-up.

    ``extra``: more CLI arguments; ``hooked``: backward passes and optimizer steps through
    Lightning's hooks (``stepping.direct_update_possible`` patched to False) instead of around them; ``checkout``: the
    td3_lightning of another source tree (its root folder) instead of this one; ``config``: a bundled config."""
    args = [
        "fit", "--config", config,
        "--trainer.max_steps", str(steps), "--data.warmup_steps", str(WARMUP), "--trainer.limit_val_batches", "0",
        "--trainer.logger", "false", "--checkpoint.save_top_k", "0", "--checkpoint.save_last", "false",
        "--trainer.callbacks", "null", "--learning_curve.filename", "", "--selection.episodes", "0",
        "--data.tensorboard_video_every", "0",
        "--trainer.accelerator", device, "--progress_bar.log_seconds", "1", *extra,
    ]
    launcher = (  # hooked: the path through Lightning's hooks forced (TD3.direct_update in trees before 4ce04da)
        "import sys; from td3_lightning import stepping; from td3_lightning.module import TD3; "
        "from td3_lightning.cli import main; "
        + ("stepping.direct_update_possible = lambda trainer, module: False; TD3.direct_update = False; "
           if hooked else "")
        + "sys.argv = ['td3_lightning', *sys.argv[1:]]; main()"
    )
    env = os.environ.copy()
    env["PYTHONUNBUFFERED"] = "1"  # progress lines arrive as they are printed, to be timed here
    if checkout is not None:
        env["PYTHONPATH"] = os.path.abspath(checkout) + os.pathsep + env.get("PYTHONPATH", "")
    marks: list[tuple[float, int, float]] = []  # (arrival time, training step, rate so far) of each progress line
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as cwd:  # the CLI saves its config.yaml in the cwd without a logger
        # stderr joins stdout: read one pipe to its end, so a chatty stderr cannot fill its pipe and stall the run
        proc = subprocess.Popen([sys.executable, "-c", launcher, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, cwd=cwd, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            progress = re.search(r"step (\d+)/\d+ \| (\d+(?:\.\d+)?) steps/s", line)
            if progress:
                marks.append((time.perf_counter(), int(progress.group(1)), float(progress.group(2))))
        proc.wait()
    refused = [line.strip() for line in lines if line.startswith("error: ")]
    if refused:  # the command line's one-line refusal of an option
        raise RunRefused(refused[-1])
    if proc.returncode != 0 or not marks:
        raise RuntimeError(f"td3_lightning run failed:\n{''.join(lines)[-5000:]}")
    # steady state: the steps of the run's second half over their time, so a compile in the first
    # steps is not counted; "with compile" is the rate over all timed steps, as the progress line gives it
    end_time, end_step, overall = marks[-1]
    half = next(((t, n) for t, n, _ in marks if n >= steps // 2), None)
    steady = overall
    if half is not None and end_step > half[1] and end_time > half[0]:
        steady = (end_step - half[1]) / (end_time - half[0])
    return {"steps_per_sec": steady, "with compile": overall}


def run_sb3(steps: int, device: str) -> dict[str, float]:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import TD3 as SB3TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    env = gym.make(ENV_ID, continuous=True)
    marks: dict[str, float] = {}

    class Clock(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps == WARMUP:
                marks["start"] = time.perf_counter()
            return True

    n = env.action_space.shape[0]
    model = SB3TD3(
        "MlpPolicy", env, learning_starts=WARMUP, batch_size=256, train_freq=1, gradient_steps=1, policy_delay=2,
        policy_kwargs={"net_arch": [256, 256]}, action_noise=NormalActionNoise(np.zeros(n), 0.1 * np.ones(n)),
        buffer_size=100_000, device=device, seed=0, verbose=0,
    )
    model.learn(total_timesteps=WARMUP + steps, callback=Clock())
    return {"steps_per_sec": steps / (time.perf_counter() - marks["start"])}


def run_plain(steps: int, device: str) -> dict[str, float]:
    """The same math as td3_lightning's module, in a hand-written loop, timed per phase."""
    import numpy as np
    import torch

    from td3_lightning.envs import make_env
    from td3_lightning.module import TD3
    from td3_lightning.replay import ReplayBuffer

    torch.manual_seed(0)
    torch.set_flush_denormal(True)  # as td3_lightning's default model.flush_denormal
    dev = torch.device(device)
    env = make_env(ENV_ID, {"continuous": True})
    low, high = env.action_space.low, env.action_space.high
    model = TD3([env.observation_space.shape[0]], low.tolist(), high.tolist()).to(dev)
    buf = ReplayBuffer(100_000, env.observation_space.shape, len(low), device=dev)
    copt = torch.optim.Adam(model.critic.parameters(), lr=3e-4, fused=True)  # as td3_lightning
    aopt = torch.optim.Adam(model.actor.parameters(), lr=3e-4, fused=True)
    gen = torch.Generator(device=dev).manual_seed(0)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    split = dict.fromkeys(("env step", "action selection", "sampling", "critic update", "actor update"), 0.0)

    def env_step(action: np.ndarray) -> None:
        nonlocal obs
        nxt, r, term, trunc, _ = env.step(action)
        buf.add(obs, action, r, nxt, term)
        obs = env.reset()[0] if (term or trunc) else nxt

    for _ in range(WARMUP):
        env_step(rng.uniform(low, high).astype(np.float32))
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    start = time.perf_counter()
    for i in range(steps):
        t0 = time.perf_counter()
        with torch.no_grad():
            a = model.actor(torch.as_tensor(obs, device=dev).unsqueeze(0))[0].cpu().numpy()
        a = np.clip(a + rng.normal(0, 0.1, a.shape) * (high - low) / 2, low, high).astype(np.float32)
        t1 = time.perf_counter()
        env_step(a)
        t2 = time.perf_counter()
        batch = buf.sample(256, gen)
        sync()
        t3 = time.perf_counter()
        loss, _, _ = model.critic_loss(batch)
        copt.zero_grad(set_to_none=True)
        loss.backward()
        copt.step()
        sync()
        t4 = time.perf_counter()
        if (i + 1) % 2 == 0:
            loss_pi = model.actor_loss(batch)
            aopt.zero_grad(set_to_none=True)
            loss_pi.backward()
            aopt.step()
            model.update_targets()
            sync()
        t5 = time.perf_counter()
        for key, dt in zip(split, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            split[key] += dt
    total = time.perf_counter() - start
    return {"steps_per_sec": steps / total, **{f"ms {k}": 1000 * v / steps for k, v in split.items()}}


RUNNERS = {"td3_lightning": run_td3_lightning, "sb3": run_sb3, "plain": run_plain}
BASELINE = "td3_lightning (baseline checkout)"
# --ablations: td3_lightning with one of its speed-ups switched off
ABLATIONS = {
    "td3_lightning, steps_per_batch 1": lambda n, d: run_td3_lightning(n, d, ("--data.steps_per_batch", "1")),
    "td3_lightning, no flush_denormal": lambda n, d: run_td3_lightning(n, d, ("--model.flush_denormal", "false")),
    "td3_lightning, hooked update": lambda n, d: run_td3_lightning(n, d, hooked=True),
    "td3_lightning, compile_mode default": lambda n, d: run_td3_lightning(n, d, ("--model.compile_mode", "default")),
    # on a GPU: the losses as CUDA graphs (on the CPU the same as default)
    "td3_lightning, compile_mode reduce-overhead": lambda n, d: run_td3_lightning(
        n, d, ("--model.compile_mode", "reduce-overhead")),
}

# --device cuda: the compiled losses and the captured update beside eager
GPU_MODES = {
    "td3_lightning, compile_mode reduce-overhead": ABLATIONS["td3_lightning, compile_mode reduce-overhead"],
    "td3_lightning, compile_mode cudagraphs": lambda n, d: run_td3_lightning(
        n, d, ("--model.compile_mode", "cudagraphs")),
}
# --configs: reference configs, eager against the captured update (GPU) or against bf16 autocast (CPU)
CONFIGS = ("car", "walker2d", "halfcheetah_td7", "ant_td7", "humanoid_td7")
CONFIG_MODES = {"eager": (), "cudagraphs": ("--model.compile_mode", "cudagraphs"),
                "bf16-mixed": ("--trainer.precision", "bf16-mixed")}
CPU_CONFIG_MODES, GPU_CONFIG_MODES = ("eager", "bf16-mixed"), ("eager", "cudagraphs")
CONFIG_RUNS = {
    f"{config}.yaml, {mode}": (lambda n, d, c=config, a=args: run_td3_lightning(n, d, a, config=f"{c}.yaml"))
    for config in CONFIGS for mode, args in CONFIG_MODES.items()
}

# --options: td3_lightning with one of the options beyond the paper switched on (docs/options.md)
OPTIONS = {
    "td3_lightning + layer_norm": lambda n, d: run_td3_lightning(n, d, ("--model.layer_norm", "true")),
    "td3_lightning + normalize_obs": lambda n, d: run_td3_lightning(n, d, ("--model.normalize_obs", "true")),
    "td3_lightning + SALE (embedding_dim 256)": lambda n, d: run_td3_lightning(
        n, d, ("--model.embedding_dim", "256", "--model.target_update_every", "250")),
    "td3_lightning + LAP sampler": lambda n, d: run_td3_lightning(n, d, ("--data.sampler", "lap")),
    "td3_lightning + policy_checkpoints": lambda n, d: run_td3_lightning(n, d, ("--model.policy_checkpoints", "true")),
    "td3_lightning + critic_bins 101 (HL-Gauss)": lambda n, d: run_td3_lightning(
        n, d, ("--model.critic_bins", "101", "--model.critic_range", "[-300, 300]")),
    "td3_lightning + critic_bins 101, critic_range auto": lambda n, d: run_td3_lightning(
        n, d, ("--model.critic_bins", "101", "--model.critic_range", "auto")),
    "td3_lightning + critic_hidden_dims [1024, 1024]": lambda n, d: run_td3_lightning(
        n, d, ("--model.critic_hidden_dims", "[1024, 1024]")),
    "td3_lightning + CrossQ (batch_renorm, no target networks)": lambda n, d: run_td3_lightning(
        n, d, ("--model.batch_renorm", "true", "--model.target_networks", "false")),
    "td3_lightning + TD7 set (SALE, LAP)": lambda n, d: run_td3_lightning(
        n, d, ("--model.embedding_dim", "256", "--model.target_update_every", "250", "--data.sampler", "lap")),
}
#: --td7: every option of the TD7 configs (*_td7.yaml) on LunarLander, here and (with --baseline) in the baseline
TD7_SET = ("--model.embedding_dim", "256", "--model.target_update_every", "250", "--model.value_clipping", "true",
           "--model.actor_q", "mean", "--model.policy_checkpoints", "true", "--data.sampler", "lap")
TD7 = "td3_lightning + the whole TD7 set"
BASELINE_TD7 = "td3_lightning (baseline checkout) + the whole TD7 set"


# ----------------------------------------------------------------------------- driver
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3000,
                        help="timed training steps per run (after the warm-up); td3_lightning's rate is that of "
                        "the second half, so a compile in the first steps is not counted")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds of the three runs")
    parser.add_argument("--device", default="cpu",
                        help="cpu or cuda (cuda adds td3_lightning with compile_mode reduce-overhead and cudagraphs)")
    parser.add_argument("--skip", nargs="*", default=[], choices=list(RUNNERS), help="runs to leave out")
    parser.add_argument("--ablations", action="store_true",
                        help="also run td3_lightning with one training step per batch, without flush_denormal, "
                        "with Lightning's hooked update and with compiled losses (default and reduce-overhead)")
    parser.add_argument("--options", action="store_true",
                        help="also run td3_lightning with each option beyond the paper (docs/options.md) switched on")
    parser.add_argument("--td7", action="store_true",
                        help="also run td3_lightning with the whole TD7 set (and the baseline's, with --baseline)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also run td3_lightning from the source tree DIR (another commit's checkout)")
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, metavar="CONFIG",
                        help=f"instead: time these bundled configs ({', '.join(CONFIGS)}), eager against "
                        "compile_mode cudagraphs (on --device cuda) or trainer.precision bf16-mixed (on the CPU)")
    parser.add_argument("--config-steps", type=int, default=3000, help="timed training steps of each --configs run")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: one run
    args = parser.parse_args()
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(f"error: --device {args.device} needs a CUDA device, and torch sees none "
                  f"(torch {torch.__version__}); use --device cpu", file=sys.stderr)
            sys.exit(2)
    runners = {**RUNNERS, **ABLATIONS, **OPTIONS, **GPU_MODES, **CONFIG_RUNS}
    runners[TD7] = lambda n, d: run_td3_lightning(n, d, TD7_SET)
    if args.baseline:
        runners[BASELINE] = lambda n, d: run_td3_lightning(n, d, checkout=args.baseline)
        runners[BASELINE_TD7] = lambda n, d: run_td3_lightning(n, d, TD7_SET, checkout=args.baseline)

    if args.one:
        try:
            print(json.dumps(runners[args.one](args.steps, args.device)))
        except RunRefused as refused:
            print(str(refused), file=sys.stderr)
            sys.exit(2)
        return

    if args.configs:
        modes = GPU_CONFIG_MODES if args.device.startswith("cuda") else CPU_CONFIG_MODES  # cudagraphs needs CUDA
        names = [f"{config}.yaml, {mode}" for config in args.configs for mode in modes]
    else:
        names = [n for n in RUNNERS if n not in args.skip] + (list(ABLATIONS) if args.ablations else [])
        names += list(GPU_MODES) if args.device.startswith("cuda") else []
        names += list(OPTIONS) if args.options else []
        names += [BASELINE] if args.baseline else []
        names += ([TD7] + ([BASELINE_TD7] if args.baseline else [])) if args.td7 else []
        names = list(dict.fromkeys(names))  # --ablations on cuda names reduce-overhead twice
    steps = args.config_steps if args.configs else args.steps
    results: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for r in range(args.repeats):
        for name in names:
            cmd = [sys.executable, __file__, "--one", name, "--steps", str(steps), "--device", args.device,
                   *(["--baseline", args.baseline] if args.baseline else [])]
            out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
            if out.returncode == 2 and out.stderr.startswith("error: "):
                sys.exit(f"{name}: {out.stderr.strip()}")
            if out.returncode != 0:
                sys.exit(f"{name} failed:\n{out.stderr[-3000:]}")
            res = json.loads(out.stdout.strip().splitlines()[-1])
            results[name].append(res)
            extra = f" ({res['with compile']:.1f} with the compile)" if "with compile" in res else ""
            print(f"round {r + 1}: {name:34s} {res['steps_per_sec']:8.1f} steps/s{extra}", file=sys.stderr)

    med = {n: statistics.median(x["steps_per_sec"] for x in v) for n, v in results.items()}
    device = _device_name(args.device)
    if args.configs:
        print(f"\nReference configs, {steps} timed training steps after {WARMUP} warm-up steps, median of "
              f"{args.repeats}, {device}\n")
        other = modes[1]
        print(f"| config | eager, 32-true (env steps/s) | {other} | {other} / eager | all runs |")
        print("|---|---:|---:|---:|---|")
        for config in args.configs:
            eager, fast = med[f"{config}.yaml, eager"], med[f"{config}.yaml, {other}"]
            runs = "; ".join(", ".join(f"{x['steps_per_sec']:.1f}" for x in results[f"{config}.yaml, {mode}"])
                             for mode in modes)
            print(f"| `{config}.yaml` | {eager:.1f} | {fast:.1f} | {fast / eager:.2f}x | {runs} |")
        return
    print(f"\n{ENV_ID} (continuous), 256-256, batch 256, 1 update per env step, {args.steps} timed steps, "
          f"median of {args.repeats}, {device}\n")
    print("| run | env steps/s (median) | all runs |\n|---|---:|---|")
    for n in names:
        runs = ", ".join(f"{x['steps_per_sec']:.1f}" for x in results[n])
        print(f"| {n} | {med[n]:.1f} | {runs} |")
    if BASELINE in med and "td3_lightning" in med:
        print(f"\ntd3_lightning / {BASELINE}: {med['td3_lightning'] / med[BASELINE]:.3f}x")
    ours = [n for n in med if n.startswith("td3_lightning")]
    for n in ours:
        others = ("sb3", "plain", *(("td3_lightning",) if n != "td3_lightning" else ()))
        ratios = [f"/ {other}: {med[n] / med[other]:.2f}x" for other in others if other in med]
        if ratios:
            print(f"\n{n} " + ", ".join(ratios), end="")
    print()
    if "plain" in results:
        keys = [k for k in results["plain"][0] if k.startswith("ms ")]
        split = {k[3:]: statistics.median(x[k] for x in results["plain"]) for k in keys}
        print("\nTime split of one training step (ms, median; from the plain loop):\n")
        print("| phase | ms |\n|---|---:|")
        for k, v in split.items():
            print(f"| {k} | {v:.3f} |")
        for n in (n for n in ours if "compile_mode" not in n):  # a compiled update is not the plain loop's math
            overhead = 1000 / med[n] - 1000 / med["plain"]
            share = overhead / (1000 / med[n])
            print(f"| framework overhead ({n} - plain) | {overhead:.3f} ({100 * share:.1f}% of a step) |")


def _device_name(device: str) -> str:
    """``device`` and, for CUDA, the GPU's name and torch's versions."""
    if not device.startswith("cuda"):
        return f"device {device}"
    import torch

    return f"device {device} ({torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda})"


if __name__ == "__main__":
    main()
