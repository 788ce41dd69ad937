"""A stop (SIGTERM, Ctrl-C) of any verb at any moment, imports included: `zoo: stopped by ...`, exit 143 / 130, no
traceback, its temp files removed, no checkpoint written by an evaluation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zoo.testing import ROOT, zoo_env

sys.path.insert(0, str(Path(__file__).parent / "deploy"))
from helpers import vision_ckpt  # noqa: E402

CODES = {"SIGTERM": 143, "SIGINT": 130}
WORDS = {"SIGTERM": "SIGTERM", "SIGINT": "Ctrl-C"}



def _stopped(proc_out: str, code: int, name: str) -> None:
    assert code == CODES[name], proc_out[-3000:]
    assert f"zoo: stopped by {WORDS[name]}" in proc_out, proc_out[-3000:]
    assert "Traceback" not in proc_out and "zoo: error" not in proc_out, proc_out[-3000:]


def _snapshot(folder: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_stopped_test_writes_no_checkpoint_and_leaves_no_logs(run_zoo, tmp_path, name):
    """A stopped `zoo test` wrote a 44 MB <run>/test/<date>/checkpoints/last.ckpt and left partial event folders;
    SIGTERM exited 143 in silence, Ctrl-C gave 'attempting graceful shutdown' and exit 1."""
    run = tmp_path / "run"
    vision_ckpt(run)
    before = _snapshot(run)
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    proc = run_zoo("test", f"ckpt_path={run}", "trainer.limit_test_batches=5", "+callbacks.sig._target_="
                   "signal_after.SignalAfter", "+callbacks.sig.step=2", f"+callbacks.sig.name={name}",
                   "+callbacks.sig.stage=test", env=env)
    _stopped(proc.stdout, proc.returncode, name)
    assert _snapshot(run) == before  # no test/ folder, no checkpoint, nothing else


def _wait_for(proc: subprocess.Popen, found, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not found():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
        time.sleep(0.05)


@pytest.mark.slow
def test_a_stopped_export_removes_its_staging_folder(tmp_path):
    """SIGTERM left <run>/.export.*.tmp/ (one with a 44.8 MB model.onnx); SIGINT a traceback from F.conv2d."""
    run = tmp_path / "run"
    ckpt = vision_ckpt(run)
    for name in ("SIGTERM", "SIGINT"):
        proc = subprocess.Popen([sys.executable, "-m", "zoo", "export", f"ckpt_path={ckpt}"], cwd=tmp_path,
                                env=zoo_env(tmp_path), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        _wait_for(proc, lambda: list(run.glob(".export.*.tmp")))
        proc.send_signal(getattr(signal, name))
        out, _ = proc.communicate(timeout=60)
        _stopped(out, proc.returncode, name)
        assert not list(run.glob(".export*")) and not (run / "export").exists(), list(run.iterdir())


@pytest.mark.slow
def test_a_stop_while_the_verb_imports_is_one_line(tmp_path):
    """Ctrl-C in the first seconds (imports) printed a 77-90 line traceback; SIGTERM there exited 143 silently."""
    for verb, name in (("test", "SIGINT"), ("predict", "SIGTERM"), ("train", "SIGINT"), ("export", "SIGTERM")):
        proc = subprocess.Popen([sys.executable, "-m", "zoo", verb, "ckpt_path=nowhere"], cwd=tmp_path,
                                env=zoo_env(tmp_path), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        time.sleep(0.6)  # python is up, torch is being imported
        assert proc.poll() is None
        proc.send_signal(getattr(signal, name))
        out, _ = proc.communicate(timeout=60)
        _stopped(out, proc.returncode, name)
        assert len(out.strip().splitlines()) == 1, out


@pytest.mark.slow
def test_after_a_ctrl_c_in_a_sweep_the_hint_finishes_the_whole_sweep(run_zoo, tmp_path):
    """The hint resumed trial 0 only; the trials never run were not mentioned."""
    import shlex

    from zoo.testing import TINY

    sweep = ["-m", "task.module.optimizer.lr=1e-3,3e-4,1e-4", *TINY, "task.data.image_size=16",
             "task.module.arch=resnet10t", "+callbacks.sig._target_=signal_after.SignalAfter", "+callbacks.sig.step=2",
             "+callbacks.sig.name=SIGINT", f"+callbacks.sig.once={tmp_path / 'fired'}"]  # one Ctrl-C in all
    env = {"PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    proc = run_zoo("train", *sweep, env=env)
    _stopped(proc.stdout, proc.returncode, "SIGINT")
    hint = proc.stdout.split("finish the whole sweep", 1)[1]
    command = shlex.split(hint.split("`")[1])
    assert command[:4] == ["python", "-m", "zoo", "train"] and command[-1].startswith("hydra.sweep.dir=")
    folder = Path(command[-1].partition("=")[2])
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["0"]  # trial 0 stopped, with its last.ckpt
    proc = run_zoo(*command[3:], env=env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert f"zoo: resuming {folder / '0'} from last.ckpt at epoch 0, step 2" in proc.stdout
    assert all((folder / str(n) / "metrics.json").is_file() for n in range(3))
    again = run_zoo(*command[3:], env=env)  # all finished: nothing is trained over
    assert again.returncode == 0 and again.stdout.count("finished already; kept as it is") == 3, again.stdout[-3000:]
    other = run_zoo("train", "-m", "task.module.optimizer.lr=1e-2,1e-3", *TINY, f"hydra.sweep.dir={folder}")
    assert other.returncode == 2 and f"{folder} holds an earlier sweep's runs" in other.stdout, other.stdout[-3000:]
