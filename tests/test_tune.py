"""`python -m td3_lightning tune`: an Optuna study of short fits, end to end on Pendulum."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import pytest
import torch
import yaml

optuna = pytest.importorskip("optuna")

from jsonargparse import Namespace  # noqa: E402

from td3_lightning import tune as tune_module  # noqa: E402
from td3_lightning.errors import UserInputError  # noqa: E402
from td3_lightning.__main__ import main  # noqa: E402

# 300 training steps, a validation every 100 (one episode), 100 warm-up steps, a small network
TINY = [
    "--trainer.max_steps", "300", "--trainer.val_check_interval", "100", "--data.warmup_steps", "100",
    "--data.eval_episodes", "1", "--model.hidden_dims", "[32, 32]", "--trainer.enable_progress_bar", "false",
    "--learning_curve.filename", "",
]
SPACE = {
    "model.actor_lr": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True},
    "data.batch_size": {"type": "categorical", "choices": [32, 64]},
}


def _tune(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "td3_lightning", "tune", "--config", "pendulum.yaml", *args, *TINY],
                            cwd=cwd, env={**env, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _done(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return out


def _last_ckpt(folder: Path) -> Path:
    (path,) = folder.glob("lightning_logs/version_*/checkpoints/last.ckpt")
    return path


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory, cli_env) -> Path:
    """Two processes share one SQLite study (a trial each), then a third run continues it."""
    root = tmp_path_factory.mktemp("tune")
    (root / "space.yaml").write_text(yaml.safe_dump(SPACE, sort_keys=False))
    common = ["--storage", "sqlite:///study.db", "--space", "space.yaml", "--n_trials", "1"]
    first = [_tune(root, cli_env, *common, "--best_config", f"best_{i}.yaml") for i in range(2)]
    outs = [_done(p) for p in first]
    (root / "concurrent_stdout.txt").write_text("\n".join(outs))
    (root / "third_stdout.txt").write_text(_done(_tune(root, cli_env, *common)))
    return root


def _study(root: Path) -> optuna.Study:
    return optuna.load_study(study_name="pendulum", storage=f"sqlite:///{root / 'study.db'}")


def test_processes_share_the_study_and_a_rerun_continues_it(study_dir):
    trials = _study(study_dir).trials
    assert sorted(t.number for t in trials) == [0, 1, 2]
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for t in trials:
        assert set(t.params) == set(SPACE) and 1e-4 <= t.params["model.actor_lr"] <= 1e-3
        assert t.params["data.batch_size"] in (32, 64)
        assert sorted(t.intermediate_values) == [100, 200, 300]  # val/return reported at each validation
        assert t.value == t.intermediate_values[300]  # the value: the last val/return
        last = _last_ckpt(study_dir / "tune" / "pendulum" / f"trial_{t.number}")
        ckpt = torch.load(last, weights_only=False)
        assert ckpt["global_step"] == 300
        assert ckpt["hyper_parameters"]["actor_lr"] == t.params["model.actor_lr"]
        assert yaml.safe_load((last.parents[1] / "config.yaml").read_text())["data"]["batch_size"] == t.params[
            "data.batch_size"]
        # what was reported is what Lightning's checkpoint callback saw: its best is the best report
        scores = [v["best_model_score"] for k, v in ckpt["callbacks"].items() if k.startswith("ModelCheckpoint")]
        assert float(scores[0]) == pytest.approx(max(t.intermediate_values.values()), abs=1e-3)
    assert "study pendulum in sqlite:///study.db: 2 trial(s) so far; running 1 more" in (
        study_dir / "third_stdout.txt").read_text()


def test_the_table_lists_every_trial_and_marks_the_best(study_dir):
    study = _study(study_dir)
    text = (study_dir / "third_stdout.txt").read_text()
    table = text[text.index("trial  state"):].splitlines()
    assert table[0].split() == ["trial", "state", "val/return", "model.actor_lr", "data.batch_size"]
    rows = {r.split()[0].rstrip("*"): r.split() for r in table[1:4]}
    assert sorted(rows) == ["0", "1", "2"]
    for t in study.trials:
        row = rows[str(t.number)]
        assert row[0] == f"{t.number}*" if t.number == study.best_trial.number else str(t.number)
        assert row[1:] == ["COMPLETE", f"{t.value:.2f}", f"{t.params['model.actor_lr']:.4g}",
                           str(t.params["data.batch_size"])]
    assert f"best: trial {study.best_trial.number} (val/return {study.best_value:.2f})" in text


def test_best_config_is_a_config_that_fit_takes_as_it_is(study_dir, cli_env):
    best = _study(study_dir).best_trial
    config = yaml.safe_load((study_dir / "best_config.yaml").read_text())
    assert config["model"]["actor_lr"] == best.params["model.actor_lr"]
    assert config["data"]["batch_size"] == best.params["data.batch_size"]
    assert config["trainer"]["max_steps"] == 300 and config["trainer"]["default_root_dir"] is None
    header = (study_dir / "best_config.yaml").read_text().splitlines()[:3]
    assert header[0].endswith(f"trial {best.number}, val/return {best.value:.2f} (its last validation)")
    assert header[1:] == ["#   python -m td3_lightning fit --config best_config.yaml",
                          "# a trial's length is in it (trainer.max_steps 300): a full run overrides it, e.g. "
                          "--trainer.max_steps 3000"]
    run = study_dir / "refit"
    run.mkdir()
    proc = subprocess.run([sys.executable, "-m", "td3_lightning", "fit", "--config", "../best_config.yaml"], cwd=run,
                          env={**cli_env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the same seed and parameters: the fit repeats the best trial exactly
    ours = torch.load(_last_ckpt(run), weights_only=False)["state_dict"]
    trial = torch.load(_last_ckpt(study_dir / "tune" / "pendulum" / f"trial_{best.number}"), weights_only=False)
    assert ours.keys() == trial["state_dict"].keys()
    for name, tensor in ours.items():
        assert torch.equal(tensor, trial["state_dict"][name]), name


def test_another_search_in_the_same_study_is_refused(study_dir, cli_env):
    proc = _tune(study_dir, cli_env, "--storage", "sqlite:///study.db", "--n_trials", "1")  # the default space
    _out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(
        "error: study pendulum in sqlite:///study.db was run with other values: space data.batch_size "
        '{"type": "categorical", "choices": [32, 64]} in the study, {"type": "categorical", "choices": [64, 128, 256]} '
        "now; ")
    assert lines[0].endswith("run it with the same config, fit options and space, or pass another --study_name")
    assert len(_study(study_dir).trials) == 3 and not (study_dir / "tune" / "pendulum" / "trial_3").exists()


def test_a_pruned_trial_stops_cleanly_at_the_validation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = ["--config", str(Path(tune_module.__file__).parent / "configs" / "pendulum.yaml"), *TINY]
    study = optuna.create_study(direction="maximize", pruner=optuna.pruners.ThresholdPruner(lower=1e9))
    tune_module.run_study(study, base, SPACE, tmp_path / "runs", n_trials=1)
    (trial,) = study.trials
    assert trial.state.name == "PRUNED" and list(trial.intermediate_values) == [100]
    folder = tmp_path / "runs" / "trial_0"
    ckpt = torch.load(_last_ckpt(folder), weights_only=False)
    assert ckpt["global_step"] == 100  # stopped right after the validation that was pruned
    assert ckpt["ReplayDataModule"]["replay"]["size"] == 200  # 100 warm-up + 100 steps: nothing half-collected
    assert [p.name for p in folder.rglob("*") if p.name.startswith(".") or p.suffix == ".tmp"] == []


def test_default_pruner_is_the_median_pruner(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seen = {}
    monkeypatch.setattr(tune_module, "run_study", lambda study, *a: seen.setdefault("pruner", study.pruner))
    main(["tune", "--config", "pendulum.yaml", "--n_trials", "1", *TINY, "--pruner_warmup_steps", "200"])
    pruner = seen["pruner"]
    assert isinstance(pruner, optuna.pruners.MedianPruner)
    assert (pruner._n_startup_trials, pruner._n_warmup_steps) == (5, 200)


def test_the_default_space_leaves_tau_out_under_hard_target_updates(tmp_path, monkeypatch):
    """With model.target_update_every (TD7's hard target updates) the Polyak rate is not used: not searched."""
    monkeypatch.chdir(tmp_path)
    seen = {}
    monkeypatch.setattr(tune_module, "run_study", lambda study, base, space, *a: seen.setdefault("space", space))
    main(["tune", "--config", "pendulum.yaml", "--n_trials", "1", *TINY, "--model.target_update_every", "100"])
    assert "model.tau" not in seen["space"] and "model.actor_lr" in seen["space"]
    seen.clear()
    main(["tune", "--config", "pendulum.yaml", "--n_trials", "1", *TINY, "--study_name", "soft"])
    assert "model.tau" in seen["space"]
    seen.clear()  # no target networks (CrossQ): tau idle as well
    main(["tune", "--config", "pendulum.yaml", "--n_trials", "1", *TINY, "--model.target_networks", "false",
          "--study_name", "no_targets"])
    assert "model.tau" not in seen["space"] and "model.actor_lr" in seen["space"]


def test_a_given_space_entry_that_does_nothing_in_the_config_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump({**SPACE, "model.tau": {"type": "float", "low": 1e-3,
                                                                                  "high": 1e-2}}))
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--config", "pendulum.yaml", "--n_trials", "1", *TINY, "--space", "space.yaml",
              "--model.target_networks", "false"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("error: space entry model.tau does nothing in this config "
                                       "(model.target_networks false): its trials would not differ; leave it out of "
                                       "the space\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["space.yaml"]
    from td3_lightning.tune import without_idle_entries

    model = Namespace(target_networks=True, target_update_every=250, encoder="none", encoder_features=64,
                      exploration_noise_final=None, lr_final_factor=1.0, schedule_steps=1000)
    config = types.SimpleNamespace(config=Namespace(model=model, data=Namespace(sampler="uniform")))
    tau = {"model.tau": {"type": "float", "low": 1e-3, "high": 1e-2}}
    hard = {"model.target_update_every": {"type": "categorical", "choices": [0, 250]}}
    assert without_idle_entries(config, {**tau, **hard}, given=True) == {**tau, **hard}  # searched with what idles it
    assert without_idle_entries(config, {**tau, **SPACE}, given=False) == SPACE
    features = {"model.encoder_features": {"type": "int", "low": 32, "high": 64},
                "model.encoder": {"type": "categorical", "choices": ["none", "cnn"]}}
    assert without_idle_entries(config, features, given=True) == features  # the cnn trials read it
    schedule = {"model.schedule_steps": {"type": "int", "low": 100, "high": 1000},
                "model.exploration_noise": {"type": "float", "low": 0.1, "high": 0.2}}
    with pytest.raises(UserInputError, match="space entry model.schedule_steps does nothing in this config"):
        without_idle_entries(config, schedule, given=True)  # no trial has a schedule


def test_the_checks_before_the_study_say_each_warning_once_as_a_warning_line(tmp_path, monkeypatch, cli_env):
    """The dry run builds the config at each edge of the space: its warnings (an idle option here) are said once, and
    in a fresh process as fit says them, ``warning: ...`` (tune imports Lightning, which sets a format of its own,
    after ``__main__`` set this package's)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tune_module, "run_study", lambda *a: None)
    args = ["tune", "--config", "pendulum.yaml", "--n_trials", "1", *TINY, "--model.critic_range", "auto"]
    idle = ("model.critic_range auto (model.critic_bins 0): set but idle in this run; leave it out, or where a config "
            "sets it give --model.critic_range null")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(args)
    assert [str(w.message) for w in caught if "critic_range" in str(w.message)] == [idle]
    fresh = ("import sys; from td3_lightning import tune; from td3_lightning.__main__ import main; "
             "tune.run_study = lambda *a: None; main(sys.argv[1:])")
    out = subprocess.run([sys.executable, "-c", fresh, *args, "--study_name", "fresh"], cwd=tmp_path,
                         env={**cli_env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [line for line in out.stderr.splitlines() if "critic_range" in line] == [f"warning: {idle}"]


@pytest.mark.parametrize(
    "args, space, message",
    [
        (["--n_trials", "0"], None, "error: --n_trials must be >= 1, got 0"),
        ([], {"model.actr_lr": {"type": "float", "low": 1e-4, "high": 1e-3}},
         ("error: space entry model.actr_lr: no fit option of that name (did you mean model.actor_lr?); the names are "
         "fit options as --help lists them without the dashes, e.g. model.actor_lr")),
        ([], {"model.tau": {"type": "float", "low": 0.02, "high": 0.01}},
         "error: space entry model.tau: low must be below high, got low=0.02 high=0.01"),
        ([], {"data.batch_size": {"type": "categorical", "choices": [64, "many"]}},
         ("error: space entry data.batch_size: 'many' is not a valid value (invalid value for data.batch_size: "
         "expected an int, got 'many')")),
        ([], {"model.tau": {"type": "flot", "low": 0.001, "high": 0.01}},
         ("error: space entry model.tau: type must be float, int or categorical, got 'flot'; "
         "e.g. {type: float, low: 1e-4, high: 1e-3, log: true}")),
        (["--storage", "sqlite:////no/such/folder/tune.db"], None,
         ("error: cannot open the storage sqlite:////no/such/folder/tune.db "
         "(OperationalError: (sqlite3.OperationalError)"
         " unable to open database file); pass a database URL that can be opened to --storage, e.g. "
         "sqlite:///tune.db or postgresql://user:password@host/db")),
        (["--model.gama", "0.9"], None, ("error: unknown option --model.gama (did you mean --model.gamma?); --help "
         "lists the options")),
        # before: a whole trial trained, then Optuna's traceback and a FAIL trial in the database
        (["--trainer.max_steps", "200", "--trainer.val_check_interval", "1000"], None,
         ("error: trainer.val_check_interval 1000 is above trainer.max_steps 200: a trial would train 200 steps "
          "without a validation, so without a val/return for Optuna; set --trainer.val_check_interval to at most 200 "
          "(or raise --trainer.max_steps)")),
        (["--trainer.limit_val_batches", "0"], None,
         ("error: trainer.limit_val_batches 0 leaves every trial without a validation, so without a val/return for "
          "Optuna; leave it unset or above 0")),
        (["--trainer.max_steps", "-5"], None,
         "error: trainer.max_steps must be at least 1 training step, or -1 for no limit; got -5"),
        # before: trials ran until one drew a value out of the option's range, then Optuna's traceback and a FAIL
        # trial in the database
        ([], {"model.gamma": {"type": "float", "low": 0.5, "high": 1.5}},
         ("error: space entry model.gamma: high 1.5 is out of the option's range: model.gamma must be in [0, 1], "
          "got 1.5; keep the space inside it")),
        ([], {"model.actor_lr": {"type": "float", "low": -1e-3, "high": 1e-3}},
         ("error: space entry model.actor_lr: low -0.001 is out of the option's range: model.actor_lr must be > 0, "
          "got -0.001; keep the space inside it")),
        ([], {"data.batch_size": {"type": "categorical", "choices": [64, 0]}},
         ("error: space entry data.batch_size: choice 0 is out of the option's range: data.batch_size must be >= "
          "1, got 0; keep the space inside it")),
        ([], {"data.batch_size": {"type": "float", "low": 16, "high": 64}},
         ("error: space entry data.batch_size: 16.0 is not a valid value (invalid value for data.batch_size: "
          "expected an int, got '16.0'); use type: int")),
        # what Lightning refuses only while a trial builds its Trainer: said before the study is opened
        (["--trainer.accelerator", "bogus"], None,
         ("error: Lightning refuses trainer.accelerator 'bogus': You selected an invalid accelerator name: "
          "`accelerator='bogus'`. Available names are: ")),
        # what fit refuses only while a trial builds env and model: each edge of the space is built first
        # (before: the first trial to draw it failed with Optuna's report)
        ([], {"data.env_id": {"type": "categorical", "choices": ["Pendulum-v1", "CartPole-v1"]}},
         ("error: space entry data.env_id: a trial with choice 'CartPole-v1' would be refused ('CartPole-v1' has a "
          "Discrete(2) action space; TD3 needs a continuous Box action space (for LunarLander-v3 set data.env_kwargs "
          "'{continuous: true}')); keep the space to values fit takes")),
        ([], {"model.random_shift": {"type": "int", "low": 0, "high": 4}},
         ("error: space entry model.random_shift: a trial with high 4 would be refused (model.random_shift shifts "
          "image observations, and these are vectors of shape (3,); set model.random_shift 0); keep the space to "
          "values fit takes")),
        (["--sampler_seed", "-1"], None, "error: --sampler_seed must be in [0, 4294967295], got -1"),
        # before: Optuna's traceback, after the study's database was made; `log: 'no'` searched a log scale
        ([], {"model.tau": {"type": "float", "low": 0.001, "high": 0.01, "step": -1}},
         "error: space entry model.tau: step must be a float above 0 (or left out), got -1"),
        ([], {"data.batch_size": {"type": "int", "low": 64, "high": 256, "step": 0.5}},
         "error: space entry data.batch_size: step must be an int above 0 (or left out), got 0.5"),
        ([], {"model.tau": {"type": "float", "low": 0.001, "high": 0.01, "log": "no"}},
         "error: space entry model.tau: log must be true or false, got 'no'"),
        ([], "model.tau: {type: float, low: 0.001, high: 0.01}\nmodel.tau: {type: float, low: 0.002, high: 0.02}\n",
         "error: space file SPACE gives `model.tau` twice (lines 1 and 2): the second would silently replace the "
         "first; keep one"),
        # before: written here, from then on `--config pendulum.yaml` in this folder read it, not the bundled one
        (["--best_config", "pendulum.yaml"], None,
         ("error: --best_config pendulum.yaml has the name of a bundled config: here `--config pendulum.yaml` would "
          "read it instead of the bundled one; give another name, e.g. --best_config best_config.yaml")),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(args, space, message, tmp_path, tmp_path_factory, monkeypatch,
                                                   capsys):
    extra = []
    if space is not None:
        file = tmp_path_factory.mktemp("space") / "space.yaml"
        file.write_text(space if isinstance(space, str) else yaml.safe_dump(space))  # text: as written by hand
        extra = ["--space", str(file)]
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["tune", "--config", "pendulum.yaml", *TINY, *extra, *args])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    message = message.replace("SPACE", str(extra[-1]) if extra else "")
    assert err == message or (message.endswith(": ") and err.startswith(message) and "\n" not in err), err
    assert list(tmp_path.iterdir()) == []


def _tune_without_trials(monkeypatch, *args: str) -> list[int]:
    """``tune`` up to its trials (the study is opened and checked, no trial runs); the calls of run_study."""
    calls = []
    monkeypatch.setattr(tune_module, "run_study", lambda *a: calls.append(1))
    main(["tune", "--config", "pendulum.yaml", "--n_trials", "1", "--storage", "sqlite:///study.db", *TINY, *args])
    return calls


def test_a_study_is_the_same_search_by_value_however_the_options_are_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _tune_without_trials(monkeypatch, "--trainer.max_steps", "300", "--data.batch_size", "64") == [1]
    # before: refused, because the text of the options differed
    assert _tune_without_trials(monkeypatch, "--trainer.max_steps=300", "--data.batch_size=64") == [1]
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        _tune_without_trials(monkeypatch, "--trainer.max_steps=400", "--data.batch_size=64", "--model.gamma", "0.9")
    assert info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: study pendulum in sqlite:///study.db was run with other values: model.gamma 0.98 in the study, 0.9 "
        "now; trainer.max_steps 300 in the study, 400 now; run it with the same config, fit options and space, or "
        "pass another --study_name"]
    # what only changes what a run shows is no other search
    assert _tune_without_trials(monkeypatch, "--trainer.max_steps=300", "--data.batch_size=64",
                                "--progress_bar.log_seconds", "5") == [1]


def test_the_budget_check_takes_the_bounds_of_the_space():
    from td3_lightning.errors import UserInputError

    config = str(Path(tune_module.__file__).parent / "configs" / "pendulum.yaml")
    cli = tune_module._build_cli(["--config", config, "--trainer.val_check_interval", "100"], instantiate=False)
    with pytest.raises(UserInputError, match=r"^trainer.val_check_interval 100 is above trainer.max_steps 50: "):
        tune_module.check_budget(cli, {"trainer.max_steps": {"type": "int", "low": 50, "high": 500}})
    with pytest.raises(UserInputError, match=r"^trainer.val_check_interval 400 is above trainer.max_steps 300: "):
        tune_module.check_budget(cli, {"trainer.max_steps": {"type": "categorical", "choices": [300, 1000]},
                                       "trainer.val_check_interval": {"type": "int", "low": 100, "high": 400}})
    tune_module.check_budget(cli, {"trainer.max_steps": {"type": "int", "low": 100, "high": 500}})


def test_a_space_file_reads_numbers_as_fit_configs_do(tmp_path):
    # YAML 1.1 reads 3e-3 (an exponent without a dot) as a string; fit configs read it as a number
    file = tmp_path / "space.yaml"
    file.write_text("model.actor_lr: {type: float, low: 1e-4, high: 3e-3, log: true}\n"
                    "model.tau: {type: float, low: 1.5e-3, high: 2E-2}\n"
                    "data.batch_size: {type: categorical, choices: [32, 64]}\n")
    space = tune_module.load_space(str(file))
    assert space["model.actor_lr"] == {"type": "float", "low": 1e-4, "high": 3e-3, "log": True}
    assert space["model.tau"]["low"] == 1.5e-3 and space["model.tau"]["high"] == 2e-2
    assert space["data.batch_size"]["choices"] == [32, 64]


def test_without_optuna_it_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "optuna", None)  # `import optuna` raises ImportError
    with pytest.raises(SystemExit) as info:
        main(["tune", "--config", "pendulum.yaml", "--n_trials", "2"])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "error: tune needs Optuna, which is not installed: install td3_lightning's tune extra, "
        'pip install -c constraints.txt -e ".[tune]"')
    assert list(tmp_path.iterdir()) == []


def test_help_shows_the_default_space(capsys):
    with pytest.raises(SystemExit) as info:
        main(["tune", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for name, entry in tune_module.DEFAULT_SPACE.items():
        assert f"  {name}: {json.dumps(entry)}" in text
    for option in ("--storage", "--study_name", "--n_trials", "--space", "--study_dir", "--best_config", "--pruner"):
        assert option in text


@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_in_a_trial_ends_the_study_with_the_signals_status(sig, code, tmp_path):
    """A scheduler's SIGTERM in a trial: 143, as a fit's (Lightning's own status: 0); Ctrl-C: 130."""
    import signal as signals

    proc = subprocess.Popen([sys.executable, "-m", "td3_lightning", "tune", "--config", "pendulum.yaml", "--storage",
                             "sqlite:///study.db", "--n_trials", "1", *TINY, "--trainer.max_steps", "1000000"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signals.signal(signals.SIGINT, signals.SIG_DFL))
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("**/trial_0/**/config.yaml")):  # the trial's fit has begun
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    time.sleep(2.0)
    proc.send_signal(getattr(signals, sig))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, (proc.returncode, err[-2000:])
    assert err.strip().splitlines()[-1] == ("interrupted: the study keeps its trials (the interrupted one as FAIL); "
                                            "run the same command again to continue it"), err[-6000:]


def test_a_storage_that_refuses_writes_is_one_line(tmp_path, monkeypatch, capsys):
    import sqlite3

    def read_only(*args, **kwargs):
        try:
            raise sqlite3.OperationalError("attempt to write a readonly database")
        except sqlite3.OperationalError as err:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from err

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(optuna.storages.RDBStorage, "set_study_user_attr", read_only)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE, sort_keys=False))
    with pytest.raises(SystemExit) as exit_info:  # before: a StorageInternalError traceback
        main(["tune", "--config", "pendulum.yaml", "--storage", "sqlite:///study.db", "--space", "space.yaml",
              "--n_trials", "1", *TINY])
    line = ("error: the storage sqlite:///study.db failed a write (attempt to write a readonly database); make sure "
            "the database can be written (a writable file, space on its disk, no lock held elsewhere), then run the "
            "same command again")
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == line
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(optuna.study.Study, "ask", read_only)  # a trial of the open study: its storage refuses
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "--config", "pendulum.yaml", "--storage", "sqlite:///study.db", "--space", "space.yaml",
              "--n_trials", "1", *TINY])
    assert exit_info.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1] == line


def test_a_full_disk_in_a_trial_is_one_line_and_the_study_keeps_its_trials(tmp_path, monkeypatch, capfd):
    import errno
    import threading

    from lightning.pytorch.loggers import TensorBoardLogger

    from td3_lightning.cli import _thread_exception

    hooks = []

    def events_then_full(self, metrics, step=None):
        if step >= 200:  # the writer thread fails first (told by the hook), then hands its error on to this write
            hooks.append(threading.excepthook)
            raise RuntimeError("event writer failed") from OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(TensorBoardLogger, "log_metrics", events_then_full)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE, sort_keys=False))
    hook = threading.excepthook
    with pytest.raises(SystemExit) as exit_info:  # before: a RuntimeError traceback, and Optuna's with it
        main(["tune", "--config", "pendulum.yaml", "--storage", "sqlite:///study.db", "--space", "space.yaml",
              "--n_trials", "2", *TINY])
    err = capfd.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and "failed with" not in err, err
    assert [getattr(hook, "func", None) for hook in hooks] == [_thread_exception]  # TensorBoard's thread: quiet
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: writing {tmp_path / 'tune/pendulum/trial_0/lightning_logs/version_0'} failed: "
                           "No space left on device (")
    assert line.endswith("free some space; then run the same command again: the study keeps its trials (trial 0 "
                         "as FAIL)")
    assert threading.excepthook is hook
    study = optuna.load_study(study_name="pendulum", storage="sqlite:///study.db")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]


def test_ctrl_c_in_a_trial_is_one_line_and_the_study_keeps_the_trial(tmp_path, monkeypatch, capfd):
    def interrupted(trial, *args):
        raise KeyboardInterrupt  # what run_trial raises when Lightning ends a fit on Ctrl+C

    class Records(logging.Handler):  # what Optuna's own handler would print
        def __init__(self):
            super().__init__()
            self.lines = []

        def emit(self, record):
            self.lines.append(self.format(record))

    optuna_log = Records()
    logging.getLogger("optuna").addHandler(optuna_log)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tune_module, "run_trial", interrupted)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE, sort_keys=False))
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(["tune", "--config", "pendulum.yaml", "--storage", "sqlite:///study.db", "--space", "space.yaml",
                  "--n_trials", "3", *TINY])
    finally:
        logging.getLogger("optuna").removeHandler(optuna_log)
    assert exit_info.value.code == 130
    # before: "Trial 0 failed ... KeyboardInterrupt()", its traceback, "failed with value"
    assert optuna_log.lines == []
    err = capfd.readouterr().err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and "failed with" not in err, err
    assert err.strip().splitlines()[-1] == ("interrupted: the study keeps its trials (the interrupted one as FAIL); "
                                            "run the same command again to continue it")
    study = optuna.load_study(study_name="pendulum", storage="sqlite:///study.db")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.FAIL]
