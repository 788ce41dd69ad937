"""A test callback that sends this process a real signal (SIGINT: a Ctrl-C; SIGTERM) once training crosses `step`
optimizer steps, only in a run that started below it. Not a test module: run_zoo's subprocess imports it with
tests/ on PYTHONPATH (`+callbacks.sig._target_=signal_after.SignalAfter +callbacks.sig.step=N`)."""

from __future__ import annotations

import os
import signal

from lightning.pytorch.callbacks import Callback


class SignalAfter(Callback):
    def __init__(self, step: int, name: str = "SIGINT") -> None:
        self.step, self.signum, self.start = step, getattr(signal, name), None

    def on_train_start(self, trainer, pl_module) -> None:  # noqa: ANN001
        self.start = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        if self.start is not None and self.start < self.step <= trainer.global_step:
            self.start = None
            os.kill(os.getpid(), self.signum)
