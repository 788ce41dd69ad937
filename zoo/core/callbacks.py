"""Callbacks every task gets: the checkpoint on SIGTERM/Ctrl-C."""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch.callbacks import Callback


class InterruptCheckpoint(Callback):
    """Save `last.ckpt` when a run is interrupted (Ctrl-C, SLURM's SIGTERM) so that `ckpt_path=last` continues it,
    and every `every_n_train_steps` optimizer steps (0: never), so that a worker killed outright loses at most that
    much work when torchrun or SLURM restarts the run. (Lightning's ModelCheckpoint refuses a step interval together
    with its per-epoch one, which `callbacks.last_checkpoint` keeps.)

    Other exceptions are bugs or bad input: the last epoch's checkpoint is the better state to keep. (Lightning's
    OnExceptionCheckpoint saves on every exception and deletes its file at teardown, which would remove last.ckpt.)
    """

    def __init__(self, dirpath: str, filename: str = "last", every_n_train_steps: int = 0) -> None:
        self.path = os.path.join(dirpath, filename + ".ckpt")
        self.every = int(every_n_train_steps or 0)
        if self.every < 0:
            from zoo.errors import ZooError

            raise ZooError(f"checkpoint_every_n_steps={self.every} must be 0 (off) or a number of steps")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step
        if self.every and step and step % self.every == 0 and step != getattr(self, "_saved_step", None):
            self._saved_step = step  # gradient accumulation: several batches end at one optimizer step
            trainer.save_checkpoint(self.path, weights_only=False)  # every rank calls it: it holds a barrier

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if isinstance(exception, (KeyboardInterrupt, SIGTERMException)):
            trainer.save_checkpoint(self.path, weights_only=False)  # the full state: optimizer, loops, RNG
