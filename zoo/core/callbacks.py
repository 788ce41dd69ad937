"""Callbacks every task gets: the checkpoint on SIGTERM/Ctrl-C; the weight average `trainer.ema_decay` adds."""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch.callbacks import Callback, EMAWeightAveraging


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
        from lightning.pytorch.trainer.states import TrainerFn
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        # a stopped evaluation (`zoo test`, the test after fit) has no training state to keep: last.ckpt stays
        if isinstance(exception, (KeyboardInterrupt, SIGTERMException)) and trainer.state.fn == TrainerFn.FITTING:
            trainer.save_checkpoint(self.path, weights_only=False)  # the full state: optimizer, loops, RNG


class WeightEMA(EMAWeightAveraging):
    """`trainer.ema_decay`: an exponential moving average of every weight and buffer, updated after each optimizer
    step (Lightning's EMAWeightAveraging). Validation, the checkpoints' `state_dict` (so `zoo test`, `predict`,
    `export` and fine-tuning from the file) and the test after fit use the average; the raw weights travel in the
    checkpoint as `current_model_state`, so a resume goes on training them.

    Only for tasks whose optimizer steps Lightning takes: a task stepping its own optimisers (GAN, PPO) is refused,
    as the average would not follow its schedule (the GAN keeps its own average of G, `task.module.ema_decay`)."""

    def __init__(self, decay: float) -> None:
        super().__init__(decay=float(decay))

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit" and not pl_module.automatic_optimization:
            from zoo.errors import ZooError

            raise ZooError(ema_refusal(pl_module))
        super().setup(trainer, pl_module, stage)

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        # Lightning's version also runs for `trainer.test(ckpt_path="best")` after fit, where it would put the raw
        # weights back and test those; outside fit the checkpoint's state_dict, the average, is what is evaluated.
        from lightning.pytorch.trainer.states import TrainerFn

        if trainer.state.fn == TrainerFn.FITTING:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)


def ema_refusal(module: Any) -> str:
    """Why `trainer.ema_decay` cannot average `module` (it steps its own optimisers), and the task's own average
    where it has one (the GAN's `task.module.ema_decay`), in its own words."""
    own = " (this task keeps its own average: task.module.ema_decay)" if "ema_decay" in getattr(module, "hparams", {}) \
        else ""
    return (f"trainer.ema_decay: {type(module).__name__} steps its own optimisers, which the weight average does not "
            f"follow; leave trainer.ema_decay=null{own}")
