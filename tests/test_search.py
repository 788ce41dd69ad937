"""Hyper-parameter search (zoo.search + hydra_plugins/zoo_optuna_sweeper): the search-space grammar, the pruning
callback against a real study, the sweeper's verdict on a job, bad input in one line, and one real resumed sweep."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import torch

from zoo.errors import ZooError
from zoo.testing import TINY, compose
from zoo.verbs import search

FAST = [*TINY, "task.data.image_size=16", "task.module.arch=resnet10t", "test_after_fit=false"]


@pytest.fixture(scope="module")
def vision_cfg():
    return compose([])


def test_search_space_follows_the_defaults_types(vision_cfg):
    space = search.search_space({
        "task.module.optimizer.lr": "tag(log, interval(1e-4, 1e-2))",
        "task.data.batch_size": "interval(16, 128)",  # an integer key: whole batch sizes
        "task.module.finetune": "choice(full, gradual)",
        "trainer.max_epochs": "range(1, 7, 2)",  # Hydra's range: 7 excluded
    }, vision_cfg)
    lr, bs = space["task.module.optimizer.lr"], space["task.data.batch_size"]
    assert isinstance(lr, optuna.distributions.FloatDistribution) and lr.log and (lr.low, lr.high) == (1e-4, 1e-2)
    assert isinstance(bs, optuna.distributions.IntDistribution) and (bs.low, bs.high) == (16, 128)
    assert space["task.module.finetune"].choices == ("full", "gradual")
    epochs = space["trainer.max_epochs"]
    assert (epochs.low, epochs.high, epochs.step) == (1, 5, 2)


@pytest.mark.parametrize("params, words", [
    ({"task.module.optimizer.lr": "interval(1e-4,"}, "does not parse"),
    ({"task.module.nope": "interval(1, 2)"}, "task.module.nope is not a key of task vision/resnet"),
    ({"task.data.batch_size": "interval(16.5, 64)"}, "16.5 in interval(16.5, 64) is not an integer"),
    ({"trainer.max_epochs": "choice(1, many)"}, "trainer.max_epochs='many' is not an integer"),
    ({"task.module.optimizer.lr": "tag(log, interval(0, 1))"}, "low > 0"),
    ({"task.module.optimizer.lr": "0.1"}, "is a single value"),
    ({}, "search space is empty"),
])
def test_bad_search_spaces_are_one_line(vision_cfg, params, words):
    with pytest.raises(ZooError, match=re.escape(words)) as e:
        search.search_space(params, vision_cfg)
    assert "\n" not in str(e.value)


def test_values_go_back_into_hydra_grammar():
    assert search.as_override("a.lr", 1e-05) == "a.lr=1e-05"
    assert search.as_override("a.mode", "linear_probe") == "a.mode=linear_probe"
    assert search.as_override("a.name", "x y") == "a.name='x y'"
    assert search.as_override("a.flag", "true") == "a.flag='true'"  # the string, not the boolean
    cmd = search.best_command(["+hparams_search=vision", "hydra.sweeper.n_trials=3", "trainer.max_epochs=2"],
                              {"task.module.optimizer.lr": 0.001})
    assert cmd == "python -m zoo train trainer.max_epochs=2 task.module.optimizer.lr=0.001"


def test_sweeper_settings_are_checked(tmp_path, vision_cfg):
    sweeper = _sweeper(tmp_path)
    sweeper.config, sweeper.n_trials = vision_cfg, 0
    with pytest.raises(ZooError, match="n_trials=0"):
        sweeper._sweep([])


def test_storage_errors_are_one_line_without_the_password(tmp_path):
    with pytest.raises(ZooError, match="cannot open the study storage") as e:
        search.open_storage("postgresql://me:secret@127.0.0.1:1/zoo")
    assert "secret" not in str(e.value) and "me:***@" in str(e.value)
    with pytest.raises(ZooError, match="cannot open the study storage"):
        search.open_storage("nosuchdb://x")
    (tmp_path / "file").write_text("")
    with pytest.raises(ZooError, match="cannot create"):
        search.storage_url(f"sqlite:///{tmp_path / 'file' / 'x.db'}", tmp_path)
    url = search.storage_url(None, tmp_path / "deep" / "sweep")  # SQLite's folder is created
    assert url == f"sqlite:///{tmp_path / 'deep' / 'sweep' / 'optuna.db'}"
    search.open_storage(url)


def _study(tmp_path: Path):
    url = search.storage_url(None, tmp_path)
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    good = study.ask()
    for step, v in enumerate([0.8, 0.9], start=1):
        good.report(v, step)
    study.tell(good, 0.9)
    return url, study


def _trainer(value: float):
    return SimpleNamespace(is_global_zero=True, sanity_checking=False, should_stop=False,
                           callback_metrics={"val/acc": torch.tensor(value)},
                           strategy=SimpleNamespace(broadcast=lambda x, src=0: x))


def test_pruning_callback_stops_a_worse_trial_and_spares_a_better_one(tmp_path):
    url, study = _study(tmp_path)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0)
    for value, pruned in ((0.1, True), (0.95, False)):
        trial = study.ask()
        callback = search.OptunaPruning(url, "s", trial._trial_id, "val/acc", pruner)
        trainer = _trainer(value)
        callback.setup(trainer, None, "fit")
        callback.on_validation_end(trainer, None)
        assert trainer.should_stop is pruned
        frozen = study._storage.get_trial(trial._trial_id)
        assert frozen.intermediate_values == {1: pytest.approx(value)}
        assert ("pruned_at" in frozen.user_attrs) is pruned
    # A run resumed after its trial finished (ckpt_path= of a trial's run) no longer reports to it
    done = study.trials[0]
    callback = search.OptunaPruning(url, "s", done._trial_id, "val/acc", pruner)
    callback.setup(_trainer(0.0), None, "fit")
    assert callback.trial is None


def _sweeper(tmp_path: Path):
    from omegaconf import OmegaConf

    from hydra_plugins.zoo_optuna_sweeper.zoo_optuna_sweeper import ZooOptunaSweeper, ZooOptunaSweeperConf

    conf = OmegaConf.to_container(OmegaConf.structured(ZooOptunaSweeperConf))
    sweeper = ZooOptunaSweeper(**{k: v for k, v in conf.items() if not k.startswith("_")})
    sweeper.objective = "val/acc"
    return sweeper


@pytest.mark.parametrize("outcome, state, note", [
    ({"val/acc": 0.75}, "COMPLETE", ""),
    ({"val/acc": float("nan")}, "FAIL", "val/acc is nan"),
    ({"test/acc": 0.5}, "FAIL", "returned no val/acc"),
    (ZooError("task.data.root: no such folder"), "FAIL", "no such folder"),
    (RuntimeError("boom"), "FAIL", "RuntimeError: boom"),
])
def test_a_jobs_outcome_becomes_the_trials_state(tmp_path, capsys, outcome, state, note):
    from hydra.core.utils import JobReturn, JobStatus

    _, study = _study(tmp_path)
    trial = study.ask()
    failed = isinstance(outcome, Exception)
    result = JobReturn(status=JobStatus.FAILED if failed else JobStatus.COMPLETED, _return_value=outcome)
    got, error = _sweeper(tmp_path)._tell(study, trial, result)
    frozen = study._storage.get_trial(trial._trial_id)
    assert got == state == frozen.state.name and note in error
    if state == "COMPLETE":
        assert frozen.value == 0.75
    else:
        assert note in frozen.user_attrs["error"]
        assert f"zoo: error: trial {trial.number} failed: " in capsys.readouterr().err


def _one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stdout[-3000:]
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stdout, proc.stdout[-3000:]
    return errors[0]


@pytest.mark.slow
def test_bad_search_input_is_one_line(run_zoo, tmp_path):
    lr = "task.module.optimizer.lr=tag(log, interval(1e-4, 1e-2))"
    assert "only a search sweeper can sample" in _one_line_error(run_zoo("train", "-m", *FAST, lr))
    url = "postgresql://me:secret@127.0.0.1:1/zoo"  # from inside the sweeper (Hydra would print a traceback)
    line = _one_line_error(run_zoo("train", "-m", "hparams_search=vision", *FAST, "hydra.sweeper.n_trials=1",
                                   f"hydra.sweeper.storage={url}"))
    assert "cannot open the study storage" in line and "secret" not in line
    assert not list((tmp_path / "outputs" / "search" / "vision").glob("trial_*"))  # nothing ran


@pytest.mark.slow
def test_a_stopped_search_resumes_to_n_trials_then_reports(run_zoo, tmp_path):
    """One trial, then the same search asked for 3 on the same SQLite study: trials 1 and 2 only (numbers never
    repeat). The second sweep's pruner stops every trial at its first evaluation: PRUNED, and the run ends early."""
    args = ["train", "-m", "hparams_search=vision", *FAST, "trainer.max_epochs=2",
            "task.module.optimizer.lr=tag(log, interval(1e-3, 1e-2))"]  # over the preset's range
    run_zoo(*args, "hydra.sweeper.n_trials=1", check=True)
    prune_all = ["hydra/sweeper/pruner=threshold", "hydra.sweeper.pruner.lower=2.0"]  # val/acc < 2: always
    out = run_zoo(*args, "hydra.sweeper.n_trials=3", *prune_all, check=True).stdout
    sweep = tmp_path / "outputs" / "search" / "vision"
    study = optuna.load_study(study_name="vision", storage=f"sqlite:///{sweep / 'optuna.db'}")
    assert [t.number for t in study.trials] == [0, 1, 2]
    assert [t.state.name for t in study.trials] == ["COMPLETE", "PRUNED", "PRUNED"]
    assert all(1e-3 <= t.params["task.module.optimizer.lr"] <= 1e-2 for t in study.trials)
    assert "trial 0:" not in out  # the resumed sweep ran only the missing trials
    rows = list(csv.DictReader((sweep / "trials.csv").open()))
    assert [r["state"] for r in rows] == ["COMPLETE", "PRUNED", "PRUNED"]
    assert math.isclose(float(rows[0]["val/acc"]), study.trials[0].value)
    assert rows[1]["note"] == "pruned after evaluation 1" and float(rows[1]["wall_s"]) > 0
    # pruned runs stopped after their first epoch; the complete one trained both
    assert [p.name for p in (sweep / "trial_001" / "checkpoints").glob("best-*")] == ["best-epoch000-step000003.ckpt"]
    assert list((sweep / "trial_000" / "checkpoints").glob("last.ckpt"))
    best = study.trials[0]
    command = (sweep / "best_command.txt").read_text().strip()
    assert f"task.module.optimizer.lr={best.params['task.module.optimizer.lr']!r}" in command
    assert "hparams_search" not in command and "optuna_pruning" not in command and command in out
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    for n in range(3):  # one TensorBoard folder per trial under the sweep dir: side by side in the HParams tab
        events = list((sweep / f"trial_{n:03d}" / "tensorboard").glob("events.*"))
        plugins = {v.metadata.plugin_data.plugin_name for f in events for e in EventFileLoader(str(f)).Load()
                   for v in e.summary.value}
        assert "hparams" in plugins, (n, plugins)
