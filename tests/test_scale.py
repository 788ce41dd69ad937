"""Scale-out paths with real processes on this machine (CPU, gloo): a multirun through submitit's local executor,
two torchrun agents training one run and surviving a killed worker, and a hung DDP rank ended by the collective
timeout. Each is one short multi-process run; docs/scale.md has the commands and the measurements."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from zoo.testing import TINY, zoo_env

VISION = ["task.data.image_size=16", "task.module.arch=resnet10t", "trainer.enable_progress_bar=false",
          "trainer.enable_model_summary=false"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _zoo_children(pid: int) -> list[int]:
    """The `python -m zoo` processes that `pid` started (not helpers such as a shell it ran)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                if b"zoo" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(int(child))
            except OSError:
                continue
    return found


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"


@pytest.mark.slow
def test_submitit_local_multirun_lands_in_one_sweep_dir(run_zoo, tmp_path):
    proc = run_zoo("train", "-m", "hydra/launcher=zoo_local", *TINY, *VISION, "task.module.optimizer.lr=1e-3,3e-3",
                   "test_after_fit=false", check=True)
    (sweep,) = (tmp_path / "outputs" / "multirun" / "vision" / "resnet").iterdir()
    assert "Submitit 'local' sweep output dir" in proc.stdout
    lrs = []
    for job in ("0", "1"):  # each job's run dir inside the one sweep dir: config, checkpoint, log
        saved = yaml.safe_load((sweep / job / "config.yaml").read_text())
        lrs.append(saved["config"]["task"]["module"]["optimizer"]["lr"])
        assert saved["config"]["run_dir"] == str(sweep / job)
        assert torch.load(sweep / job / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
        assert (sweep / job / "cli.log").is_file() and (sweep / job / ".hydra" / "overrides.yaml").is_file()
    assert sorted(lrs) == [1e-3, 3e-3]
    logs = sorted((sweep / ".submitit").glob("*/*_log.out"))  # submitit's own per-job logs, also in the sweep dir
    assert len(logs) == 2 and all("Job completed successfully" in p.read_text() for p in logs)


@pytest.mark.slow
def test_two_torchrun_agents_train_one_run_and_restart_from_last_ckpt(tmp_path):
    """Two agents (two "nodes") train one run; kill -9 one worker after the first step checkpoint: torchrun
    restarts the group, both ranks find the run's last.ckpt by themselves, and the run ends at the steps asked."""
    port, steps, every = _free_port(), 18, 4
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=drill", "--max-restarts=1", "-m", "zoo", "train",
           "trainer=ddp", "trainer.num_nodes=2", "trainer.accelerator=cpu", "trainer.devices=1", *VISION,
           f"trainer.max_steps={steps}", "trainer.max_epochs=-1", "trainer.limit_train_batches=6",
           "trainer.limit_val_batches=1", "trainer.num_sanity_val_steps=0", f"checkpoint_every_n_steps={every}",
           "test_after_fit=false"]
    # torch's shared rendezvous store keeps the last attempt's keys, and the restarted gloo group can hang on them
    # (pytorch/pytorch#135712): what docs/scale.md tells every elastic multi-node launch to set.
    env = zoo_env(tmp_path, OMP_NUM_THREADS="1", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    agents = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True) for _ in range(2)]
    run = tmp_path / "outputs" / "vision" / "resnet" / "torchrun-drill"
    try:
        deadline = time.monotonic() + 240
        while not (run / "checkpoints" / "last.ckpt").is_file():
            assert all(a.poll() is None for a in agents) and time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.05)
        (victim,) = _zoo_children(agents[1].pid)
        os.kill(victim, signal.SIGKILL)
        outs = [a.communicate(timeout=240)[0] for a in agents]
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
    assert [a.returncode for a in agents] == [0, 0], "\n".join(o[-3000:] for o in outs)
    assert [p.name for p in run.parent.iterdir()] == ["torchrun-drill"]  # one run dir for both nodes and attempts
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["global_step"] == steps  # the steps asked for, not more (a fresh start) or fewer
    console = "".join(outs)
    assert console.count("continuing from") >= 2  # both restarted ranks resumed, with no new arguments
    log = (run / "cli.log").read_text()  # one writer: rank 0's restart line only, not rank 1's
    assert 1 <= log.count("continuing from") <= console.count("continuing from") // 2
    assert (run / ".hydra" / "config.yaml").is_file() and not list(run.glob("*.tmp"))


@pytest.mark.slow
def test_a_hung_ddp_rank_ends_the_run_within_the_collective_timeout(tmp_path):
    """A child that stops answering (SIGSTOP) is not dead, so no watcher sees it: rank 0's wait is bounded by
    trainer.collective_timeout, then one line, exit 2, and the hung child is not left behind."""
    timeout = 20
    cmd = [sys.executable, "-m", "zoo", "train", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
           *VISION, "trainer.max_epochs=1", f"trainer.collective_timeout={timeout}", "test_after_fit=false"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=zoo_env(tmp_path, OMP_NUM_THREADS="1"), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    child = None
    try:
        deadline = time.monotonic() + 120
        while not (children := _zoo_children(proc.pid)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
            time.sleep(0.05)
        child = children[0]
        os.kill(child, signal.SIGSTOP)  # before it joins the process group: rank 0 waits for it
        stopped = time.monotonic()
        out, _ = proc.communicate(timeout=timeout + 90)
        waited = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
        time.sleep(1)
        left = _state(child) if child else "gone"
        if child and left not in ("gone", "Z"):
            os.kill(child, signal.SIGKILL)
    assert proc.returncode == 2 and timeout <= waited < timeout + 60, (waited, out[-3000:])
    errors = [line for line in out.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1 and "Traceback" not in out, out[-3000:]
    assert "stopped answering" in errors[0] and "timed out" in errors[0].lower()
    assert left in ("gone", "Z")  # rank 0 stopped the child it started
