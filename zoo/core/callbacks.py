"""Callbacks every task gets: the checkpoint on SIGTERM/Ctrl-C, the stop on a non-finite loss, best checkpoints
ranked by finite metrics only; the weight average `trainer.ema_decay` adds."""

from __future__ import annotations

import logging
import os
from typing import Any

from lightning.pytorch.callbacks import Callback, EMAWeightAveraging, ModelCheckpoint

log = logging.getLogger("zoo")


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


class FiniteTraining(Callback):
    """A non-finite training loss (or, for a task stepping its own optimisers, a non-finite weight) stops the run with
    one line (a ZooError: exit 2), naming the step and the likely causes, and no checkpoint with a non-finite weight
    is ever written: a diverged run went on to report metrics and a best checkpoint of NaN weights. The trainer
    factory puts it first, so that it runs before any callback that saves on a step.

    A step's verdict is a tensor read at the end of the next step (or before validation, the epoch's end, the fit's
    end): reading it at once would make the CPU wait for the GPU every step. The stop is one step later, the line
    names the step that diverged, and the check at each save keeps every checkpoint finite meanwhile."""

    def __init__(self) -> None:
        self.pending: tuple[Any, int, int, Any] | None = None  # (all finite?, step, epoch, what it checked)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        import torch

        before, self.pending = self.pending, None
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor) and loss.is_floating_point():
            loss = loss.detach()
            self.pending = (torch.isfinite(loss).all(), trainer.global_step, trainer.current_epoch, loss)
        elif not pl_module.automatic_optimization:  # a GAN, PPO: no loss comes back, their weights tell
            params = [p.detach() for p in pl_module.parameters()]
            if params:
                flags = torch.stack([torch.isfinite(p).all() for p in params])
                self.pending = (flags.all(), trainer.global_step, trainer.current_epoch, (pl_module, flags))
        self._check(trainer, before)

    def _check(self, trainer: Any, pending: tuple[Any, int, int, Any] | None) -> None:
        if pending is None or bool(pending[0]):
            return
        self.pending = None
        _, step, epoch, seen = pending
        if isinstance(seen, tuple):
            module, flags = seen
            name = [n for n, _ in module.named_parameters()][int((~flags).nonzero()[0])]
            what = f"the weight {name} holds NaN or infinity"
        else:
            what = f"the training loss is {float(seen.float().mean())}"
        raise diverged(trainer, what, step, epoch)

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._check(trainer, self.pending)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._check(trainer, self.pending)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._check(trainer, self.pending)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        from zoo.core.numbers import non_finite_tensors

        self._check(trainer, self.pending)  # the step's own verdict first: it names the loss
        bad = non_finite_tensors(checkpoint.get("state_dict", {}))
        if bad:  # raising here is before the file is written: the checkpoints on disk stay the finite ones
            raise diverged(trainer, f"the weight {bad[0]} holds NaN or infinity")


def diverged(trainer: Any, what: str, step: int | None = None, epoch: int | None = None) -> Exception:
    """The one line of a run that stopped on a non-finite number: where, the likely causes, what is kept."""
    from pathlib import Path

    from zoo.errors import ZooError

    # the rate the run was set to (a scheduler may have taken the current one to 0 by now)
    lrs = [g.get("initial_lr", g.get("lr")) for opt in trainer.optimizers for g in opt.param_groups]
    lr = f" (set to {max(lrs):g})" if lrs and None not in lrs else ""
    last = Path(trainer.default_root_dir) / "checkpoints" / "last.ckpt"
    kept = f"the last finite checkpoint {last} is kept" if last.is_file() else "no checkpoint was saved"
    step = trainer.global_step if step is None else step
    epoch = trainer.current_epoch if epoch is None else epoch
    return ZooError(f"{what} at step {step} (epoch {epoch}): training diverged, so "
                    f"the run stopped; the usual causes are a learning rate too high{lr} or NaN/inf values in the "
                    f"data; lower the learning rate or check the data; {kept}")


class FiniteModelCheckpoint(ModelCheckpoint):
    """Lightning's ModelCheckpoint, except that a NaN or infinite monitored metric ranks no checkpoint (Lightning
    ranks NaN as the worst value, yet keeps it as the best while no other was saved)."""

    def _save_topk_checkpoint(self, trainer: Any, monitor_candidates: dict[str, Any]) -> None:
        import torch

        value = monitor_candidates.get(self.monitor) if self.monitor else None
        if value is not None and not bool(torch.isfinite(torch.as_tensor(value)).all()):
            log.warning("%s is %s at step %d: no best checkpoint is ranked by it", self.monitor, float(value),
                        trainer.global_step)
            return
        super()._save_topk_checkpoint(trainer, monitor_candidates)
