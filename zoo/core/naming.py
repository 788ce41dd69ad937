"""Run naming: the run id (date, time, pid, or the launcher's job id) and who writes shared files."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from zoo.errors import ZooError


def external_job_id() -> str | None:
    """An id shared by every rank of a job that a launcher (torchrun, SLURM) started, and kept when the launcher
    restarts the job (torchrun's --max-restarts, SLURM's requeue), so that the restart finds its run; else None."""
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    if run and run != "none":  # --rdzv-id=<name> (or --standalone's uuid): the same on every node and restart
        return "torchrun-" + run
    slurm = _slurm_job_id()
    if slurm:
        return slurm
    if run == "none":  # torchrun's default --rdzv-id: nothing shared; rank 0's agent names the run
        return _torchrun_agent_id()
    return None


def _slurm_job_id() -> str | None:
    """`slurm-<job id>[.<step>]` for tasks that srun started (submitit does), or several tasks. An interactive shell
    (job name bash/interactive, Lightning's own test) runs many commands in one job: those get timestamps."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job or os.environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None
    step = os.environ.get("SLURM_STEP_ID", "")
    if step.isdigit() and int(step) < 0xFFFFFFF0:  # a real srun step (not the batch/extern/interactive steps)
        return f"slurm-{job}" + (f".{step}" if step != "0" else "")  # a second srun in one job: its own run
    return f"slurm-{job}" if int(os.environ.get("SLURM_NTASKS", "1")) > 1 else None


def _process_start(pid: int) -> datetime | None:
    """When process `pid` started (Linux /proc): stable for the process's life, unlike now()."""
    try:
        after_name = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        ticks = int(after_name[19])  # field 22, starttime in clock ticks since boot
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return datetime.fromtimestamp(boot + ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _torchrun_agent_id() -> str:
    """Rank 0 names the run after its torchrun agent (its parent: alive, same pid and start time, across restarts)
    and publishes the name in the agent's store; the other ranks, whose agents may be on other nodes, read it there.
    (Each rank naming the run after its own agent gave one run directory per node.)"""
    started = _process_start(os.getppid()) or datetime.now()
    own = f"torchrun-{started:%Y-%m-%d_%H-%M-%S}_{os.getppid()}"
    if os.environ.get("WORLD_SIZE") == os.environ.get("LOCAL_WORLD_SIZE"):
        return own  # one agent: every rank has the same parent
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_PORT" not in os.environ:
        raise ZooError("torchrun with several nodes and the default --rdzv-id: the ranks cannot agree on a run "
                       "directory; pass --rdzv-id=<run name> to every torchrun")
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=300), wait_for_workers=False)
    # The store outlives torchrun's restarts: the first rank 0's name stays, even if rank 0 moves to another agent.
    if os.environ.get("RANK") == "0":
        return store.compare_set("zoo/run_id", "", own).decode()
    return store.get("zoo/run_id").decode()  # waits for rank 0


_RUN_ID: str | None = None


_LAUNCHER_NAMED = False


def run_id() -> str:
    """`<date>_<time>_<pid>` once per process (stable across Hydra's repeated resolution), or the launcher's job id."""
    global _RUN_ID, _LAUNCHER_NAMED
    if _RUN_ID is None:
        job = external_job_id()
        _LAUNCHER_NAMED = job is not None
        _RUN_ID = job or f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{os.getpid() % 10000:04d}"
    return _RUN_ID


def launcher_named_run() -> bool:
    """Whether this process's run id is its launcher's job id (the same again when the launcher restarts the job)."""
    run_id()
    return _LAUNCHER_NAMED


def is_writer() -> bool:
    from zoo.core.ddp import launcher_rank

    return launcher_rank() == 0


def output_root() -> Path:
    """Where runs go: `ZOO_OUTPUT_ROOT`, else ./outputs (the one place that reads it)."""
    return Path(os.environ.get("ZOO_OUTPUT_ROOT", "outputs"))


NAME_MAX = 255  # bytes in one file or folder name (ext4, xfs, btrfs, APFS, NTFS's 255 UTF-16 units)


def check_writable(folder: Path, what: str, fix: str) -> None:
    """Refuse, in one line, a folder that cannot be made or written: its nearest existing ancestor must be a folder
    in which a file can be created. (Probed by creating one, not by permission bits: root passes those.)"""
    from zoo.core import owned

    folder = Path(folder).expanduser().absolute()
    long = next((p for p in folder.parts if len(os.fsencode(p)) > NAME_MAX), None)
    if long is not None:  # os.stat's ENAMETOOLONG was a traceback, here and in Hydra
        raise ZooError(f"cannot write {what} {str(folder)[:80]}...: its part {long[:24]}... is "
                       f"{len(os.fsencode(long))} bytes, over the {NAME_MAX} a file name may have; {fix}")
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        reason = f"{probe} is a file, not a folder"
    else:
        try:
            owned.remove(owned.temp_dir(probe, prefix=".zoo-probe-"))
            return
        except OSError as e:
            reason = f"{probe} is not writable ({e.strerror or e})"
    raise ZooError(f"cannot write {what} {folder}: {reason}; {fix}")
