"""Nothing a user trained is lost: a reproduction of a copied run writes only into its own folder, and a new run
never writes into a folder that holds another run or that another live zoo process holds."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from zoo.errors import ZooError
from zoo.testing import TINY, one_line_error, zoo_env

VISION = [*TINY, "task.data.image_size=16", "task.module.arch=resnet10t"]


# ------------------------------------------------------------------------------------- reproduce of a copy
def _recorded_run(folder: Path, overrides: list[str]) -> dict:
    """What a finished run records: its overrides and its resolved config, paths under its own folder."""
    from zoo.base import plain
    from zoo.testing import compose

    cfg = compose([*overrides, f"run_dir='{folder}'"])
    return {"task": cfg.task.name, "overrides": overrides, "config": plain(cfg), "env": None}


def test_a_reproduction_of_a_copied_run_pins_none_of_its_paths(tmp_path):
    """A copy's reproduction pinned `logger.tensorboard.save_dir='<original>'`, `callbacks.*.dirpath=...`: it then
    trained into the original run, replacing its last.ckpt."""
    from zoo.verbs.reproduce import plan

    original, copy = tmp_path / "outputs" / "R", tmp_path / "C"
    record = _recorded_run(original, ["task.module.arch=resnet10t",
                                      f"callbacks.model_checkpoint.dirpath='{original}/checkpoints'"])
    overrides, notes, _ = plan(record, [], copy)
    assert not [o for o in overrides if str(original) in o], overrides
    assert not [n for n in notes if str(original) in n or "dirpath" in n or "save_dir" in n], notes
    assert "task.module.arch=resnet10t" in overrides


@pytest.mark.slow
def test_a_copied_run_reproduces_into_its_own_folder_only(run_zoo, tmp_path):
    run_zoo("train", *VISION, "hydra.run.dir=R", check=True)
    original = tmp_path / "R"
    shutil.copytree(original, tmp_path / "C")
    before = {p: p.stat().st_mtime_ns for p in original.rglob("*") if p.is_file()}
    proc = run_zoo("reproduce", "C")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "pinned to the recorded ones" not in proc.stdout, proc.stdout[-3000:]
    assert {p: p.stat().st_mtime_ns for p in original.rglob("*") if p.is_file()} == before
    (again,) = [p for p in tmp_path.iterdir() if p.name.startswith("C-reproduce-")]
    assert (again / "checkpoints" / "last.ckpt").is_file() and list(again.glob("checkpoints/best-*.ckpt"))


# ----------------------------------------------------------------------------------- one run per folder
_HOLD = "import sys, time; from zoo.core.runlock import claim; claim(sys.argv[1], False); print('held', flush=True); " \
        "time.sleep(60)"


def test_a_folder_is_held_by_one_live_process_and_taken_over_from_a_dead_one(tmp_path):
    from zoo.core import runlock

    folder = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder)], env=zoo_env(tmp_path), text=True,
                              stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert runlock.held(folder)
        with pytest.raises(ZooError) as e:
            runlock.claim(folder, resuming=True)  # a resume too: the run is still going
        assert f"{folder} is in use by zoo process {holder.pid}" in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    assert (folder / runlock.LOCK).is_file() and not runlock.held(folder)  # a kill -9 leaves the file: stale
    runlock.claim(folder, resuming=False)
    assert runlock.holder_pid(folder) == os.getpid()
    runlock.release_all()
    assert not (folder / runlock.LOCK).exists()


def test_a_new_run_is_refused_a_folder_with_checkpoints_and_a_resume_is_not(tmp_path):
    from zoo.core import runlock

    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    with pytest.raises(ZooError) as e:
        runlock.claim(folder, resuming=False)
    assert f"{folder} holds another run's checkpoints" in str(e.value) and f"ckpt_path={folder}`" in str(e.value)
    assert not (folder / runlock.LOCK).exists()  # the refused run leaves nothing behind
    runlock.claim(folder, resuming=True)
    runlock.release_all()



def _files(folder: Path) -> dict:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".zoo")}


@pytest.mark.slow
def test_two_runs_never_share_a_folder(run_zoo, tmp_path):
    """Two runs started together into one folder both exited 0, each holding the other's weights; a third replaced
    last.ckpt with only Lightning's 'directory exists and is not empty' warning."""
    folder = tmp_path / "D"
    first = subprocess.Popen([sys.executable, "-m", "zoo", "train", *VISION, "trainer.max_epochs=200", "seed=1",
                              f"hydra.run.dir={folder}"], cwd=tmp_path, env=zoo_env(tmp_path), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (folder / "checkpoints" / "last.ckpt").is_file():  # the first run is under way
            assert first.poll() is None and time.monotonic() < deadline, first.stdout.read()[-3000:]
            time.sleep(0.2)
        line = one_line_error(run_zoo("train", *VISION, "seed=2", "task.module.optimizer.lr=0.01",
                                       f"hydra.run.dir={folder}"))
        assert f"{folder} is in use by zoo process {first.pid}" in line, line
        line = one_line_error(run_zoo("train", f"ckpt_path={folder}"))  # nor a resume while it runs
        assert f"{folder} is in use by zoo process {first.pid}" in line, line
        first.send_signal(signal.SIGTERM)
        out, _ = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 143 and f"continue with `python -m zoo train ckpt_path={folder}`" in out, out[-3000:]
    ckpt = torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)
    assert "seed=1" in ckpt["zoo"]["overrides"] and ckpt["zoo"]["config"]["seed"] == 1
    kept = _files(folder)
    line = one_line_error(run_zoo("train", *VISION, "seed=3", f"hydra.run.dir={folder}"))
    assert f"{folder} holds another run's checkpoints" in line and f"ckpt_path={folder}`" in line, line
    assert _files(folder) == kept  # not a byte of the stopped run changed
    # the hint's own command continues the run in its folder
    run_zoo("train", f"ckpt_path={folder}", f"trainer.max_epochs={ckpt['epoch'] + 2}", check=True)
    assert torch.load(folder / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] > ckpt["global_step"]


def test_the_next_run_of_a_folder_removes_the_partial_files_a_killed_run_left(tmp_path, capsys):
    """kill -9 during a checkpoint write left `.last.ckpt.*.tmp` files (0 B, 14 MB, 41 MB) that nothing removed."""
    from zoo.core import runlock

    folder = tmp_path / "run"
    (folder / "checkpoints").mkdir(parents=True)
    partial = [folder / "checkpoints" / ".last.ckpt.k2j3_x.tmp", folder / "checkpoints" / ".best.ckpt.a.tmp",
               folder / "config.yaml.4194999.tmp"]  # a pid above Linux's pid_max: no live process
    for p in partial:
        p.write_bytes(b"\0" * 1000)
    live = folder / f"metrics.json.{os.getppid()}.tmp"  # a live process's file is its own
    live.write_text("{}")
    (folder / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    runlock.claim(folder, resuming=True)
    runlock.release_all()
    assert not any(p.exists() for p in partial) and live.exists() and (folder / "checkpoints" / "last.ckpt").exists()
    assert f"zoo: removed 3 partial file(s) that a killed run left in {folder}" in capsys.readouterr().err


def test_a_stop_before_the_first_save_leaves_no_new_folder(tmp_path):
    from zoo.core import runlock

    new, kept = tmp_path / "outputs" / "task" / "new", tmp_path / "kept"
    for folder in (new, kept):
        runlock.claim(folder, resuming=False)
        (folder / ".hydra").mkdir()
    (kept / "checkpoints").mkdir()
    (kept / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    runlock.discard_new_folders()
    runlock.release_all()
    assert not (tmp_path / "outputs").exists() and (kept / "checkpoints" / "last.ckpt").is_file()


def test_a_runs_added_keys_replay_after_its_preset_gained_them():
    """A run trained with `+task.module.model.silence_lead=0.5` (a key its preset lacked then) stays usable by test,
    predict, export and resume after the preset took that key in: the checkpoint's overrides replay as `++` (add or
    replace). A config group keeps `+` (Hydra cannot force-add one); the run's own locations are not replayed."""
    from zoo.core.config import compose, register_resolvers
    from zoo.core.overrides import carried_overrides

    register_resolvers()
    saved = ["experiment=speech_fsdd", "+task.module.model.silence_lead=0.5", "ckpt_path=/x/last.ckpt",
             "hydra.run.dir=/x", "++task.module.model.silence_tail=0.4"]
    with pytest.raises(Exception, match="An item is already at"):
        compose([o for o in saved if not o.startswith(("ckpt_path", "hydra"))])
    carried = carried_overrides(saved)
    assert carried == ["experiment=speech_fsdd", "++task.module.model.silence_lead=0.5",
                       "++task.module.model.silence_tail=0.4"]
    model = compose(carried).task.module.model
    assert model.silence_lead == 0.5 and model.silence_tail == 0.4
    assert carried_overrides(["+hparams_search=vision", "+trainer.new_key=1"]) == ["+hparams_search=vision",
                                                                                 "++trainer.new_key=1"]


@pytest.mark.parametrize("task, preset", [("vision/resnet", "vision_flowers12"), ("speech/ctc", "speech_fsdd"),
                                          ("rl/ppo", "rl_hopper")])
def test_a_checkpoint_outlives_the_preset_it_was_trained_with(task, preset, capsys):
    """A checkpoint trained with `experiment=<a preset renamed since>` could not be tested, predicted or exported
    ("unknown experiment"): its own overrides no longer compose. Its recorded task config now rebuilds the same task
    node; what the user sets still wins, and the user's own mistake is still theirs to read."""
    from zoo.base import plain
    from zoo.core.config import compose, register_resolvers
    from zoo.core.recorded import checkpoint_overrides, flatten

    register_resolvers()
    recorded = plain(compose([f"task={task}", f"experiment={preset}", "run_dir=/old/run"]))
    ckpt = {"zoo": {"overrides": [f"task={task}", f"experiment={preset}_before_its_rename", "seed=3"],
                    "config": recorded}}
    tail = ["run_dir=/new/run"]
    rebuilt = plain(compose(checkpoint_overrides(ckpt, task, [], tail)))
    assert flatten(rebuilt["task"]) == flatten(recorded["task"])
    assert flatten(plain(compose([f"task={task}", *tail]))["task"]) != flatten(recorded["task"])  # the test can fail
    assert "training overrides no longer compose (unknown experiment" in capsys.readouterr().err

    asked = plain(compose(checkpoint_overrides(ckpt, task, ["seed=11"], tail)))
    assert asked["seed"] == 11
    with pytest.raises(ZooError, match="would be dropped"):  # evaluation rebuilds the model from its hparams
        checkpoint_overrides(ckpt, task, ["task.module.optimizer.lr=0.5"], tail)
    with pytest.raises(ZooError, match="task.module.no_such_key"):
        checkpoint_overrides(ckpt, task, ["task.module.no_such_key=1"], tail)
    ckpt["zoo"]["config"] = None  # an older checkpoint without its config: the overrides' own error
    with pytest.raises(ZooError, match="unknown experiment"):
        checkpoint_overrides(ckpt, task, [], tail)


def test_a_users_value_replaces_the_checkpoints_own_for_that_key():
    """A value the checkpoint recorded that today's checks refuse (`seed='7'`, text, as runs before interpolated
    overrides were frozen recorded it) is replaced by the user's, not stacked before it and checked anyway."""
    from zoo.core.config import register_resolvers
    from zoo.core.recorded import checkpoint_overrides

    register_resolvers()
    ckpt = {"zoo": {"overrides": ["task=vision/resnet", "seed='7'", "task.module.arch=resnet10t"], "config": None}}
    with pytest.raises(ZooError, match="seed='7' is not an integer"):
        checkpoint_overrides(ckpt, "vision/resnet", [], [])
    assert checkpoint_overrides(ckpt, "vision/resnet", ["seed=7"], []) == ["task=vision/resnet",
                                                                            "task.module.arch=resnet10t", "seed=7"]


def test_a_run_resumes_after_the_preset_it_began_with_is_gone(tmp_path, capsys):
    """The resume replayed `experiment=<renamed>` and stopped at "unknown experiment": the run could not go on. Its
    recorded config now rebuilds it, task, trainer and all; what the user adds to the resume still wins."""
    from zoo.base import plain
    from zoo.core.config import compose, register_resolvers
    from zoo.core.recorded import flatten
    from zoo.core.resume import resolve_resume

    register_resolvers()
    run = tmp_path / "outputs" / "rl" / "ppo" / "2026-01-01_00-00-00_0001"
    recorded = plain(compose(["experiment=rl_hopper", "trainer.max_epochs=7", f"run_dir='{run}'"]))
    (run / "checkpoints").mkdir(parents=True)
    saved = ["experiment=rl_hopper_before_its_rename", "trainer.max_epochs=7"]
    torch.save({"state_dict": {}, "zoo": {"task": "rl/ppo", "config": recorded, "overrides": saved}},
               run / "checkpoints" / "last.ckpt")
    overrides = resolve_resume([f"ckpt_path={run}", "trainer.max_time=00:01:00:00"])
    assert "training overrides no longer compose (unknown experiment" in capsys.readouterr().err
    resumed = plain(compose([o for o in overrides if not o.startswith(("hydra.", "ckpt_path"))] + [f"run_dir='{run}'"]))
    assert flatten(resumed["task"]) == flatten(recorded["task"])
    assert resumed["trainer"]["max_epochs"] == 7 and resumed["trainer"]["max_time"] == "00:01:00:00"
    assert flatten(plain(compose([f"run_dir='{run}'"]))["task"]) != flatten(recorded["task"])  # the test can fail
