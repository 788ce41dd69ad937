"""Throughput during training: items per second, FLOPs and MFU, on Lightning's ThroughputMonitor."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from zoo.measure.flops import FlopCounter

log = logging.getLogger("zoo")


def batch_size(batch: Any) -> int:
    """Samples in a batch by default: the leading dim of its first tensor (tuple, list or dict; 1 when none)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.ndim else 1
    if isinstance(batch, (list, tuple)) and batch:
        return batch_size(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_size(next(iter(batch.values())))
    return 1  # a batch that is not data (an RL update index): one "sample" per step keeps the counts monotonic


def real_tokens(batch: Any) -> torch.Tensor | None:
    """Tokens that are not padding: the attention mask's sum (a device tensor: read at logging time, no sync now)."""
    if isinstance(batch, dict) and isinstance(batch.get("attention_mask"), torch.Tensor):
        return batch["attention_mask"].sum()
    return None


def input_size(batch: Any) -> int:
    """Elements in all tensors of a batch: what FLOPs scale with when batches differ in padded length."""
    if isinstance(batch, torch.Tensor):
        return batch.numel()
    if isinstance(batch, (list, tuple)):
        return sum(input_size(b) for b in batch)
    if isinstance(batch, dict):
        return sum(input_size(b) for b in batch.values())
    return 0


def _resolve(fn: str | Callable | None) -> Callable | None:
    if fn is None or callable(fn):
        return fn
    from zoo.base import import_attr  # "package.module:function" or "package.module.function"

    return import_attr(fn)


class Throughput(ThroughputMonitor):
    """Lightning's ThroughputMonitor with the zoo's keys, no per-step device sync, and FLOPs counted once.

    Why not the stock callback as is: it calls `torch.cuda.synchronize()` and updates its window on every batch (a
    stall per step on GPUs, which the zoo's overhead budget of 2% cannot afford), logs nothing until 100 batches have
    passed, and logs validation throughput against batch indices. Here a batch only adds to host-side counters (token
    counts stay on the device); the clock is read, synced, and the window updated only on logging steps.

    FLOPs per batch: a `flops_per_batch` attribute of the module if the task defines one, else one training step
    (forward, backward, optimizer; manual optimisation included) counted with torch's FlopCounterMode on the first
    batch, and scaled for later batches by their size in tensor elements (padded text and audio batches differ in
    length: linear in length is exact for convolutions and linear layers, and low for attention's quadratic part).
    If counting fails, the run goes on without FLOPs and says why once.
    """

    def __init__(self, batch_size_fn: str | Callable | None = None, length_fn: str | Callable | None = "auto",
                 length_name: str = "items", count_flops: bool = True, window: int = 2,
                 peak_flops: float | None = None) -> None:
        auto = length_fn == "auto"
        super().__init__(batch_size_fn=_resolve(batch_size_fn) or batch_size,
                         # Lightning's annotation says int; both its counters and the zoo's also add a 0-d tensor,
                         # kept on the device until a logging step reads it (real_tokens)
                         length_fn=real_tokens if auto else _resolve(length_fn),  # type: ignore[arg-type]
                         window_size=max(2, int(window)))
        self.length_key = "tokens" if auto else length_name
        self.count_flops, self.peak_flops = count_flops, peak_flops
        self.flops_per_batch: int | None = None
        self._flops_size = 0  # input_size() of the batch whose FLOPs were counted
        self._counter: Any = None
        self._counted = False
        self._lengths_ok = True
        self._val_t0: float | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if self.peak_flops:  # a device Lightning has no table entry for (its table covers NVIDIA/TPU only)
            self.available_flops = int(self.peak_flops)
            for t in self._throughputs.values():
                t.available_flops = self.available_flops

    def _start(self, trainer: Any) -> None:
        super()._start(trainer)
        stage = trainer.state.stage
        self._lengths[stage] = 0
        self._pending = 0  # batches since the last window update
        self._pending_flops = 0.0  # and their FLOPs

    # ------------------------------------------------------------------ FLOPs of one step
    @rank_zero_only
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._counted or not self.count_flops or hasattr(pl_module, "flops_per_batch"):
            return
        self._counted = True
        try:
            self._counter = FlopCounter()
            self._counter.start()
        except Exception as e:  # noqa: BLE001 - a failed count must never stop training
            self._counter = None
            log.info("throughput: FLOPs not counted (%s: %s); no train/mfu", type(e).__name__, e)

    def _stop_counting(self, batch: Any = None) -> None:
        counter, self._counter = self._counter, None
        if counter is None:
            return
        try:
            total = int(counter.stop() or 0)
        except Exception as e:  # noqa: BLE001
            log.info("throughput: FLOPs not counted (%s: %s); no train/mfu", type(e).__name__, e)
            return
        self.flops_per_batch = total or None
        self._flops_size = input_size(batch)
        if not total:
            log.info("throughput: the first training step ran no operation torch's FLOP counter knows "
                     "(matmul, conv, attention); no train/mfu")

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._stop_counting()  # never leave a dispatch mode active behind an interrupted step

    # ------------------------------------------------------------------ training
    @rank_zero_only
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, *_: Any) -> None:
        self._stop_counting(batch)
        stage = RunningStage.TRAINING
        with torch.inference_mode():
            self._samples[stage] += int(self.batch_size_fn(batch))
            if self.length_fn is not None and self._lengths_ok:
                n = self.length_fn(batch)
                self._lengths_ok = n is not None
                self._lengths[stage] = self._lengths[stage] + n if n is not None else 0
        self._batches[stage] += 1
        self._pending += 1
        module_flops = getattr(pl_module, "flops_per_batch", None)
        if module_flops:
            self._pending_flops += module_flops
        elif self.flops_per_batch:
            size = input_size(batch)
            self._pending_flops += self.flops_per_batch * (size / self._flops_size if size and self._flops_size else 1)
        if trainer.fit_loop._should_accumulate() or not trainer._logger_connector.should_update_logs:
            return
        self._update_window(trainer, pl_module, stage)
        self._log(trainer, stage)

    def _update_window(self, trainer: Any, pl_module: Any, stage: RunningStage) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()  # on logging steps only: the clock must see the queued work finish
        elapsed = time.perf_counter() - self._t0s[stage]
        lengths = int(self._lengths[stage]) if self.length_fn is not None and self._lengths_ok else None
        if lengths is not None and lengths < self._samples[stage]:
            lengths = None  # Throughput wants at least one item per sample; a task's unit below that is not items
        self._throughputs[stage].update(time=elapsed, batches=self._batches[stage], samples=self._samples[stage],
                                        lengths=lengths, flops=int(self._pending_flops) or None)
        self._pending, self._pending_flops = 0, 0.0

    def _log(self, trainer: Any, stage: RunningStage) -> None:
        tp = self._throughputs[stage]
        if len(tp._time) < tp._time.maxlen:
            return
        raw = tp.compute()
        world = trainer.world_size
        out = {"train/step_ms": 1000 * (tp._time[-1] - tp._time[0]) / (tp._batches[-1] - tp._batches[0])}
        out["train/samples_per_sec"] = raw.get("samples_per_sec", raw["device/samples_per_sec"] * world)
        if "device/items_per_sec" in raw:
            out[f"train/{self.length_key}_per_sec"] = raw["device/items_per_sec"] * world
        if "device/flops_per_sec" in raw:
            out["train/flops_per_sec"] = raw["device/flops_per_sec"] * world
        if "device/mfu" in raw:
            out["train/mfu"] = raw["device/mfu"]
        trainer._logger_connector.log_metrics(out)

    # ------------------------------------------------------------------ evaluation: time only
    @rank_zero_only
    def on_validation_start(self, trainer: Any, *_: Any) -> None:
        self._val_t0 = None if trainer.sanity_checking else time.perf_counter()

    def on_validation_batch_end(self, *args: Any, **kwargs: Any) -> None:
        pass  # evaluation throughput is `zoo bench`'s job; here it would be one more sync per batch

    @rank_zero_only
    def on_validation_end(self, trainer: Any, *_: Any) -> None:
        # validation inside fit must not count as training time
        if self._val_t0 is not None and RunningStage.TRAINING in self._t0s:
            self._t0s[RunningStage.TRAINING] += time.perf_counter() - self._val_t0
        self._val_t0 = None

    def on_test_start(self, *args: Any) -> None:
        pass

    def on_test_batch_end(self, *args: Any, **kwargs: Any) -> None:
        pass

    def on_predict_start(self, *args: Any) -> None:
        pass

    def on_predict_batch_end(self, *args: Any, **kwargs: Any) -> None:
        pass
