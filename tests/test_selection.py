"""``--selection.episodes``: the kept checkpoints played on more episodes when fit ends, the winner made ``best``."""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch

from td3_lightning import TD3, selection
from td3_lightning.__main__ import main
from td3_lightning.checkpointing import SELECTION_FILE, ModelCheckpoint, find_run_checkpoint, choosing_episodes_tested
from td3_lightning.errors import UserInputError
from td3_lightning.selection import CheckpointSelection, choose, play, rank_key, summarize


def test_successes_rank_first_then_the_mean_return():
    summaries = {
        "a.ckpt": {"successes": 9, "return": 931.0},
        "b.ckpt": {"successes": 10, "return": 920.0},
        "c.ckpt": {"successes": 10, "return": 925.0},
    }
    assert choose(summaries) == "c.ckpt"
    assert rank_key(summaries["a.ckpt"]) < rank_key(summaries["b.ckpt"])
    no_success = {"a.ckpt": {"successes": None, "return": -150.0}, "b.ckpt": {"successes": None, "return": -140.0}}
    assert choose(no_success) == "b.ckpt"
    tie = {"a.ckpt": {"successes": 3, "return": 1.0}, "b.ckpt": {"successes": 3, "return": 1.0}}
    assert choose(tie) == "a.ckpt"  # the first listed


def test_summary_of_episodes():
    episodes = [{"return": 1.0, "success": 1.0}, {"return": 2.0, "success": 0.0}, {"return": 6.0, "success": 1.0}]
    s = summarize(episodes)
    assert s["return"] == 3.0 and s["return_min"] == 1.0 and s["episodes"] == 3 and s["successes"] == 2
    assert math.isclose(s["return_std"], math.sqrt(14 / 3))
    assert summarize([{"return": 5.0, "success": math.nan}])["successes"] is None  # the env reports none


def _folder_with_two_best(tmp_path: Path) -> Path:
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "best-step10.ckpt").write_bytes(b"a")
    (folder / "best-step20.ckpt").write_bytes(b"b")
    os.utime(folder / "best-step10.ckpt", ns=(1_000_000_000, 1_000_000_000))  # step 20 is the newer file
    return folder


_BOTH = {"best-step10.ckpt": {}, "best-step20.ckpt": {}}


def test_best_is_the_selected_checkpoint(tmp_path):
    folder = _folder_with_two_best(tmp_path)
    config = {"trainer": {"default_root_dir": str(tmp_path)}}
    assert find_run_checkpoint(config, "best") == folder / "best-step20.ckpt"  # the newest, without a selection
    (folder / SELECTION_FILE).write_text(json.dumps({"chosen": "best-step10.ckpt", "candidates": _BOTH}))
    assert find_run_checkpoint(config, "best") == folder / "best-step10.ckpt"
    (folder / "last.ckpt").write_bytes(b"c")
    assert find_run_checkpoint(config, "last") == folder / "last.ckpt"  # last is last, selection or not
    # a selection older than the newest best checkpoint (a later run that selected nothing) is not used
    os.utime(folder / SELECTION_FILE, ns=(2_000_000_000, 2_000_000_000))
    assert find_run_checkpoint(config, "best") == folder / "best-step20.ckpt"


@pytest.mark.parametrize("content, says", [
    ("{not json", "is not a selection this package wrote"),
    (json.dumps({"chosen": "best-step10.ckpt"}), "is not a selection this package wrote (KeyError"),
    (json.dumps({"chosen": "best-step10.ckpt", "candidates": 5}), "wrote (TypeError: its candidates are int, not "),
    (json.dumps({"chosen": "best-step30.ckpt", "candidates": {"best-step30.ckpt": {}}}), "best-step30.ckpt, which is"),
    (json.dumps({"chosen": "../notes.txt", "candidates": {"../notes.txt": {}}}), "notes.txt, which is"),
    (json.dumps({"chosen": "last.ckpt", "candidates": {"last.ckpt": {}}}), "last.ckpt, which is"),
    (json.dumps({"chosen": "best-step10.ckpt", "candidates": {"best-step20.ckpt": {}}}), "best-step10.ckpt, which is"),
])
def test_a_broken_selection_file_is_one_line(tmp_path, content, says):
    folder = _folder_with_two_best(tmp_path)
    (folder.parent / "notes.txt").write_text("d")  # a file, but not a checkpoint
    (folder / "last.ckpt").write_bytes(b"c")  # a checkpoint, but never a candidate
    (folder / SELECTION_FILE).write_text(content)
    with pytest.raises(UserInputError, match=re.escape(says)) as err:
        find_run_checkpoint({"trainer": {"default_root_dir": str(tmp_path)}}, "best")
    assert "\n" not in str(err.value) and "--ckpt_path" in str(err.value)


def _trainer_keeping(paths: list[Path]) -> SimpleNamespace:
    return SimpleNamespace(global_rank=0, checkpoint_callback=SimpleNamespace(
        best_k_models={str(p): 0.0 for p in paths}, monitor="val/return"),
        datamodule=SimpleNamespace(make_eval_env=lambda: gym.make("Pendulum-v1")))


def test_nothing_to_choose_among_is_said_and_best_stays(tmp_path, capsys):
    (tmp_path / "best-step10.ckpt").write_bytes(b"a")
    trainer = _trainer_keeping([tmp_path / "best-step10.ckpt", tmp_path / "gone.ckpt"])
    CheckpointSelection(episodes=3).on_fit_end(trainer, TD3([3], [-2.0], [2.0]))
    assert "1 kept checkpoint(s) on disk, nothing to choose among" in capsys.readouterr().out
    assert not (tmp_path / SELECTION_FILE).exists()


def test_a_candidate_that_cannot_be_read_is_skipped_with_a_line(tmp_path, capsys):
    paths = [tmp_path / "best-step10.ckpt", tmp_path / "best-step20.ckpt"]
    for path in paths:
        path.write_bytes(b"not a checkpoint")
    CheckpointSelection(episodes=3).on_fit_end(_trainer_keeping(paths), TD3([3], [-2.0], [2.0]))
    out = capsys.readouterr().out
    assert "selection: skipped best-step10.ckpt (" in out and "selection: skipped best-step20.ckpt (" in out
    assert "no candidate could be played; best stays the run's best by val/return" in out
    assert not (tmp_path / SELECTION_FILE).exists()


def test_fit_selects_among_the_kept_checkpoints_and_test_takes_the_choice(tmp_path, monkeypatch, capsys, lightning_log):
    monkeypatch.chdir(tmp_path)
    real_choose, made = selection.choose, []
    # the first kept (the oldest file) is made the choice, so that `best` is not simply the newest best checkpoint
    monkeypatch.setattr(selection, "choose",
                        lambda summaries: made.append(real_choose(summaries)) or next(iter(summaries)))
    common = ["--config", "pendulum.yaml", "--model.hidden_dims", "[16]", "--data.eval_episodes", "1"]
    main(["fit", *common, "--trainer.max_steps", "48", "--trainer.val_check_interval", "16",
          "--data.warmup_steps", "50", "--checkpoint.save_top_k", "2",
          "--selection.episodes", "2", "--selection.seed", "7", "--data.test_seed", "100"])  # apart from test's
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    kept = sorted(p.name for p in folder.glob("best-step*.ckpt"))
    result = json.loads((folder / SELECTION_FILE).read_text())
    assert len(kept) == 2 and sorted(result["candidates"]) == kept
    assert result["episodes"] == 2 and result["seed"] == 7 and result["monitor"] == "val/return"
    oldest = min(kept, key=lambda name: (folder / name).stat().st_mtime_ns)
    assert result["chosen"] == oldest != max(kept, key=lambda name: (folder / name).stat().st_mtime_ns)
    best_return = max(c["return"] for c in result["candidates"].values())  # what the real choice took
    assert result["candidates"][Path(made[0]).name]["return"] == best_return
    # each candidate's figures are its policy's episodes on env seeds 7 and 8
    env = gym.make("Pendulum-v1")
    for name, summary in result["candidates"].items():
        policy = TD3.load_from_checkpoint(folder / name, map_location="cpu").policy.eval()
        assert summary == summarize(play(policy, env, [7, 8]))
    assert f"selection: best is {folder / result['chosen']}" in capsys.readouterr().out
    main(["test", *common, "--data.test_episodes", "1"])
    said = f"checkpoint: {folder / result['chosen']} (--ckpt_path best, the default of test, chosen in selection.json)"
    assert said in lightning_log.text


def test_a_test_on_the_episodes_that_chose_the_checkpoints_is_warned_of(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = ["--config", "pendulum.yaml", "--model.hidden_dims", "[16]", "--data.eval_episodes", "2",
              "--data.eval_seed", "500"]
    main(["fit", *common, "--trainer.max_steps", "32", "--trainer.val_check_interval", "16", "--data.warmup_steps",
          "50", "--checkpoint.save_top_k", "2", "--selection.episodes", "2", "--selection.seed", "7",
          "--data.test_seed", "100"])
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"

    def warned(test_seed: int, ckpt: str = "best") -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            main(["test", *common, "--data.test_episodes", "10", "--data.test_seed", str(test_seed),
                  "--ckpt_path", ckpt])
        return [str(w.message) for w in caught if "the test episodes" in str(w.message)]

    tail = ", on which the run chose its checkpoints: the test return is not an unbiased estimate; test on seeds of " \
           "their own, e.g. --data.test_seed 502"
    assert warned(495) == ["the test episodes (data.test_seed 495: seeds 495-504) share env seeds with its validation "
                           "episodes (seeds 500-501)" + tail]
    assert warned(0) == ["the test episodes (data.test_seed 0: seeds 0-9) share env seeds with its selection episodes "
                         "(seeds 7-8)" + tail]
    assert warned(100) == []
    assert warned(0, str(folder / "last.ckpt")) == []  # last.ckpt played no selection episode
    assert len(warned(500, str(folder / "last.ckpt"))) == 1  # but its run validated on seeds 500-501
    main(["export", "--out", str(tmp_path / "policy.ckpt")])  # the chosen one, slim: it keeps where it was chosen
    assert warned(0, str(tmp_path / "policy.ckpt")) == warned(0)


def test_a_run_without_a_monitor_chose_nothing_on_its_validation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = ["--config", "pendulum.yaml", "--model.hidden_dims", "[16]", "--data.eval_episodes", "2"]
    main(["fit", *common, "--trainer.max_steps", "32", "--trainer.val_check_interval", "16", "--data.warmup_steps",
          "50", "--checkpoint.monitor", "null"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(["test", *common, "--data.test_episodes", "2", "--data.test_seed", "1000", "--ckpt_path", "last"])
    assert [str(w.message) for w in caught if "test episodes" in str(w.message) or "callbacks" in str(w.message)] == []


@pytest.mark.parametrize("test_seed, episodes, says", [
    (0, 100, None), (1000, 100, "validation episodes (seeds 1000-1009)"), (990, 11, "validation"), (989, 11, None),
    (2_000_049, 1, "selection episodes (seeds 2000000-2000049)"),
    (5, 2_000_000, "(seeds 1000-1009) and its selection episodes (seeds 2000000-2000049), on which the run chose its "
                   "checkpoints: the test return is not an unbiased estimate; test on seeds of their own, e.g. "
                   "--data.test_seed 2000050"),
])
def test_which_test_seeds_share_the_choosing_episodes(test_seed, episodes, says):
    chosen_on = [("validation", 1000, 10), ("selection", 2_000_000, 50)]
    line = choosing_episodes_tested(test_seed, episodes, chosen_on)
    assert (line is None) if says is None else (says in line)


def test_the_kept_best_span_the_runs_a_resume_continued(tmp_path):
    paths = [tmp_path / f"best-step{n}.ckpt" for n in (10, 20, 30, 40)]
    for path in paths:
        path.write_bytes(b"x")
    callback = ModelCheckpoint(monitor="val/return", mode="max", save_top_k=2, dirpath=tmp_path / "new")
    callback.earlier_best_k_models = {str(paths[0]): torch.tensor(5.0), str(paths[1]): torch.tensor(1.0),
                                      str(tmp_path / "gone.ckpt"): torch.tensor(9.0)}
    callback.best_k_models = {str(paths[2]): torch.tensor(3.0), str(paths[3]): torch.tensor(2.0)}
    assert callback.kept_best() == [paths[0], paths[2]]  # the best two on disk by score, best first
    callback.save_top_k = -1
    assert callback.kept_best() == [paths[0], paths[2], paths[3], paths[1]]
    # a resume into a folder of its own remembers the best checkpoints of the run it continues, and of those before
    resumed = ModelCheckpoint(monitor="val/return", mode="max", save_top_k=2, dirpath=tmp_path / "newer")
    with pytest.warns(UserWarning, match="dirpath has changed"):  # Lightning's: its own best_k_models stay behind
        resumed.load_state_dict(callback.state_dict())
    assert set(resumed.earlier_best_k_models) == {*callback.earlier_best_k_models, *callback.best_k_models}
    assert resumed.kept_policies == {}  # none recorded (no policy checkpoints)
    callback.kept_policies = {"best-step10.ckpt": 3, "best-step30.ckpt": 4}
    with pytest.warns(UserWarning, match="dirpath has changed"):  # which policy each kept file holds goes on
        resumed.load_state_dict(callback.state_dict())
    assert resumed.kept_policies == {"best-step10.ckpt": 3, "best-step30.ckpt": 4}
    same_folder = ModelCheckpoint(monitor="val/return", mode="max", save_top_k=2, dirpath=tmp_path / "new")
    same_folder.load_state_dict(callback.state_dict())  # Lightning restores best_k_models itself there
    assert set(same_folder.earlier_best_k_models) == set(callback.earlier_best_k_models)
    assert set(same_folder.best_k_models) == set(callback.best_k_models)


def test_a_resumed_run_selects_among_the_checkpoints_of_both_parts(tmp_path, monkeypatch, capsys, lightning_log):
    monkeypatch.chdir(tmp_path)
    common = ["--config", "pendulum.yaml", "--model.hidden_dims", "[16]", "--data.eval_episodes", "1",
              "--trainer.val_check_interval", "16", "--data.warmup_steps", "50", "--checkpoint.save_top_k", "3"]
    main(["fit", *common, "--trainer.max_steps", "48"])  # three validations, three kept; no selection
    first, second = (tmp_path / "lightning_logs" / f"version_{v}" / "checkpoints" for v in (0, 1))
    earlier = sorted(first.glob("best-*.ckpt"))
    # one more validation after the resume: at least two of the whole run's best three are in the first folder
    chosen_first = []
    monkeypatch.setattr(selection, "choose", lambda summaries: chosen_first.append(
        next(p for p in summaries if Path(p).parent == first)) or chosen_first[0])
    main(["fit", *common, "--trainer.max_steps", "64", "--ckpt_path", "last", "--selection.episodes", "2"])
    saved = torch.load(second / "last.ckpt", map_location="cpu", weights_only=False)["callbacks"]
    state = next(v for k, v in saved.items() if k.startswith("ModelCheckpoint"))
    assert sorted(Path(p) for p in state["earlier_best_k_models"]) == earlier
    scores = {**state["earlier_best_k_models"], **state["best_k_models"]}
    top_three = sorted(scores, key=lambda p: float(scores[p]), reverse=True)[:3]
    result = json.loads((second / SELECTION_FILE).read_text())  # beside the newest best checkpoint
    assert {Path(os.path.normpath(second / name)) for name in result["candidates"]} == {Path(p) for p in top_three}
    assert result["chosen"] == f"../../version_0/checkpoints/{Path(chosen_first[0]).name}"
    assert find_run_checkpoint({"trainer": {"default_root_dir": str(tmp_path)}}, "best") == Path(chosen_first[0])
    main(["test", *common, "--data.test_episodes", "1"])
    assert f"checkpoint: {chosen_first[0]} (--ckpt_path best, the default of test, chosen in selection.json)" \
        in lightning_log.text


def test_a_resume_with_nothing_left_to_train_selects_beside_the_earlier_checkpoints(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    common = ["--config", "pendulum.yaml", "--model.hidden_dims", "[16]", "--data.eval_episodes", "1",
              "--trainer.val_check_interval", "16", "--data.warmup_steps", "50", "--checkpoint.save_top_k", "2",
              "--trainer.max_steps", "48"]
    main(["fit", *common])
    main(["fit", *common, "--ckpt_path", "last", "--selection.episodes", "2"])  # the run is over: select only
    first = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    result = json.loads((first / SELECTION_FILE).read_text())
    assert sorted(result["candidates"]) == sorted(p.name for p in first.glob("best-*.ckpt"))
    assert find_run_checkpoint({"trainer": {"default_root_dir": str(tmp_path)}}, "best") == first / result["chosen"]


def test_a_frozen_policy_validated_again_is_kept_once(tmp_path, monkeypatch):
    # policy checkpoints: validation plays the frozen policy, taken at most once per 200-step Pendulum episode, so
    # validations every 16 training steps play the same policy several times in a row with the same return
    monkeypatch.chdir(tmp_path)
    main(["fit", "--config", "pendulum.yaml", "--model.hidden_dims", "[16]", "--data.eval_episodes", "1",
          "--model.policy_checkpoints", "true", "--trainer.max_steps", "320", "--trainer.val_check_interval", "16",
          "--data.warmup_steps", "50", "--checkpoint.save_top_k", "-1"])
    folder = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    kept = sorted(folder.glob("best-step*.ckpt"), key=lambda p: int(re.search(r"step(\d+)", p.name).group(1)))
    versions = [int(torch.load(p, map_location="cpu", weights_only=False)["state_dict"]["policy_checkpoint.taken"])
                for p in kept]
    last = torch.load(folder / "last.ckpt", map_location="cpu", weights_only=False)
    taken = int(last["state_dict"]["policy_checkpoint.taken"])
    assert len(kept) < 320 // 16 == 20  # save_top_k -1 keeps every validation's policy, each once
    assert versions == sorted(set(versions)) and 1 <= len(versions) <= taken  # one file per policy, in order
    state = next(v for k, v in last["callbacks"].items() if k.startswith("ModelCheckpoint"))
    assert state["kept_policies"] == {p.name: v for p, v in zip(kept, versions)}
    # each kept file holds the policy it is recorded with: its frozen actor differs from every other kept one's
    actors = [TD3.load_from_checkpoint(p, map_location="cpu").policy.state_dict() for p in kept]
    for i in range(1, len(actors)):
        assert any(not torch.equal(actors[i][k], actors[i - 1][k]) for k in actors[i])
