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


# ------------------------------------------------------------------------------ run names, writers, settings
@pytest.fixture
def launcher_env(monkeypatch):
    """A clean launcher environment and a fresh run-id cache."""
    from zoo.core import naming as config

    for key in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_JOB_NAME", "SLURM_NTASKS", "SLURM_PROCID", "RANK",
                "TORCHELASTIC_RUN_ID", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TORCHELASTIC_USE_AGENT_STORE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(config, "_RUN_ID", None)
    return monkeypatch


def test_the_launcher_names_the_run(launcher_env):
    from zoo.core.naming import external_job_id
    from zoo.errors import ZooError

    assert external_job_id() is None  # a plain run: a timestamp
    launcher_env.setenv("SLURM_JOB_ID", "77")
    launcher_env.setenv("SLURM_STEP_ID", "0")
    assert external_job_id() == "slurm-77"  # every srun task, and the requeued job, the same
    launcher_env.setenv("SLURM_STEP_ID", "1")
    assert external_job_id() == "slurm-77.1"  # a second srun in the job is another run
    launcher_env.setenv("SLURM_JOB_NAME", "bash")
    assert external_job_id() is None  # an interactive allocation runs many commands
    launcher_env.setenv("TORCHELASTIC_RUN_ID", "exp1")
    assert external_job_id() == "torchrun-exp1"
    launcher_env.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default id, one agent: named after the agent
    launcher_env.setenv("WORLD_SIZE", "2")
    launcher_env.setenv("LOCAL_WORLD_SIZE", "2")
    first = external_job_id()
    assert first.startswith("torchrun-") and first.endswith(f"_{os.getppid()}") and external_job_id() == first
    launcher_env.setenv("LOCAL_WORLD_SIZE", "1")  # several agents and no shared store to agree through
    with pytest.raises(ZooError, match="--rdzv-id"):
        external_job_id()


def test_one_writer_of_hydra_files(launcher_env):
    from omegaconf import OmegaConf

    from zoo.core.config import register_resolvers

    register_resolvers()
    cfg = OmegaConf.create({"subdir": "${zoo_writer:.hydra}", "handlers": "${zoo_writer:[console,file],[console]}"})
    assert (cfg.subdir, list(cfg.handlers)) == (".hydra", ["console", "file"])
    launcher_env.setenv("RANK", "1")  # torchrun's global rank 1
    assert (cfg.subdir, list(cfg.handlers)) == (None, ["console"])


def test_a_restarted_job_finds_its_newest_checkpoint(launcher_env, tmp_path):
    from zoo.core import naming as config
    from zoo.core.resume import restart_checkpoint

    (tmp_path / "checkpoints").mkdir()
    last = tmp_path / "checkpoints" / "last.ckpt"
    last.write_bytes(b"x")
    assert restart_checkpoint(tmp_path) is None  # a timestamped run dir is new: nothing to continue
    launcher_env.setattr(config, "_RUN_ID", "torchrun-exp1")
    launcher_env.setattr(config, "_LAUNCHER_NAMED", True)
    assert restart_checkpoint(tmp_path) == last
    hpc = tmp_path / "hpc_ckpt_1.ckpt"  # Lightning's SLURM requeue save, newer
    hpc.write_bytes(b"x")
    os.utime(last, (time.time() - 60, time.time() - 60))
    assert restart_checkpoint(tmp_path) == hpc
    assert restart_checkpoint(tmp_path / "other") is None


def test_collective_timeout_reaches_the_strategy():
    from zoo.core.trainer import trainer_kwargs

    for strategy, method in (("ddp", "popen"), ("ddp_spawn", "spawn"), ("auto", "popen")):
        s = trainer_kwargs({"strategy": strategy, "accelerator": "cpu", "devices": 2, "collective_timeout": 7,
                            "find_unused_parameters": strategy == "auto"})["strategy"]
        assert (s._timeout.total_seconds(), s._start_method) == (7, method)
    assert trainer_kwargs({"strategy": "ddp_find_unused_parameters_true", "accelerator": "cpu", "devices": 2,
                           "collective_timeout": 7})["strategy"]._ddp_kwargs == {"find_unused_parameters": True}
    assert trainer_kwargs({"strategy": "auto", "accelerator": "cpu", "devices": 1,
                           "collective_timeout": 7})["strategy"] == "auto"  # one process: nothing to time out


# ------------------------------------------------------------------------------------------ real processes
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
