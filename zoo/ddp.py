"""Multi-process bookkeeping (no torch or lightning at import: the CLI reads it first) that Lightning leaves to the application: which process writes shared files, the
environment and process group between multirun jobs, and one clear line when a DDP rank dies."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

CHILD_CONFIG_ENV = "ZOO_CHILD_CONFIG"  # set by rank 0 before fit; DDP children read their config from it
DIST_ENV = ("LOCAL_RANK", "NODE_RANK", "GLOBAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "PL_GLOBAL_SEED", "PL_SEED_WORKERS", CHILD_CONFIG_ENV)


def launcher_rank() -> int:
    """This process's global rank as an external launcher (torchrun, SLURM) set it before Lightning starts;
    0 for a plain `python -m zoo` (whose DDP children Lightning starts later, with CHILD_CONFIG_ENV set)."""
    for key in ("RANK", "SLURM_PROCID"):
        if key == "SLURM_PROCID" and int(os.environ.get("SLURM_NTASKS", "1")) <= 1:
            continue
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def is_lightning_child() -> bool:
    return os.environ.get(CHILD_CONFIG_ENV) is not None and os.environ.get("LOCAL_RANK", "0") != "0"


def restore_dist_env(before: dict) -> None:
    """Drop the rank variables Lightning's launcher put into rank 0's environment. Left behind, the next job of a
    multirun sweep would take LOCAL_RANK as "processes are started externally" and wait forever for children."""
    for key in DIST_ENV:
        if key in before:
            os.environ[key] = before[key]
        else:
            os.environ.pop(key, None)


def release_process_group() -> None:
    """End this run's process group: the next job of a multirun sweep starts new DDP children and must not reuse a
    group whose peers have exited (Lightning skips init when a group already exists)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------------- a rank that dies
_PEER_ERRORS = ("connection reset by peer", "connection closed by peer", "broken pipe", "gloo", "nccl",
                "socket timeout", "timed out", "connection refused")


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def resume_hint(run_dir: str) -> str:
    return f"last.ckpt holds the run up to its last save; continue with `python -m zoo train ckpt_path={run_dir}`"


def peer_failure(error: BaseException, trainer: Any) -> str | None:
    """A failed collective caused by a dead peer -> the one line to print, else None (a different error)."""
    if trainer is None or trainer.world_size <= 1 or not isinstance(error, RuntimeError):
        return None
    if not any(s in str(error).lower() for s in _PEER_ERRORS):
        return None
    from zoo.callbacks import DeadRankWatch

    watch = next((c for c in trainer.callbacks if isinstance(c, DeadRankWatch)), None)
    dead = watch.dead_ranks() if watch is not None else []
    # No dead process in sight: a peer on another node, or one that hangs (the collective timeout ended the wait).
    who = f"DDP {', '.join(dead)} died" if dead else "another DDP rank of this run died or stopped answering"
    import re

    first = re.sub(r"^\[[^\]]*\]\s*", "", str(error).strip().splitlines()[0]).split(". ")[0][:100]  # drop "[.../pair.cc:545]"
    line = f"{who} (this rank {trainer.global_rank} saw: {first})"
    return f"{line}; {resume_hint(watch.run_dir)}" if watch else line
