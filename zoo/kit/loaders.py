"""DataLoader settings that follow the machine and the device the trainer runs on, shared by the domains' loaders.

On a CUDA trainer a loader with workers pins its batches in its own pin thread and Lightning's copy to the GPU is then
asynchronous; without workers, pinning would copy every batch once more in the training loop's thread, so it is
only asked for where a batch is small (token ids). On a CPU trainer nothing is pinned: page-locked memory buys
nothing there.
"""

from __future__ import annotations

import os
from typing import Any

MAX_WORKERS = 16  # beyond this, start-up and memory grow faster than any single-GPU input pipeline needs


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may run on (containers, taskset, SLURM)
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def auto_workers(value: int | str) -> int:
    """`"auto"`: one worker per usable core but one (the training loop's), shared among the node's processes
    (LOCAL_WORLD_SIZE under torchrun; Lightning's own DDP launcher sets it too), at most MAX_WORKERS."""
    if value != "auto":
        return int(value)
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(0, min(MAX_WORKERS, usable_cores() // local - 1))


def on_cuda(trainer: Any) -> bool:
    """Whether the batches go to a CUDA device: the trainer's, or, before a trainer exists, any visible one."""
    import torch

    device = trainer.strategy.root_device if trainer is not None else None
    return device.type == "cuda" if device is not None else torch.cuda.is_available()


def loader_options(trainer: Any, workers: int, pin_in_main: bool = False) -> dict:
    """num_workers, persistent workers, prefetch and pin_memory for a DataLoader of this trainer."""
    return {"num_workers": workers, "persistent_workers": workers > 0, "prefetch_factor": 4 if workers else None,
            "pin_memory": on_cuda(trainer) and (workers > 0 or pin_in_main)}


def pool_placement(device: Any, cuda: bool) -> str:
    """Where a synthetic data module's pool of ready batches lives: on the trainer's GPU ("device": served without a
    copy), else pinned once when CUDA is there but no GPU trainer is known yet ("pinned": copies to a GPU run
    asynchronously), else "cpu". Never pinned again per batch: that copied the whole batch in the main thread."""
    if device is not None and device.type == "cuda":
        return "device"
    return "pinned" if cuda and device is None else "cpu"
