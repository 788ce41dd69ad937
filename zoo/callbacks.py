"""Callbacks shared by every domain."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback


class InterruptCheckpoint(Callback):
    """Save `last.ckpt` when a run is interrupted (Ctrl-C, SLURM's SIGTERM) so that `ckpt_path=last` continues it.

    Other exceptions are bugs or bad input: the last epoch's checkpoint is the better state to keep. (Lightning's
    OnExceptionCheckpoint saves on every exception and deletes its file at teardown, which would remove last.ckpt.)
    """

    def __init__(self, dirpath: str, filename: str = "last") -> None:
        self.path = os.path.join(dirpath, filename + ".ckpt")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
            trainer.save_checkpoint(self.path)


def _batch_size(batch: Any) -> int:
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.ndim else 1
    if isinstance(batch, (list, tuple)) and batch:
        return _batch_size(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_size(next(iter(batch.values())))
    return 0


class Throughput(Callback):
    """Logs `train/samples_per_sec` and `train/step_ms` per epoch (wall clock over the epoch's training batches).

    The counters start in `on_train_start` as well as at each epoch start: a run resumed from a mid-epoch checkpoint
    (what SIGTERM saves) begins inside an epoch, where Lightning skips `on_train_epoch_start`.
    """

    def _reset(self) -> None:
        self._t0, self._samples, self._steps = time.perf_counter(), 0, 0

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._reset()

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._reset()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._samples += _batch_size(batch)
        self._steps += 1

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        dt = time.perf_counter() - self._t0
        if self._steps and dt > 0:
            world = trainer.world_size
            if self._samples:  # batches that are not tensors (e.g. an RL update index) carry no sample count
                pl_module.log("train/samples_per_sec", self._samples * world / dt, sync_dist=False,
                              rank_zero_only=True)
            pl_module.log("train/step_ms", 1000 * dt / self._steps, sync_dist=False, rank_zero_only=True)
