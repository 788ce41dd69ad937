"""DDP and launcher plumbing: ranks, the child's config, the process group, dead peers."""

from __future__ import annotations

import os
import sys

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


def die_with_parent() -> None:
    """Make this Lightning DDP child end when rank 0 (its parent) ends, however that happens (SIGKILL, the OOM
    killer, an error outside the trainer's hooks). Left behind, a child waits in a collective until the timeout
    and holds its memory, its GPU and rank 0's stdout (so a `| tee` or a caller's pipe stays open). Linux only:
    elsewhere the collective timeout still ends it."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:  # rank 0 ended before the request took effect
        os._exit(1)


def release_process_group() -> None:
    """End this run's process group: the next job of a multirun sweep starts new DDP children and must not reuse a
    group whose peers have exited (Lightning skips init when a group already exists)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()










