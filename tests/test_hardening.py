"""The defects a hostile first try found in the shared core, each through the real entry point or the function
that decides it: resume across tasks, values checked before work starts, free-text input, a dead DDP rank, one
writer of the run config, failed runs cleaned up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from zoo.errors import ZooError
from zoo.testing import TINY, run_dirs, zoo_env

VISION = [*TINY, "task.data.image_size=16", "task.module.arch=resnet10t"]


def _one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stdout[-3000:]
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stdout, proc.stdout[-3000:]
    return errors[0]


# ----------------------------------------------------------------------------------------- values, up front
@pytest.mark.parametrize("override, expected", [
    ("trainer.max_epochs=abc", "trainer.max_epochs='abc' is not an integer"),
    ("trainer.max_epochs=2.5", "trainer.max_epochs=2.5 is not an integer"),
    ("trainer.enable_progress_bar=maybe", "is not true or false"),
    ("task.module.optimizer.lr=-1", "task.module.optimizer: Invalid learning rate: -1"),
    ("task.data.batch_size=0", "task.data.batch_size=0 must be at least 1"),
    ("task.module.optimizer.lr=interval(1e-4,1e-2)", "interval() is a continuous range"),
    ("trainer.max_epochs=3,x", "trainer.max_epochs='x' is not an integer"),  # every sweep value is checked
])
def test_wrong_values_fail_before_any_work(override, expected):
    from zoo.core.config import check_overrides, register_resolvers

    register_resolvers()
    with pytest.raises(ZooError, match=None) as err:
        check_overrides([override])
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_right_values_pass():
    from zoo.core.config import check_overrides, register_resolvers

    register_resolvers()
    check_overrides(["trainer.max_epochs=3", "task.module.optimizer.lr=3e-4", "trainer.devices=2",
                     "task.module.optimizer.lr=1e-3,1e-4", "experiment=rl_cartpole", "task.module.ent_coef=0"])


def test_a_wrong_value_is_one_line_on_the_console(run_zoo):
    t0 = time.monotonic()
    line = _one_line_error(run_zoo("train", "-m", "task.module.optimizer.lr=interval(1e-4,1e-2)"))
    assert "list the values to try" in line
    line = _one_line_error(run_zoo("train", "trainer.max_epochs=abc"))
    assert "e.g. trainer.max_epochs=" in line
    assert time.monotonic() - t0 < 120  # no training started (it took 12 s of work before the check existed)


def test_predict_rejects_a_sweep_with_the_quoting():
    from zoo.core.config import check_overrides, register_resolvers

    register_resolvers()
    with pytest.raises(ZooError) as err:
        check_overrides(["+predict.top_k=1,2"], sweeps=False)
    assert "reads as a sweep" in str(err.value) and "+predict.top_k='1,2'" in str(err.value)


# --------------------------------------------------------------------------------- resume across tasks
@pytest.mark.slow
def test_resume_resolves_the_task_and_never_touches_another_run(run_zoo, tmp_path):
    run_zoo("train", *VISION, check=True)
    (run,) = run_dirs(tmp_path, "vision/resnet")
    files = {p: p.read_bytes() for p in (run / ".hydra").iterdir()}
    # the preset selects rl/ppo: the latest *rl* run is meant, and there is none
    line = _one_line_error(run_zoo("train", "experiment=rl_cartpole", "ckpt_path=last"))
    assert "no earlier run of rl/ppo" in line
    # pointing at the vision run with another domain's preset: refused before Hydra writes into that run
    line = _one_line_error(run_zoo("train", "experiment=rl_cartpole", f"ckpt_path={run}"))
    assert "is from task vision/resnet, but these overrides select rl/ppo" in line
    assert {p: p.read_bytes() for p in (run / ".hydra").iterdir()} == files
    # resuming twice with the same override keeps one copy of it
    for epochs in (2, 3):
        run_zoo("train", "ckpt_path=last", f"trainer.max_epochs={epochs}", check=True)
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    keys = [o.partition("=")[0].lstrip("+") for o in ckpt["zoo"]["overrides"]]
    assert keys.count("trainer.max_epochs") == 1 and "trainer.max_epochs=3" in ckpt["zoo"]["overrides"]
    assert ckpt["global_step"] == 3 * 3  # three epochs of trainer=debug's three batches, in all
    saved = yaml.safe_load((run / ".hydra" / "overrides.yaml").read_text())
    assert [o.partition("=")[0] for o in saved].count("trainer.max_epochs") == 1
    # asking a finished 3-epoch run for fewer epochs: Lightning's refusal as one line, not a traceback
    line = _one_line_error(run_zoo("train", "ckpt_path=last", "trainer.max_epochs=1"))
    assert "but you have set Trainer(max_epochs=1)" in line
    # free text with commas reaches the task verbatim (it was a Hydra sweep traceback): here a missing file
    line = _one_line_error(run_zoo("predict", f"ckpt_path={run}", "input=a gorgeous, witty, seductive movie."))
    assert "input not found: a gorgeous, witty, seductive movie." in line


def test_a_failed_new_run_leaves_no_folder(run_zoo, tmp_path):
    line = _one_line_error(run_zoo("train", *VISION, "task.data.dataset=imagefolder",
                                   f"task.data.root={tmp_path / 'nowhere'}"))
    assert "image folder not found" in line
    assert run_dirs(tmp_path, "vision/resnet") == []


# ------------------------------------------------------------------------------------------- free text
def test_a_checkpoint_that_does_not_fit_its_task_is_one_line(run_zoo, tmp_path):
    ckpt = tmp_path / "edited.ckpt"
    torch.save({"state_dict": {}, "zoo": {"task": "vision/resnet", "overrides": []}}, ckpt)
    line = _one_line_error(run_zoo("predict", f"ckpt_path={ckpt}", "input=x.png"))
    assert "does not load into ImageClassifier" in line


# ----------------------------------------------------------------------------------------- one writer
def test_only_global_rank_zero_writes_the_run_config(monkeypatch, tmp_path):
    from zoo.testing import compose
    from zoo.verbs import train as run

    cfg = compose(["trainer=debug"])
    cfg.run_dir = str(tmp_path / "run")
    monkeypatch.setattr(run, "_train", lambda cfg, overrides, resume: {})
    monkeypatch.delenv("ZOO_CHILD_CONFIG", raising=False)
    for rank, writes in (("1", False), ("0", True)):  # as torchrun sets RANK for each process
        monkeypatch.setenv("RANK", rank)
        run.train(cfg, [], None)
        assert (tmp_path / "run" / "config.yaml").is_file() is writes
        assert "ZOO_CHILD_CONFIG" not in os.environ


# ------------------------------------------------------------------------------------------ dead rank
def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.slow
def test_a_dead_ddp_rank_is_named_in_one_line(tmp_path):
    cmd = [sys.executable, "-m", "zoo", "train", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
           "trainer.max_epochs=200", "trainer.enable_progress_bar=false", "task.data.image_size=16",
           "task.module.arch=resnet10t", "test_after_fit=false"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=zoo_env(tmp_path, OMP_NUM_THREADS="1"), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while not list((tmp_path / "outputs").rglob("checkpoints/*.ckpt")):  # both ranks are training
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
            time.sleep(1)
        (child,) = _children(proc.pid)
        os.kill(child, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)  # no hang: bounded by the watcher or gloo's error
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode not in (0, None)
    errors = [line for line in out.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1, out[-3000:]
    assert f"DDP rank 1 (pid {child}" in errors[0] and "SIGKILL" in errors[0]
    assert "python -m zoo train ckpt_path=" in errors[0]
    assert "Traceback" not in out
