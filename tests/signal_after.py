"""A test callback that sends this process a real signal (SIGINT: a Ctrl-C; SIGTERM) once training crosses `step`
optimizer steps, only in a run that started below it; with `stage=test`, after `step` test batches; with
`once=<file>`, only where that file does not exist yet (it is made): once in a whole sweep. Not a test module:
run_zoo's subprocess imports it with tests/ on PYTHONPATH (`+callbacks.sig._target_=signal_after.SignalAfter
+callbacks.sig.step=N`)."""

from __future__ import annotations

import os
import signal

from lightning.pytorch.callbacks import Callback


class SignalAfter(Callback):
    def __init__(self, step: int, name: str = "SIGINT", stage: str = "train", once: str | None = None) -> None:
        self.step, self.signum, self.start, self.stage, self.once = step, getattr(signal, name), None, stage, once

    def _fire(self) -> None:
        if self.once is not None:
            if os.path.exists(self.once):
                return
            open(self.once, "w").close()
        os.kill(os.getpid(), self.signum)

    def on_train_start(self, trainer, pl_module) -> None:  # noqa: ANN001
        self.start = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:  # noqa: ANN001
        if self.stage == "train" and self.start is not None and self.start < self.step <= trainer.global_step:
            self.start = None
            self._fire()

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:  # noqa: ANN001
        if self.stage == "test" and batch_idx + 1 == self.step:
            self._fire()
