"""The reference-results driver: which seeds it skips, continues or starts, how it stitches a
resumed run's evaluation curve back together, and the committed summaries the table is built from."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reference_results.py"


@pytest.fixture()
def ref(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("reference_results", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "SUMMARIES", tmp_path / "summaries")
    return module


def _version_dir(seed_dir: Path, n: int) -> Path:
    path = seed_dir / "lightning_logs" / f"version_{n}"
    path.mkdir(parents=True)
    return path


def _log_vals(version: Path, points: list[tuple[int, float]], start: float = 1000.0) -> None:
    """``val/return`` at ``step``, one every 600 s of wall time from ``start``, and one training
    value an hour before the first (the time counts from the first value of any tag)."""
    writer = SummaryWriter(str(version))
    writer.add_scalar("train/loss", 1.0, 0, walltime=start - 3600)
    for i, (step, value) in enumerate(points):
        writer.add_scalar("val/return", value, step, walltime=start + 600 * i)
    writer.close()


def _last_ckpt(version: Path) -> Path:
    path = version / "checkpoints" / "last.ckpt"
    path.parent.mkdir()
    path.write_bytes(b"")
    return path


def test_seed_state_and_latest_checkpoint_by_version_number(ref, tmp_path):
    seed = tmp_path / "walker2d" / "seed0"
    assert ref.seed_state(seed) == "new"
    for n in (2, 9, 10):
        newest = _last_ckpt(_version_dir(seed, n))
    assert ref.seed_state(seed) == "resume"
    assert ref.latest_last_ckpt(seed) == newest  # version_10, not version_9 (a string sort picks 9)
    (_version_dir(seed, 11) / "test_results.json").write_text(json.dumps({"test/return": 1.0}))
    assert ref.seed_state(seed) == "done"
    with pytest.raises(SystemExit, match="no last.ckpt"):
        ref.latest_last_ckpt(tmp_path / "nothing")


def test_run_skips_tested_seeds_and_continues_unfinished_ones(ref, tmp_path, monkeypatch):
    done, unfinished = tmp_path / "walker2d" / "seed0", tmp_path / "walker2d" / "seed1"
    (_version_dir(done, 0) / "test_results.json").write_text("{}")
    version = _version_dir(unfinished, 0)
    ckpt = _last_ckpt(version)
    _log_vals(version, [(4999, 100.0), (9999, 300.0)])
    calls: list[list[str]] = []

    def fake_run(cmd: list[str]) -> int:
        calls.append(cmd)
        if cmd[3] == "test":
            (version / "test_results.json").write_text(json.dumps({"test/return": 250.0}))
        return 0

    monkeypatch.setattr(ref, "call", fake_run)
    ref.run("walker2d.yaml", [0, 1], ["--trainer.callbacks", "null"])
    assert len(calls) == 2  # seed 0 untouched; seed 1: fit, then test, then its summary
    summary = json.loads((tmp_path / "summaries" / "walker2d" / "seed1.json").read_text())
    assert summary["seed"] == 1 and summary["test"] == {"test/return": 250.0}
    assert summary["curve"] == [[5000, 100.0], [10000, 300.0]]
    assert summary["hours"] == pytest.approx(4200 / 3600, abs=1e-3)
    assert not (tmp_path / "summaries" / "walker2d" / "seed0.json").exists()  # skipped seeds are not re-summarised
    fit, test = calls
    common = ["--config", "walker2d.yaml", "--seed_everything", "1", "--trainer.default_root_dir", str(unfinished)]
    assert fit == [sys.executable, "-m", "td3_lightning", "fit", *common, "--ckpt_path", "last",
                   "--trainer.callbacks", "null"]
    assert test == [sys.executable, "-m", "td3_lightning", "test", *common, "--ckpt_path", str(ckpt)]


def test_run_with_a_name_keeps_a_variant_in_its_own_folder_and_summary(ref, tmp_path, monkeypatch, capsys):
    calls: list[list[str]] = []
    variant = tmp_path / "walker2d_ln" / "seed0"

    def fake_run(cmd: list[str]) -> int:
        calls.append(cmd)
        version = variant / "lightning_logs" / "version_0"
        if cmd[3] == "fit":
            _log_vals(version, [(4999, 10.0)])
            _last_ckpt(version)
        else:
            (version / "test_results.json").write_text(json.dumps({"test/return": 5.0}))
        return 0

    monkeypatch.setattr(ref, "call", fake_run)
    extra = ["--model.layer_norm", "true", "--data.env_id", "Hopper-v5", "--data.env_kwargs={a: 1}"]
    ref.run("walker2d.yaml", [0], extra, name="walker2d_ln")
    fit, test = calls
    assert fit[4:] == ["--config", "walker2d.yaml", "--seed_everything", "0", "--trainer.default_root_dir",
                       str(variant), *extra]  # a fresh run: no --ckpt_path
    assert test[4:] == ["--config", "walker2d.yaml", "--seed_everything", "0", "--trainer.default_root_dir",
                        str(variant), "--data.env_id", "Hopper-v5", "--data.env_kwargs={a: 1}",  # the env it trained on
                        "--ckpt_path", str(variant / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")]
    summary = json.loads((tmp_path / "summaries" / "walker2d_ln" / "seed0.json").read_text())
    assert summary["test"] == {"test/return": 5.0}
    assert summary["fit_args"] == ["--config", "walker2d.yaml", *extra]
    with pytest.raises(SystemExit) as info:
        ref.run("walker2d.yaml", [0], [], name="../elsewhere")
    assert info.value.code == 2 and "--name '../elsewhere' must be a folder name" in capsys.readouterr().err


def test_run_refuses_to_replace_a_summary_without_its_run_and_stops_at_a_failed_command(ref, tmp_path, monkeypatch,
                                                                                        capsys):
    kept = tmp_path / "summaries" / "bipedal" / "seed1.json"
    kept.parent.mkdir(parents=True)
    kept.write_text('{"seed": 1}')
    calls: list[list[str]] = []

    def fake_run(cmd: list[str]) -> int:
        calls.append(cmd)
        return 2  # the fit refused its input (its `error:` line was printed)

    monkeypatch.setattr(ref, "call", fake_run)
    with pytest.raises(SystemExit) as info:
        ref.run("bipedal.yaml", [0, 1], [])
    assert info.value.code == 2 and capsys.readouterr().err == (
        f"error: {kept} already summarises a run of bipedal; a new run would replace it: give other --seeds, "
        "another --name, or --overwrite\n")
    assert calls == [] and kept.read_text() == '{"seed": 1}'
    with pytest.raises(SystemExit) as info:
        ref.run("bipedal.yaml", [1], ["--model.gamme", "0.9"], overwrite=True)
    assert info.value.code == 2 and [c[3] for c in calls] == ["fit"]  # no test after the failed fit, no traceback
    assert kept.read_text() == '{"seed": 1}'
    monkeypatch.setattr(ref, "call", lambda cmd: -9)  # killed (OOM)
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        ref.run("bipedal.yaml", [1], [], overwrite=True)
    assert info.value.code == 1 and capsys.readouterr().err == (
        "error: bipedal seed 1: fit was killed by signal 9; run the same command again to continue it\n")


def test_curves_join_resumed_versions_and_table_lists_unfinished_seeds(ref, tmp_path, capsys):
    seed = tmp_path / "walker2d" / "seed0"
    _log_vals(_version_dir(seed, 0), [(4999, 100.0), (9999, 300.0)])
    _log_vals(_version_dir(seed, 1), [(9999, 350.0), (14999, 200.0)])  # resumed; re-logged step 10000
    curve, hours = ref.read_seed(seed)
    assert curve == [(5000, 100.0), (10000, 350.0), (15000, 200.0)]
    assert hours == pytest.approx(2 * (3600 + 600) / 3600)  # each version: 1 h before its first value + 600 s

    finished = tmp_path / "pendulum"
    for s, value, curve in ((0, -140.0, [(99, -300.0), (199, -130.0), (299, -145.0)]), (1, -150.0, [(99, -150.0)])):
        version = _version_dir(finished / f"seed{s}", 0)
        _log_vals(version, curve)
        (version / "test_results.json").write_text(json.dumps({"test/return": value}))
    (_version_dir(tmp_path / "lunar" / "seed0", 0) / "test_results.json").write_text(json.dumps({"test/return": 5.0}))
    ref.table()
    out = capsys.readouterr().out
    # best evaluation: seed 0's highest -130, seed 1's -150 -> -140 ± 10
    # seed 0: 3 values 600 s apart + the hour before -> 4200 s; seed 1: one value + the hour -> 3600 s
    assert "| pendulum | 2 | -145.0 ± 5.0 | -140.0, -150.0 | -140.0 ± 10.0 | 1.33, 1.00 |" in out
    assert "| lunar | 1 | 5.0 ± 0.0 | 5.0 | n/a (no evaluation logged) | n/a (no evaluation logged) |" in out
    assert "- walker2d seed0: last evaluated at step 15000 (return 200.0; best 350.0 at 10000)" in out
    assert (tmp_path / "reference_results.png").stat().st_size > 0

    # an existing summary is kept: it records the machine that trained the seed, not the one running table
    kept = tmp_path / "summaries" / "pendulum" / "seed0.json"
    summary = json.loads(kept.read_text())
    kept.write_text(json.dumps({**summary, "machine": "the training machine"}))
    ref.table()
    capsys.readouterr()
    assert json.loads(kept.read_text())["machine"] == "the training machine"

    # the summaries alone (runs/ gone, as on a fresh clone) give the same table rows
    for seed_dir in ("pendulum", "lunar", "walker2d"):
        shutil.rmtree(tmp_path / seed_dir)
    (tmp_path / "reference_results.png").unlink()
    ref.table()
    again = capsys.readouterr().out
    assert "| pendulum | 2 | -145.0 ± 5.0 | -140.0, -150.0 | -140.0 ± 10.0 | 1.33, 1.00 |" in again
    assert "| lunar | 1 | 5.0 ± 0.0 | 5.0 | n/a (no evaluation logged) | n/a (no evaluation logged) |" in again
    assert "walker2d" not in again  # an unfinished seed has no summary
    assert (tmp_path / "reference_results.png").stat().st_size > 0


@pytest.mark.parametrize(
    ("steps", "label"),
    [(-5000, "-5k"), (0, "0"), (500, "500"), (2500, "2.5k"), (20_000, "20k"), (750_000, "750k"), (1_000_000, "1M")],
)
def test_plot_step_labels(ref, steps, label):
    assert ref._steps_label(steps) == label


def test_plot_draws_the_target_of_known_configs(ref):
    seed_curve = {"seed0": [(0, -100.0), (10_000, 300.0)]}
    fig = ref._plot({"bipedal": seed_curve, "my_env": seed_curve})
    bipedal, mine = fig.axes[:2]
    assert [list(line.get_ydata()) for line in bipedal.get_lines()] == [[-100.0, 300.0], [310, 310]]
    assert [line.get_label() for line in bipedal.get_lines()] == ["seed0", "target 310"]
    assert len(mine.get_lines()) == 1  # a config without a target: its curve only


def test_compare_draws_named_summaries_one_panel_each_and_refuses_unknown_names(ref, tmp_path, capsys):
    for name, seed, curve in (("plain", 0, [[5000, 10.0], [10000, 30.0], [20000, 99.0]]),
                              ("plain", 1, [[5000, 20.0]]), ("td7", 0, [[5000, 50.0], [10000, 80.0]])):
        folder = tmp_path / "summaries" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"seed{seed}.json").write_text(json.dumps({"seed": seed, "curve": curve, "test": {}}))
    fig = ref.compare(["Walker2d-v5=plain,td7", "only plain=plain"], tmp_path / "out" / "c.png", max_steps=10000)
    assert (tmp_path / "out" / "c.png").stat().st_size > 0
    left, right = fig.axes
    assert left.get_title() == "Walker2d-v5" and right.get_title() == "only plain"
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["plain (seeds 0, 1)", "td7 (seed 0)"]
    assert [list(line.get_xdata()) for line in left.get_lines()] == [[5000, 10000], [5000], [5000, 10000]]  # cropped
    assert list(left.get_lines()[2].get_ydata()) == [50.0, 80.0]
    with pytest.raises(SystemExit) as info:
        ref.compare(["Walker2d-v5=plain,nope"], tmp_path / "x.png")
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1 and err[0].startswith(
        "error: --panel Walker2d-v5=plain,nope: no summary of nope; give TITLE=NAME,NAME,...")
    assert not (tmp_path / "x.png").exists()
    before = (tmp_path / "out" / "c.png").read_bytes()
    with pytest.raises(SystemExit) as info:
        ref.compare(["only plain=plain"], tmp_path / "out" / "c.png")
    assert info.value.code == 2 and capsys.readouterr().err.strip() == (
        f"error: --out {tmp_path / 'out' / 'c.png'} exists; give another file or --overwrite")
    assert (tmp_path / "out" / "c.png").read_bytes() == before
    ref.compare(["only plain=plain"], tmp_path / "out" / "c.png", overwrite=True)
    assert (tmp_path / "out" / "c.png").read_bytes() != before


def test_compare_by_env_steps_adds_each_runs_warm_up_and_divides_by_its_updates_per_env_step(ref, tmp_path, capsys):
    runs = {"crossq": {"config": "crossq", "fit_args": ["--config", "humanoid_crossq.yaml"]},  # warm-up 5000
            "utd2": {"config": "utd2", "fit_args": ["--config", "humanoid_crossq.yaml", "--data.utd_ratio", "2"]},
            "td7": {"config": "td7", "fit_args": ["--config", "ant_td7.yaml", "--data.warmup_steps=1000"]},
            "pendulum": {"config": "pendulum"}}  # an older summary: no fit_args, its config by name (warm-up 1000)
    for name, row in runs.items():
        (tmp_path / "summaries" / name).mkdir(parents=True)
        (tmp_path / "summaries" / name / "seed0.json").write_text(
            json.dumps({**row, "seed": 0, "curve": [[5000, 1.0], [10000, 2.0]], "test": {}}))
    fig = ref.compare(["Humanoid-v5=crossq,utd2,td7,pendulum"], tmp_path / "c.png", env_steps=True, max_steps=10000)
    (ax,) = fig.axes
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[10000.0], [7500.0, 10000.0], [6000.0],
                                                                   [6000.0]]
    assert ax.get_xlabel() == "env steps"
    fig = ref.compare(["Humanoid-v5=utd2"], tmp_path / "t.png")  # by training steps, as before
    assert [list(line.get_xdata()) for line in fig.axes[0].get_lines()] == [[5000, 10000]]
    assert fig.axes[0].get_xlabel() == "training steps"
    (tmp_path / "summaries" / "mine").mkdir()
    (tmp_path / "summaries" / "mine" / "seed1.json").write_text(json.dumps(
        {"config": "mine", "seed": 1, "fit_args": ["--config", "nowhere/mine.yaml"], "curve": [[5000, 1.0]]}))
    with pytest.raises(SystemExit) as info:
        ref.compare(["p=mine"], tmp_path / "m.png", env_steps=True)
    assert info.value.code == 2 and capsys.readouterr().err.strip() == (
        "error: --env_steps: the config nowhere/mine.yaml of mine seed 1 is not here (nor bundled), so its warm-up "
        "is unknown; plot by training steps (leave --env_steps out)")
    assert not (tmp_path / "m.png").exists()


def test_rows_give_each_seeds_tests_and_its_validation_at_env_steps(ref, tmp_path, capsys):
    def test(mean, ends, returns):
        return {"test/return": mean, "test/return_std": 12.34, "test/return_min": 98.76, "test/terminated": ends / 4,
                "test/episodes": 4.0, "episode_returns": returns}
    folder = tmp_path / "summaries" / "utd2"
    folder.mkdir(parents=True)
    args = ["--config", "humanoid_crossq.yaml", "--data.utd_ratio", "2"]  # env step = 5000 + training step / 2
    curve = [[10000, 1.0], [190000, 2.0], [390000, 3.0], [590000, 4.0]]  # env steps 10k, 100k, 200k, 300k
    (folder / "seed0.json").write_text(json.dumps({
        "config": "utd2", "seed": 0, "fit_args": args, "curve": curve, "hours": 2.26, "test": test(500.0, 1, [1]),
        "test_best": {**test(600.0, 0, [2]),
                      "checkpoint": "lightning_logs/version_1/checkpoints/best-step390000.ckpt"}}))
    (folder / "seed1.json").write_text(json.dumps({"config": "utd2", "seed": 1, "fit_args": args, "curve": curve[:2],
                                                   "hours": 1.0, "test": test(400.0, 2, [3])}))
    assert ref.seed_rows("utd2", [100_000, 150_000, 300_000])[2:] == [
        "| 0 | 500.0 ± 12.3 | 99 | 1 | (200k) 600.0 ± 12.3, min 99 | 0 | 2 / 2 / 4 | 2.3 |",
        "| 1 | 400.0 ± 12.3 | 99 | 2 | not tested (`best`) | – | 2 / 2 / 2 | 1.0 |"]
    with pytest.raises(SystemExit) as info:
        ref.seed_rows("nope", [100_000])
    assert info.value.code == 2 and capsys.readouterr().err.startswith("error: --name nope: no summary in ")


def test_rows_count_early_ends_from_episode_lengths_in_a_summary_without_terminated(ref, tmp_path):
    folder = tmp_path / "summaries" / "old"
    folder.mkdir(parents=True)
    for seed, args in enumerate([["--config", "humanoid_crossq.yaml"],  # Humanoid-v5: 1000 steps
                                 ["--config", "humanoid_crossq.yaml", "--data.env_id", "Pendulum-v1"]]):  # 200
        test = {"test/return": 1.0, "test/return_std": 0.0, "test/return_min": 1.0, "test/episodes": 4.0,
                "episode_returns": [1.0] * 4, "episode_lengths": [1000, 999, 200, 150]}
        (folder / f"seed{seed}.json").write_text(json.dumps({"config": "old", "seed": seed, "fit_args": args,
                                                             "curve": [[95000, 7.0]], "hours": 1.0, "test": test}))
    assert [row.split(" | ")[3] for row in ref.seed_rows("old", [100_000])[2:]] == ["3", "1"]


@pytest.mark.parametrize("option, why", [
    ("--seed_everything=5", "--seed_everything is set by run itself (from --seeds); leave it out"),
    ("--trainer.default_root_dir",
     "--trainer.default_root_dir is set by run itself (runs/<name>/seed<S>); leave it out"),
    ("--trainer.logger.init_args.save_dir", "--trainer.logger.init_args.save_dir must stay the default: run finds "
                                            "each seed's checkpoints and tests under lightning_logs; leave it out"),
])
def test_run_refuses_a_passed_option_that_it_sets_itself(ref, tmp_path, monkeypatch, capsys, option, why):
    calls: list[list[str]] = []
    monkeypatch.setattr(ref, "call", lambda cmd: calls.append(cmd))
    with pytest.raises(SystemExit) as info:  # before: the seed trained elsewhere, or filed under another seed
        ref.run("pendulum.yaml", [0], ["--model.gamma", "0.9", option, "x"])
    assert info.value.code == 2 and capsys.readouterr().err == f"error: {why}\n"
    assert calls == [] and not (tmp_path / "pendulum").exists()


@pytest.mark.parametrize("args, in_config, said", [
    (["--checkpoint.save_last", "false"], None, "checkpoint.save_last false"),
    (["--trainer.enable_checkpointing=False"], None, "trainer.enable_checkpointing False"),
    (["--checkpoint.save_last", "null"], None, "checkpoint.save_last null"),
    ([], {"checkpoint": {"save_last": False}}, "checkpoint.save_last False (in {config})"),
])
def test_run_refuses_to_switch_off_the_last_ckpt_it_continues_and_tests_from(ref, tmp_path, monkeypatch, capsys,
                                                                                args, in_config, said):
    calls: list[list[str]] = []
    monkeypatch.setattr(ref, "call", lambda cmd: calls.append(cmd))
    config = "pendulum.yaml"
    if in_config is not None:
        config = str(tmp_path / "mine.yaml")
        (tmp_path / "mine.yaml").write_text(json.dumps(in_config))  # JSON is YAML
    with pytest.raises(SystemExit) as info:  # before: hours of training, then no last.ckpt to test
        ref.run(config, [0], args)
    assert info.value.code == 2 and capsys.readouterr().err == (
        f"error: {said.format(config=config)}: run continues and tests each seed from its last.ckpt; leave it out\n")
    assert calls == [] and not (tmp_path / "pendulum").exists() and not (tmp_path / "mine").exists()


@pytest.mark.parametrize("out, max_steps, message", [
    ("c.txt", None, "--out {d}/c.txt: name an image file by its type, e.g. {d}/c.png (.png, .svg, .pdf or another "
                    "type matplotlib writes)"),
    ("c", None, "--out {d}/c: name an image file by its type, e.g. {d}/c.png (.png, .svg, .pdf or another type "
                "matplotlib writes)"),
    ("folder", None, "--out {d}/folder is a folder; name an image file in it, e.g. {d}/folder/curves.png"),
    ("c.png", 0, "--max_steps 0: give a number of training steps >= 1 (or leave it out: the whole curves)"),
])
def test_compare_refuses_an_out_it_cannot_write_before_drawing(ref, tmp_path, capsys, out, max_steps, message):
    folder = tmp_path / "summaries" / "plain"
    folder.mkdir(parents=True)
    (folder / "seed0.json").write_text(json.dumps({"seed": 0, "curve": [[0, 1.0], [10, 2.0]], "test": {}}))
    (tmp_path / "folder").mkdir()
    (tmp_path / "c.png").write_bytes(b"mine")  # what a suffix-less --out c wrote over before
    listing = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(SystemExit) as info:
        ref.compare(["p=plain"], tmp_path / out, max_steps=max_steps, overwrite=out == "c.png")
    assert info.value.code == 2 and capsys.readouterr().err == "error: " + message.format(d=tmp_path) + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == listing and (tmp_path / "c.png").read_bytes() == b"mine"


def test_a_sigterm_to_the_script_stops_the_command_it_runs(ref, tmp_path):
    # the fit it started stops with the script (as a stopped fit: its exit status), not training on without it
    marker = tmp_path / "stopped"
    child = ("import signal, sys, time, pathlib\n"
             f"stop = lambda *a: (pathlib.Path({str(marker)!r}).write_text('x'), sys.exit(143))\n"
             "signal.signal(signal.SIGTERM, stop)\n"
             f"pathlib.Path({str(tmp_path / 'started')!r}).write_text('x')\n"
             "time.sleep(60)\n")
    def stop_when_started() -> None:
        while not (tmp_path / "started").exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=stop_when_started, daemon=True).start()
    start = time.monotonic()
    assert ref.call([sys.executable, "-c", child]) == 143
    assert marker.read_text() == "x" and time.monotonic() - start < 30
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the script's own handling is back


def test_best_of_a_seed_without_a_best_checkpoint_is_one_line(ref, tmp_path, monkeypatch, capsys):
    (_version_dir(tmp_path / "ant_td7" / "seed1", 0) / "test_results.json").write_text('{"test/return": 1.0}')
    summary = tmp_path / "summaries" / "ant_td7" / "seed1.json"
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"seed": 1, "test": {}, "fit_args": ["--config", "ant_td7.yaml"]}))
    monkeypatch.setattr(ref, "call", lambda cmd: pytest.fail("nothing to test"))
    with pytest.raises(SystemExit) as info:  # before: a UserInputError traceback
        ref.retest_best("ant_td7", [1])
    assert info.value.code == 2 and capsys.readouterr().err == (
        f"error: ant_td7 seed 1: its run kept no best checkpoint under {tmp_path}/ant_td7/seed1/lightning_logs (no "
        "validation, or checkpoint.save_top_k 0); leave the seed out of --seeds\n")


def test_best_tests_each_seeds_best_validated_checkpoint_into_its_summary(ref, tmp_path, monkeypatch, capsys):
    import torch

    seed = tmp_path / "ant_td7" / "seed1"
    tested = _version_dir(seed, 1)
    (tested / "test_results.json").write_text(json.dumps({"test/return": 4000.0}))
    recorded = "runs/ant_td7/seed1/lightning_logs/version_{}/checkpoints"  # as the fits were given their folder
    for n, score, earlier in ((0, 900.0, {}), (1, 500.0, {f"{recorded.format(0)}/best-step5000.ckpt": 900.0})):
        best = seed / "lightning_logs" / f"version_{n}" / "checkpoints" / f"best-step{5000 * (n + 1)}.ckpt"
        best.parent.mkdir(parents=True, exist_ok=True)
        state = {"monitor": "val/return", "mode": "max", "dirpath": recorded.format(n),
                 "best_k_models": {f"{recorded.format(n)}/{best.name}": score}, "earlier_best_k_models": earlier}
        torch.save({"callbacks": {"ModelCheckpoint{'monitor': 'val/return', 'mode': 'max'}": state}}, best)
        os.utime(best, (1e9 + n, 1e9 + n))  # the resume's (version_1) is the newest, and scores lower
    summary = tmp_path / "summaries" / "ant_td7" / "seed1.json"
    with pytest.raises(SystemExit) as info:
        ref.retest_best("ant_td7", [1])
    assert info.value.code == 2 and "no tested run" in capsys.readouterr().err  # no summary yet
    summary.parent.mkdir(parents=True)
    summary.write_text(json.dumps({"seed": 1, "test": {"test/return": 4000.0}}))
    with pytest.raises(SystemExit) as info:
        ref.retest_best("ant_td7", [1])
    assert info.value.code == 2 and "does not say the config" in capsys.readouterr().err
    summary.write_text(json.dumps({"seed": 1, "test": {"test/return": 4000.0},
                                   "fit_args": ["--config", "ant_td7.yaml", "--model.gamma", "0.995",
                                                "--data.env_id", "Ant-v4"]}))
    calls: list[list[str]] = []

    def fake_run(cmd: list[str]) -> int:
        calls.append(cmd)
        out = Path(cmd[cmd.index("--trainer.default_root_dir") + 1]) / "lightning_logs" / "version_0"
        out.mkdir(parents=True)
        (out / "test_results.json").write_text(json.dumps({"test/return": 5500.0}))
        return 0

    monkeypatch.setattr(ref, "call", fake_run)
    ref.retest_best("ant_td7", [1])
    assert calls == [[sys.executable, "-m", "td3_lightning", "test", "--config", "ant_td7.yaml", "--seed_everything",
                      "1", "--trainer.default_root_dir", str(seed / "best_test"), "--data.env_id", "Ant-v4",
                      "--ckpt_path",
                      str(seed / "lightning_logs/version_0/checkpoints/best-step5000.ckpt")]]
    written = json.loads(summary.read_text())
    assert written["test"] == {"test/return": 4000.0}  # the final policy's stays
    assert written["test_best"] == {"test/return": 5500.0,
                                    "checkpoint": "lightning_logs/version_0/checkpoints/best-step5000.ckpt"}
    assert ref.latest_test(seed) == {"test/return": 4000.0} and ref.seed_state(seed) == "done"


def test_table_lists_best_validated_checkpoints_beside_the_final_policy(ref, tmp_path, capsys):
    folder = tmp_path / "summaries"
    for name, seeds in (("ant_td7", {0: (4000.0, 5000.0, "best-step245000.ckpt"), 1: (6000.0, 5500.0, None)}),
                        ("hopper_td7", {0: (3000.0, None, None)})):
        (folder / name).mkdir(parents=True)
        for seed, (final, best, ckpt) in seeds.items():
            summary = {"seed": seed, "test": {"test/return": final}, "curve": [], "hours": 1.0}
            if best is not None:
                summary["test_best"] = {"test/return": best, "checkpoint": f"lightning_logs/version_1/checkpoints/"
                                        f"{ckpt or 'best.ckpt'}"}
            (folder / name / f"seed{seed}.json").write_text(json.dumps(summary))
    ref.table()
    out = capsys.readouterr().out
    # ant_td7: best 5000 and 5500 -> 5250 ± 250; final 4000 and 6000 -> 5000 ± 1000; a name without a step: "?"
    assert "| ant_td7 | 2 | 5250.0 ± 250.0 | 5000.0 (245000), 5500.0 (?) | 5000.0 ± 1000.0 |" in out
    assert "| hopper_td7 | 1 | 3000.0 ± 0.0 |" in out and "| hopper_td7 | 1 | 3000.0 ± 0.0 | 3000.0 |" in out
    assert out.count("hopper_td7") == 1  # no best validated checkpoint tested: not in the second table

    without = {"seed": 1, "test": {"test/return": 6000.0}, "curve": []}
    (folder / "ant_td7" / "seed1.json").write_text(json.dumps(without))
    ref.table()
    assert "best validated" not in capsys.readouterr().out  # one seed without it: the config's row would mislead
