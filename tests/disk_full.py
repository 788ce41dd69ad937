"""A test callback that makes the disk full for this process's checkpoint writes: from its set-up on, torch.save
raises ENOSPC after writing `partial` bytes (what a full disk does mid-file), so the zoo's disk-full path runs without
filling a real disk. Not a test module: a subprocess imports it with tests/ on PYTHONPATH
(`+callbacks.full._target_=disk_full.DiskFull`)."""

from __future__ import annotations

import errno
import os
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback


class DiskFull(Callback):
    def __init__(self, partial: int = 4096) -> None:
        self.partial = partial

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        import zoo.core.checkpoint as checkpoint

        partial = self.partial

        def full_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
            f.write(b"\0" * partial)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        checkpoint.torch.save = full_save  # the writer's module reads torch.save at call time
        torch.save = full_save
