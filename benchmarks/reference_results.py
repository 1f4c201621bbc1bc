"""Results on the reference environments: train several seeds with the project's own configs,
test each final policy on 100 deterministic episodes, and turn the runs into a table and a plot.

    python benchmarks/reference_results.py run --config pendulum.yaml --seeds 0 1 2   # train + test
    python benchmarks/reference_results.py table                                    # markdown table + plot
    python benchmarks/reference_results.py best --name pendulum --seeds 0 1 2       # test the best validated, too
    python benchmarks/reference_results.py rows --name pendulum                     # its per-seed rows (markdown)
    python benchmarks/reference_results.py compare --panel "Hopper-v5=hopper,hopper_td7" --max_steps 300000 \
        --env_steps --out hopper.png                        # named summaries side by side, by env steps
    python benchmarks/reference_results.py run --config walker2d.yaml --seeds 0 \
        --name walker2d_layer_norm --model.layer_norm true     # a variant: its own folder and summaries

Options after the known ones go to ``fit`` (the model's are then read back from the checkpoint by ``test``); the
``--data.*`` ones go to the tests too, so a variant's env (``--data.env_id``) is the one its policies are tested on.

Runs live in ``runs/<name>/seed<S>/`` (``--name``, by default the config's name; the usual
``lightning_logs/version_N`` inside). The ``test`` of the final ``last.ckpt`` writes ``test_results.json``
into its own version folder.

``run`` can be stopped at any time and run again with the same arguments: a seed with a test result
is skipped, a seed with a ``last.ckpt`` but no test result continues its training from there
(``fit --ckpt_path last``) and is then tested, and any other seed starts fresh. So a
1M-step budget can be spread over several sittings. ``table`` lists unfinished seeds separately,
with the last step they were evaluated at. A seed whose summary exists but whose run is not under ``runs/``
(a committed result) is trained again only with ``--overwrite``; ``compare`` replaces its ``--out`` only with
``--overwrite`` too.

A tested seed is also summarised in ``benchmarks/reference_runs/<name>/seed<S>.json`` (its
test results, evaluation curve, training hours and the machine), a few kilobytes meant to be committed:
``table`` builds the table and the plot from these summaries, so they outlive the ``runs/`` folder
(run output, never committed). ``table`` first summarises any tested seed under ``runs/`` that has none.

``best`` tests, beside the final policy, each tested seed's checkpoint with the run's best ``val/return`` (what
``python -m td3_lightning test`` plays by default), on the same test episodes, in ``runs/<name>/seed<S>/best_test/``,
and adds its results to the seed's summary as ``test_best``; ``table`` then lists them in a second table, for the
configs whose every tested seed has one.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path("runs")
SUMMARIES = Path(__file__).resolve().parent / "reference_runs"
PACKAGE_CONFIGS = Path(__file__).resolve().parents[1] / "td3_lightning" / "configs"
# The targets of the README's results table, drawn as dashed lines in the plot.
TARGETS = {
    "pendulum": -160, "lunar": 250, "bipedal": 310, "walker2d": 4700, "walker2d_paper": 4700, "halfcheetah": 10200,
}


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


def _refuse(message: str) -> None:
    """Bad input: one ``error:`` line, exit status 2."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


#: the fit options that ``run`` sets for each seed, which a passed-through option must not replace
RUN_SETS = {"--seed_everything": "is set by run itself (from --seeds)",
            "--trainer.default_root_dir": "is set by run itself (runs/<name>/seed<S>)",
            "--ckpt_path": "is set by run itself (a seed with a last.ckpt continues from it)",
            "--trainer.logger":
                "must stay the default: run finds each seed's checkpoints and tests under lightning_logs",
            "--checkpoint.dirpath": "must stay the default: run finds each seed's checkpoints under lightning_logs"}


def data_args(args: list[str]) -> list[str]:
    """The ``--data.*`` options among a fit's ``args`` (``--data.x v`` or ``--data.x=v``): what its tests must
    be given too, so that they play the env the run trained on (``--data.env_id``, ``--data.env_kwargs``)."""
    kept: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--data."):
            kept += [arg] if "=" in arg or i + 1 == len(args) else [arg, args[i + 1]]
    return kept


def command_to_test(config: str, seed: int, root: Path, fit_args: list[str], ckpt: Path) -> list[str]:
    """``python -m td3_lightning test`` of ``ckpt`` into ``root``, with the fit's config, seed and ``--data.*``
    options (the model's come from the checkpoint)."""
    return [sys.executable, "-m", "td3_lightning", "test", "--config", config, "--seed_everything", str(seed),
            "--trainer.default_root_dir", str(root), *data_args(fit_args), "--ckpt_path", str(ckpt)]


def run(config: str, seeds: list[int], extra: list[str], name: str | None = None, overwrite: bool = False) -> None:
    """Train and test each seed of ``config`` under ``runs/<name>`` (``name``: the config's stem by default). A
    seed whose summary exists but whose run is not under ``runs/`` is refused unless ``overwrite``."""
    name = name or Path(config).stem
    for arg in extra:
        option = arg.split("=", 1)[0]
        owner = next((o for o in RUN_SETS if option == o or option.startswith(o + ".")), None)
        if owner:
            _refuse(f"{option} {RUN_SETS[owner]}; leave it out")
    for option in ("--checkpoint.save_last", "--trainer.enable_checkpointing"):
        given = option_value(extra, option)
        value = given if given is not None else config_value(config, option[2:])
        if value is not None and str(value).lower() in ("false", "0", "no", "off", "null", "none"):
            where = "" if given is not None else f" (in {config})"
            _refuse(f"{option[2:]} {value}{where}: run continues and tests each seed from its last.ckpt; leave it "
                    "out")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        _refuse(f"--name {name!r} must be a folder name (letters, digits, '_', '-', '.')")
    folders = [ROOT / name / f"seed{seed}" for seed in seeds]
    kept = [summary_path(name, f) for f in folders if seed_state(f) == "new" and summary_path(name, f).exists()]
    if kept and not overwrite:
        _refuse(f"{', '.join(map(str, kept))} already summarise{'s' if len(kept) == 1 else ''} a run of {name}; "
                f"a new run would replace {'it' if len(kept) == 1 else 'them'}: give other --seeds, another --name, or "
                "--overwrite")
    for seed in seeds:
        folder = ROOT / name / f"seed{seed}"
        state = seed_state(folder)
        if state == "done":
            print(f"{name} seed {seed}: already tested, skipped (delete {folder} to redo it)")
            continue
        resume = ["--ckpt_path", "last"] if state == "resume" else []
        print(f"{name} seed {seed}: {'continuing from its last.ckpt' if resume else 'training'}", flush=True)
        fit = [sys.executable, "-m", "td3_lightning", "fit", "--config", config, "--seed_everything", str(seed),
               "--trainer.default_root_dir", str(folder), *resume, *extra]
        for command in ("fit", "test"):  # the test's checkpoint is the one the fit has written
            returncode = call(fit if command == "fit" else
                              command_to_test(config, seed, folder, extra, latest_last_ckpt(folder)))
            if returncode < 0:  # killed by a signal: say which, the run goes on from its last.ckpt when run again
                print(f"error: {name} seed {seed}: {command} was killed by signal {-returncode}; run the same "
                      "command again to continue it", file=sys.stderr)
                sys.exit(1)
            if returncode:  # the command said why (an `error:` line, exit 2, or its traceback)
                sys.exit(returncode)
        path = save_summary(name, folder, ["--config", config, *extra])
        print(f"{name} seed {seed}: summary written to {path}")


def retest_best(name: str, seeds: list[int]) -> None:
    """Test each seed's checkpoint with the best validation of its run (over its resumes too) on the test episodes
    of its final policy, and add the results to the seed's summary as ``test_best`` (with the checkpoint's path
    in the seed folder). A seed needs its run under ``runs/`` and its summary (``run`` writes both)."""
    from td3_lightning.checkpointing import find_run_checkpoint
    from td3_lightning.errors import UserInputError

    for seed in seeds:
        folder = ROOT / name / f"seed{seed}"
        path = summary_path(name, folder)
        if seed_state(folder) != "done" or not path.exists():
            _refuse(f"{name} seed {seed} has no tested run under {folder} with a summary in {path}; `run` it first")
        summary = json.loads(path.read_text())
        fit_args = summary.get("fit_args") or []
        config, out = option_value(fit_args, "--config"), folder / "best_test"
        if config is None:
            _refuse(f"{path} does not say the config its run was trained with (fit_args); `run` the seed again")
        try:
            ckpt = find_run_checkpoint({"trainer": {"default_root_dir": str(folder)}, "checkpoint": {}}, "best")
        except UserInputError:
            _refuse(f"{name} seed {seed}: its run kept no best checkpoint under {folder}/lightning_logs (no "
                    "validation, or checkpoint.save_top_k 0); leave the seed out of --seeds")
        where = os.path.relpath(ckpt, folder)
        returncode = call(command_to_test(config, seed, out, fit_args, ckpt))
        if returncode:
            sys.exit(1 if returncode < 0 else returncode)
        summary["test_best"] = {**(latest_test(out) or {}), "checkpoint": where}
        _write_summary(path, summary)
        print(f"{name} seed {seed}: {where}: {summary['test_best'].get('test/return', float('nan')):.1f} "
              f"(final policy {summary['test']['test/return']:.1f}); written to {path}")


def call(cmd: list[str]) -> int:
    """Run ``cmd`` -> its exit status. A SIGTERM to this script is passed on, so the fit stops as a stopped fit does
    (resumable from its last checkpoint) instead of training on, unwatched, beside the next run of the script; Ctrl-C
    reaches both from the terminal, and the script waits for the fit to stop."""
    child = subprocess.Popen(cmd)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    try:
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                continue
    finally:
        signal.signal(signal.SIGTERM, previous)


def _version(path: Path) -> int:
    return int(path.name.split("_")[-1])


def latest_test(seed_dir: Path) -> dict | None:
    """The test results of a seed's latest test run, or None."""
    results = sorted(seed_dir.glob("lightning_logs/version_*/test_results.json"), key=lambda p: _version(p.parent))
    return json.loads(results[-1].read_text()) if results else None


def machine() -> str:
    """This machine's processor and core count, and its GPU if torch sees one (for the summaries)."""
    cpuinfo = Path("/proc/cpuinfo")
    names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), re.M) if cpuinfo.exists() else []
    text = f"{names[0] if names else platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    import torch

    return text + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "")


def summary_path(name: str, seed_dir: Path) -> Path:
    """Where the summary of config ``name``'s seed folder ``seed_dir`` is kept."""
    return SUMMARIES / name / f"{seed_dir.name}.json"


def save_summary(name: str, seed_dir: Path, fit_args: list[str] | None = None) -> Path:
    """Write ``SUMMARIES/<name>/<seed_dir name>.json`` for a tested seed: its latest test results,
    its evaluation curve and training hours (:func:`read_seed`), this machine and, when given, the
    ``fit`` arguments after the seed's own (the config and a variant's options). The file is
    written to a temporary name and renamed, so an interrupted write leaves the previous one."""
    test = latest_test(seed_dir)
    if test is None:
        raise SystemExit(f"error: {seed_dir} has no test_results.json; run `run` for it first")
    curve, hours = read_seed(seed_dir)
    summary = {"config": name, "seed": int(seed_dir.name[4:]), "test": test, "curve": [list(p) for p in curve],
               "hours": round(hours, 3), "machine": machine()}
    if fit_args is not None:
        summary["fit_args"] = fit_args
    path = summary_path(name, seed_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_summary(path, summary)
    return path


def _write_summary(path: Path, summary: dict) -> None:
    """``summary`` as ``path``: written to a temporary name and renamed, so an interrupted write leaves the previous
    file."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=1) + "\n")
    os.replace(tmp, path)


def load_summaries() -> dict[str, list[dict]]:
    """Every summary, by config name, in seed order."""
    out: dict[str, list[dict]] = {}
    for path in sorted(SUMMARIES.glob("*/seed*.json"), key=lambda p: (p.parent.name, int(p.stem[4:]))):
        summary = json.loads(path.read_text())
        out.setdefault(path.parent.name, []).append(summary)
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


def _mean_std(values: list[float]) -> str:
    return f"{statistics.mean(values):.1f} ± {statistics.pstdev(values) if len(values) > 1 else 0.0:.1f}"


def _print_best_table(summaries: dict[str, list[dict]]) -> None:
    """The best validated checkpoints' test returns (``best`` wrote them) beside the final policy's, for each config
    whose every tested seed has one; nothing where none has."""
    rows_of = {name: rows for name, rows in summaries.items() if all("test_best" in r for r in rows)}
    if not rows_of:
        return
    print("\n| config | seeds | best validated checkpoint, test return, mean ± std over seeds | per seed "
          "(checkpoint's training step) | final policy, mean ± std |")
    print("|---|---|---|---|---|")
    for name, rows in rows_of.items():
        best = [r["test_best"]["test/return"] for r in rows]
        steps = [re.search(r"step(\d+)", r["test_best"].get("checkpoint", "")) for r in rows]
        per_seed = ", ".join(f"{b:.1f} ({m.group(1) if m else '?'})" for b, m in zip(best, steps))
        print(f"| {name} | {len(rows)} | {_mean_std(best)} | {per_seed} "
              f"| {_mean_std([r['test']['test/return'] for r in rows])} |")


def table() -> None:
    """Summarise every tested seed under ``runs/`` that has no summary yet (``run`` writes one after
    each test, on the machine that trained it), then print the markdown table (from all the summaries)
    and the unfinished seeds under ``runs/``; write the plot.

    Two measures per config: the test return of the final policy (100 episodes, the project's
    measure) and the best evaluation during training, the mean over seeds of each seed's highest
    ``val/return`` (the TD3 paper's "max average return"; it depends on how often a run evaluates).
    """
    unfinished = []
    for env_dir in sorted(p for p in ROOT.glob("*") if p.is_dir()):
        for seed_dir in sorted(env_dir.glob("seed*")):
            if seed_state(seed_dir) != "done":
                if curve := read_seed(seed_dir)[0]:
                    unfinished.append((env_dir.name, seed_dir.name, curve))
            elif not summary_path(env_dir.name, seed_dir).exists():
                save_summary(env_dir.name, seed_dir)
    summaries = load_summaries()
    print("| config | seeds | test return, mean ± std over seeds | per seed (mean of 100 episodes) "
          "| best evaluation during training, mean ± std | training hours per seed |")
    print("|---|---|---|---|---|---|")
    for name, rows in summaries.items():
        means = [r["test"]["test/return"] for r in rows]
        per_seed = ", ".join(f"{m:.1f}" for m in means)
        if all(r["curve"] for r in rows):
            best = _mean_std([max(v for _, v in r["curve"]) for r in rows])
            hours = ", ".join(f"{r['hours']:.2f}" for r in rows)
        else:
            best = hours = "n/a (no evaluation logged)"
        print(f"| {name} | {len(rows)} | {_mean_std(means)} | {per_seed} | {best} | {hours} |")
    _print_best_table(summaries)
    curves = {name: {f"seed{r['seed']}": [tuple(p) for p in r["curve"]] for r in rows if r["curve"]}
              for name, rows in summaries.items()}
    if unfinished:
        print("\nnot tested yet (training unfinished or stopped; `run` again with the same arguments continues it):")
        for name, seed, points in unfinished:
            step, value = points[-1]
            best_step, best = max(points, key=lambda p: p[1])
            print(f"- {name} {seed}: last evaluated at step {step} "
                  f"(return {value:.1f}; best {best:.1f} at {best_step})")
            curves.setdefault(name, {})[seed] = points
    _plot({name: by_seed for name, by_seed in curves.items() if by_seed})


def _early_ends(test: dict, row: dict) -> int:
    """Test episodes that the env ended before their time limit (a summary from before ``test/terminated``: the
    episodes shorter than the env's registered limit)."""
    if "test/terminated" in test:
        return round(test["test/terminated"] * test["test/episodes"])
    import gymnasium

    import td3_lightning.envs  # noqa: F401  (registers the package's envs)

    limit = gymnasium.spec(data_setting(row, "env_id")).max_episode_steps
    return sum(length < limit for length in test["episode_lengths"])


def seed_rows(name: str, milestones: list[int]) -> list[str]:
    """Markdown rows, one per tested seed of the summary ``name``: the final policy's test (mean ± std, min, early
    ends), the best validated checkpoint's (``best``; its env step), the validation at each of ``milestones`` env
    steps (the last evaluation at or before it) and the training hours."""
    rows = load_summaries().get(name)
    if not rows:
        _refuse(f"--name {name}: no summary in {SUMMARIES}/{name}/; give one of {', '.join(load_summaries())}")
    head = ("| seed | final policy, 100 test episodes | min | early ends | best validated checkpoint (env steps): test "
            f"| its early ends | validation at {' / '.join(_steps_label(m) for m in milestones)} env steps | hours |")
    lines = [head, "|" + "---|" * 8]
    for row in rows:
        to_env, test, best = env_steps_of(row), row["test"], row.get("test_best")
        points = [(to_env(step), value) for step, value in row["curve"]]
        val = " / ".join(next((f"{v:.0f}" for x, v in reversed(points) if x <= m), "–") for m in milestones)
        if best is None:
            chosen, best_ends = "not tested (`best`)", "–"
        else:
            found = re.search(r"step(\d+)", best.get("checkpoint", ""))
            at = f"({_steps_label(to_env(int(found.group(1))))}) " if found else ""
            same = abs(best["test/return"] - test["test/return"]) < 1e-9 and best.get("episode_returns") == \
                test.get("episode_returns")
            chosen = f"{at}the final policy" if same else \
                f"{at}{best['test/return']:.1f} ± {best['test/return_std']:.1f}, min {best['test/return_min']:.0f}"
            best_ends = str(_early_ends(best, row))
        lines.append(f"| {row['seed']} | {test['test/return']:.1f} ± {test['test/return_std']:.1f} | "
                     f"{test['test/return_min']:.0f} | {_early_ends(test, row)} | {chosen} | {best_ends} | {val} | "
                     f"{row['hours']:.1f} |")
    return lines


def _steps_label(steps: float, _position: object = None) -> str:
    """Tick label for a step count: 20000 -> ``20k``, 1000000 -> ``1M``."""
    if abs(steps) >= 1_000_000:
        return f"{steps / 1_000_000:g}M"
    if abs(steps) >= 1000:
        return f"{steps / 1000:g}k"
    return f"{steps:g}"


def _style(ax, title: str, legend_size: str = "medium", x_label: str = "training steps") -> None:
    """A panel's title, axes (steps in k/M, evaluation return), grid and legend."""
    import matplotlib.ticker

    ax.set_title(title)
    ax.set_xlabel(x_label)
    ax.xaxis.set_major_formatter(_steps_label)
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
    ax.set_ylabel("evaluation return")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)


def _plot(curves: dict[str, dict[str, list[tuple[int, float]]]]):
    """One panel per config, a curve per seed and the config's target (if it has one) as a dashed
    line; written to ``runs/reference_results.png``. Returns the figure (None without curves)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not curves:
        return None
    columns = min(4, len(curves))
    rows = -(-len(curves) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.5 * rows), squeeze=False)
    for ax in axes.flat[len(curves) :]:
        ax.set_visible(False)
    for ax, (name, by_seed) in zip(axes.flat, curves.items()):
        for seed, points in by_seed.items():
            steps, values = zip(*points)
            ax.plot(steps, values, label=seed)
        if name in TARGETS:
            ax.axhline(TARGETS[name], color="gray", linestyle="--", linewidth=1, label=f"target {TARGETS[name]:g}")
        _style(ax, name)
    fig.tight_layout()
    path = ROOT / "reference_results.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    print(f"\nplot written to {path}")
    return fig


def _seeds_label(name: str, seeds: list[int]) -> str:
    """``hopper (seed 0)``, ``hopper (seeds 0, 1)``."""
    return f"{name} (seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))})"


def _check_out(out: Path, overwrite: bool) -> None:
    """``--out`` is an image file name with a type matplotlib writes, and no file there unless ``overwrite``."""
    from matplotlib.backend_bases import FigureCanvasBase

    types = FigureCanvasBase.get_supported_filetypes()
    if out.is_dir():
        _refuse(f"--out {out} is a folder; name an image file in it, e.g. {out / 'curves.png'}")
    if out.suffix.lower().lstrip(".") not in types:
        _refuse(f"--out {out}: name an image file by its type, e.g. {out.with_suffix('.png')} "
                "(.png, .svg, .pdf or another type matplotlib writes)")
    if out.exists() and not overwrite:
        _refuse(f"--out {out} exists; give another file or --overwrite")


def option_value(args: list[str], option: str) -> str | None:
    """The last value of ``option`` among a command's ``args`` (``--x v`` or ``--x=v``), None if not given."""
    found = None
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(option + "="):
            found = arg.split("=", 1)[1]
    return found


def data_setting(row: dict, name: str):
    """A summarised run's ``data.<name>``: from its fit options, which win, else its config (a summary without fit
    options: its config's name), else the fit's default."""
    import yaml

    from td3_lightning.data import ReplayDataModule

    args = row.get("fit_args") or ["--config", f"{row.get('config', '')}.yaml"]
    given = option_value(args, f"--data.{name}")
    if given is not None:
        return yaml.safe_load(given)
    config = option_value(args, "--config") or ""
    if config_file(config) is None:
        _refuse(f"--env_steps: the config {config} of {row.get('config')} seed {row.get('seed')} is not here (nor "
                "bundled), so its warm-up is unknown; plot by training steps (leave --env_steps out)")
    value = config_value(config, f"data.{name}")
    return value if value is not None else inspect.signature(ReplayDataModule).parameters[name].default


def config_file(given: str) -> Path | None:
    """The config file ``given`` names: a path here, else a bundled config of that name (None: neither)."""
    path = Path(given)
    found = path if path.is_file() else PACKAGE_CONFIGS / path.name
    return found if given and found.is_file() else None


def config_value(config: str, dotted: str):
    """The value of a dotted option (``data.warmup_steps``) in the config file ``config`` (None: not set there, or
    no such file)."""
    import yaml

    path = config_file(config)
    value = yaml.safe_load(path.read_text()) if path is not None else None
    for key in dotted.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def env_steps_of(row: dict) -> Callable[[float], float]:
    """A summarised run's training step -> env step: ``warmup_steps + step / utd_ratio`` (:func:`data_setting`)."""
    warmup, utd = float(data_setting(row, "warmup_steps")), float(data_setting(row, "utd_ratio"))
    return lambda step: warmup + step / utd


def compare(panels: list[str], out: Path, max_steps: int | None = None, overwrite: bool = False,
            env_steps: bool = False):
    """One panel per ``TITLE=NAME,NAME,...``: the evaluation curves of each named summary, a colour per name and a
    line per seed, cropped at ``max_steps``; written to ``out`` (an existing file only with ``overwrite``). The x
    axis counts training steps, or with ``env_steps`` env steps (warm-up included, updates per env step taken out:
    :func:`env_steps_of`), so that runs of other warm-ups and ``utd_ratio`` line up. Returns the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _check_out(out, overwrite)
    if max_steps is not None and max_steps < 1:
        unit = "env" if env_steps else "training"
        _refuse(f"--max_steps {max_steps}: give a number of {unit} steps >= 1 (or leave it out: the whole curves)")
    summaries = load_summaries()
    parsed = []
    for panel in panels:
        title, _, names = panel.rpartition("=")
        names = [n for n in names.split(",") if n]
        unknown = [n for n in names if n not in summaries]
        if not title or not names or unknown:
            missing = f"no summary of {', '.join(unknown)}; " if unknown else ""
            _refuse(f"--panel {panel}: {missing}give TITLE=NAME,NAME,... with names of {SUMMARIES}/<NAME>/ "
                    f"({', '.join(summaries) or 'none yet'})")
        parsed.append((title, names))
    fig, axes = plt.subplots(1, len(parsed), figsize=(5 * len(parsed), 3.5), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (title, names) in zip(axes.flat, parsed):
        for color, name in zip(colors * len(names), names):
            for i, row in enumerate(summaries[name]):
                to_x = env_steps_of(row) if env_steps else float
                points = [(to_x(step), v) for step, v in row["curve"]]
                points = [p for p in points if max_steps is None or p[0] <= max_steps]
                if points:
                    steps, values = zip(*points)
                    ax.plot(steps, values, color=color, alpha=1.0 if i == 0 else 0.6,
                            label=_seeds_label(name, [r["seed"] for r in summaries[name]]) if i == 0 else None)
        _style(ax, title, legend_size="small", x_label="env steps" if env_steps else "training steps")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    print(f"plot written to {out}")
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="train and test one config over several seeds")
    r.add_argument("--config", required=True)
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--name", help="the runs/ folder and summary name of a variant (default: the config's name)")
    r.add_argument("--overwrite", action="store_true",
                   help="train a seed whose summary exists without its run under runs/, replacing that summary")
    b = sub.add_parser("best", help="test each tested seed's best validated checkpoint too, into its summary")
    b.add_argument("--name", required=True, help="the runs/ folder and summary name (a config's name or --name)")
    b.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    sub.add_parser("table", help="print the results table and write the plot")
    w = sub.add_parser("rows", help="print a summary's per-seed rows (markdown) for docs/results.md")
    w.add_argument("--name", required=True, help="the summary (benchmarks/reference_runs/<NAME>/)")
    w.add_argument("--at", type=int, nargs="+", default=[100_000, 150_000, 200_000, 250_000, 300_000],
                   help="env steps at which to give the validation return")
    c = sub.add_parser("compare", help="plot named summaries side by side, one panel per --panel")
    c.add_argument("--panel", action="append", required=True, metavar="TITLE=NAME,NAME,...",
                   help="a panel: its title and the summaries (benchmarks/reference_runs/<NAME>/) drawn in it")
    c.add_argument("--max_steps", type=int, help="crop the curves at this many steps (of the x axis)")
    c.add_argument("--env_steps", action="store_true",
                   help="x: env steps (warm-up included, per utd_ratio), not training steps: runs of other warm-ups "
                        "and utd_ratio line up")
    c.add_argument("--out", type=Path, required=True, help="the image file (.png, .svg, ...)")
    c.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    args, extra = parser.parse_known_args()
    if args.command == "run":
        run(args.config, args.seeds, extra, args.name, args.overwrite)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    elif args.command == "best":
        retest_best(args.name, args.seeds)
    elif args.command == "rows":
        print("\n".join(seed_rows(args.name, args.at)))
    elif args.command == "compare":
        compare(args.panel, args.out, args.max_steps, args.overwrite, args.env_steps)
    else:
        table()


if __name__ == "__main__":
    main()
