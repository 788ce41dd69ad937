"""One `zoo bench` combination, in its own process: a short real fit of the task, measured by a callback.

`python -m zoo bench --worker <spec.json>` runs this. The spec holds the combination's fully resolved config, so the
DDP ranks 1..N-1 that Lightning starts by re-running this same command line load the same config (no composition,
no drift) and join rank 0; only rank 0 writes the result file.

Step 0 runs under torch's FLOP counter (also with torch.compile: Dynamo runs eagerly while the counter is active,
then compiles on step 1); steps 0..warmup-1 are excluded from every timing; the next `steps` steps are measured.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger

from zoo.kit.hooks import find_hooks
from zoo.measure.energy import EnergyMeter
from zoo.measure.flops import FlopCounter, implausible, mfu
from zoo.measure.mathmode import peak_kind, read_flags
from zoo.measure.ops import OpCounter
from zoo.measure.peaks import cpu_peak, gpu_peak

# What a bench fit changes in the task's trainer: no validation, checkpoints, progress bar or summary, and no stop
# by epochs or steps (the callback stops the fit after warmup + steps batches).
BENCH_TRAINER = {"limit_val_batches": 0, "num_sanity_val_steps": 0, "enable_checkpointing": False,
                 "enable_progress_bar": False, "enable_model_summary": False, "max_epochs": 1_000_000,
                 "max_steps": -1, "min_epochs": None, "min_steps": None, "max_time": None,
                 "limit_train_batches": None, "val_check_interval": None, "check_val_every_n_epoch": 1}


class LastMetrics(Logger):
    """Keeps the last value of every logged metric in memory (some tasks log their losses to loggers directly)."""

    def __init__(self) -> None:
        super().__init__()
        self.metrics: dict[str, float] = {}

    @property
    def name(self) -> str:
        return "bench"

    @property
    def version(self) -> int:
        return 0

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        self.metrics.update({k: float(v) for k, v in metrics.items()})

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


class BenchCallback(Callback):
    """Times `steps` training batches after `warmup` ones, counts the task's units, FLOPs, operations, memory, energy.

    `units(module, batch)` is the domain's count of natural units in one batch (images, real tokens, ...). Timings
    are wall clock between batch ends (CUDA synchronised there), so a step includes its data wait: the gap between
    the previous batch's end and this batch's start, when the loader fetches the next batch. FLOPs are counted on
    step 0, operations on the last warm-up step (past one-time work such as optimizer state; on a CPU with compile,
    step 0, since the counter's dispatch mode keeps Dynamo from compiling the step it watches).
    """

    def __init__(self, units: Callable[[Any, Any], float], steps: int, warmup: int, loss_key: str = "train/loss",
                 peak_flops: float | None = None, memory_logger: LastMetrics | None = None,
                 compiled: bool = False, device_note: str | None = None) -> None:
        self.units_fn, self.steps, self.warmup, self.loss_key = units, steps, warmup, loss_key
        self.peak_override, self.memory = peak_flops, memory_logger
        self.compiled, self.device_note = compiled, device_note
        self.seen, self.units = 0, 0.0
        self.step_s: list[float] = []
        self.wait_s: list[float] = []
        self.flops: int | None = None
        self.ops: int | None = None
        self.result: dict[str, Any] | None = None
        self._counter: Any = None
        self._ops: OpCounter | None = None
        self._ops_step = warmup - 1
        self._last_end = self._start = 0.0
        self._loss: float | None = None
        self.energy: EnergyMeter | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        dev = pl_module.device
        self.energy = EnergyMeter([dev.index or 0] if dev.type == "cuda" else None)
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        elif self.compiled:
            self._ops_step = 0
        self._ops = OpCounter(dev.type)
        self._last_end = time.perf_counter()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.seen >= self.warmup:
            self.wait_s.append(time.perf_counter() - self._last_end)
        if self.seen == 0:
            self._counter = FlopCounter()
            self._counter.start()
        if self.seen == self._ops_step:
            self._count_ops("start")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.seen == self._ops_step:
            self.ops = self._count_ops("stop")  # before the clock: a warm-up step, but the next one starts at `now`
        if self._counter is not None:
            self.flops, self._counter = self._counter.stop(), None
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        now = time.perf_counter()
        if self.seen == self.warmup - 1:
            self._start = now
            if self.energy is not None:
                self.energy.start()
        elif self.seen >= self.warmup:
            self.step_s.append(now - self._last_end)
            self.units += float(self.units_fn(pl_module, batch))
        if isinstance(outputs, dict) and "loss" in outputs:
            self._loss = float(outputs["loss"])
        self.seen += 1
        if self.seen == self.warmup + self.steps:
            self.result = self._finish(trainer, pl_module, now - self._start)
            trainer.should_stop = True
        self._last_end = time.perf_counter()

    def _count_ops(self, what: str) -> int | None:
        """Start or stop the operation counter; a count that fails (a profiler CUPTI cannot start) is n/a, never the
        row's failure."""
        if self._ops is None:
            return None
        try:
            return getattr(self._ops, what)()
        except Exception as e:  # noqa: BLE001
            print(f"zoo bench: operations not counted ({type(e).__name__}: {e})", file=sys.stderr, flush=True)
            self._ops = None
            return None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        for counter in (self._counter, self._ops):  # never leave a dispatch mode or a profiler behind
            if counter is not None:
                counter.stop()

    def _loss_value(self, trainer: Any) -> float | None:
        if self._loss is not None:
            return self._loss
        value = trainer.callback_metrics.get(self.loss_key)
        if value is None and self.memory is not None:
            value = self.memory.metrics.get(self.loss_key)
        return None if value is None else float(value)

    def _peak(self, dev: torch.device, kind: str) -> tuple[float | None, str]:
        """The peak FLOP/s of one device for the math that ran, and where it comes from."""
        if self.peak_override:
            return self.peak_override, "given"
        if dev.type == "cuda":
            return gpu_peak(torch.cuda.get_device_name(dev), kind), "datasheet"
        return cpu_peak(kind, torch.get_num_threads()), "estimate"  # the cores this process's math runs on

    def _math(self, trainer: Any, dev: torch.device) -> dict[str, Any]:
        """The math the measured steps ran with, read from the process's switches after them (not from the config)."""
        precision, flags = str(trainer.precision), read_flags()
        kind = peak_kind(precision, flags, dev.type)
        peak, source = self._peak(dev, kind)
        device = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
        return {"precision_resolved": precision, "math": kind, "math_flags": flags, "device": device,
                "device_note": self.device_note if dev.type == "cpu" else None,
                "peak_flops_per_device": peak, "peak_source": source if peak else "n/a"}

    def _finish(self, trainer: Any, pl_module: Any, seconds: float) -> dict[str, Any]:
        dev = pl_module.device
        energy = self.energy.read() if self.energy is not None else None
        memory = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else \
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
        # One collective for everything the ranks must combine (every rank reaches this same batch).
        local = torch.tensor([self.units, float(self.flops or 0), float(memory), float(energy or 0.0)],
                             dtype=torch.float64, device=dev if dev.type == "cuda" else "cpu")
        gathered = trainer.strategy.all_gather(local).reshape(-1, 4).cpu() if trainer.world_size > 1 else local[None]
        units, flops = float(gathered[:, 0].sum()), float(gathered[:, 1].sum())
        # NVML: each rank its own GPU (sum); RAPL: the whole socket, read once (rank 0's).
        energy_j = None if energy is None else float(gathered[:, 3].sum()) if dev.type == "cuda" else energy
        math, step_mean, world = self._math(trainer, dev), seconds / self.steps, trainer.world_size
        row = {
            "status": "ok", "steps": self.steps, "warmup": self.warmup, "world_size": world, **math,
            "units": units, "units_per_s": units / seconds, "seconds": seconds,
            "step_ms_mean": 1000 * step_mean, "step_ms_p50": 1000 * percentile(self.step_s, 50),
            "step_ms_p90": 1000 * percentile(self.step_s, 90),
            "data_wait_frac": sum(self.wait_s) / max(sum(self.step_s), 1e-12),
            "ops_per_step": self.ops, "ops_kind": self._ops.kind if self._ops else None,
            "ops_eager": bool(self.compiled and dev.type != "cuda"),
            "flops_per_step": flops or None, "mfu": mfu(flops, step_mean, math["peak_flops_per_device"], world),
            "peak_mem_bytes": float(gathered[:, 2].max()),
            "energy_source": self.energy.source if self.energy is not None else "n/a", "energy_j": energy_j,
            "energy_per_step_j": None if energy_j is None else energy_j / self.steps,
            "energy_per_unit_j": None if energy_j is None or not units else energy_j / units,
            "loss": self._loss_value(trainer),
        }
        wrong = implausible(flops, step_mean, math["peak_flops_per_device"], math["math"], world)
        return {**row, "status": "measurement error", "reason": wrong} if wrong else row


def fit(spec: dict[str, Any]) -> dict[str, Any] | None:
    """Run the combination's short fit; rank 0 returns the measured row (other ranks None)."""
    from omegaconf import OmegaConf, open_dict

    from zoo.core.build import build_data_and_module, start
    from zoo.core.trainer import build_trainer, math_mode, prepare_module

    cfg = OmegaConf.create(spec["config"])
    domain = find_hooks(cfg.task).need("bench", "bench")
    # log on the last measured batch only: the loss column is there for tasks that log only on logging steps (gan),
    # and no measured step but the last pays for a logging step's device sync
    logging = {"log_every_n_steps": int(spec["warmup"]) + int(spec["steps"])}
    with open_dict(cfg):
        cfg.merge_with({"trainer": {**BENCH_TRAINER, **logging}}, getattr(domain, "RUN_OVERRIDES", {}))
    start(cfg)
    datamodule, module = build_data_and_module(cfg)
    memory = LastMetrics()
    cb = BenchCallback(domain.units, int(spec["steps"]), int(spec["warmup"]), getattr(domain, "LOSS_KEY", "train/loss"),
                       spec.get("peak_flops"), memory, bool(cfg.trainer.get("compile")), spec.get("device_note"))
    trainer = build_trainer(cfg, [cb], [memory])
    trainer.fit(prepare_module(module, cfg.trainer), datamodule=datamodule)
    if not trainer.is_global_zero:
        return None
    if cb.result is None:
        raise RuntimeError(f"the fit ended after {cb.seen} batches, before warmup + steps = {cb.warmup + cb.steps}; "
                           "lower bench.steps/bench.warmup or give the task more data")
    return {**cb.result, "math_asked": math_mode(cfg.trainer).as_dict()}


def root_cause(e: BaseException) -> BaseException:
    """The innermost exception of a chain (`raise ... from`, or raised while handling another): a wrapper's message
    ("InternalTorchDynamoError", "an error occurred in a callback") hides what went wrong."""
    seen = {id(e)}
    while True:
        inner = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
        if inner is None or id(inner) in seen:
            return e
        seen.add(id(inner))
        e = inner


def failure_reason(e: BaseException, limit: int = 300) -> str:
    """`RootType: its line (raised as WrapperType)`: a failed row's reason."""
    from zoo.errors import one_line

    root = root_cause(e)
    text = f"{type(root).__name__}: {one_line(root) or '(no message)'}"
    suffix = "" if root is e else f" (raised as {type(e).__name__})"
    return text[:limit - len(suffix)] + suffix


def worker(spec_path: str) -> None:
    """Entry of `python -m zoo bench --worker <spec>`: write the result (or the one-line failure) as JSON."""
    spec = json.loads(Path(spec_path).read_text())
    out = Path(spec["result"])
    try:
        row = fit(spec)
    except Exception as e:  # noqa: BLE001 - any failure of one combination is its row's reason; the bench goes on
        if os.environ.get("LOCAL_RANK", "0") == "0":
            import traceback

            traceback.print_exc()  # into the combination's worker.log
            out.write_text(json.dumps({"status": "failed", "reason": failure_reason(e)}))
        sys.exit(1)
    if row is not None:
        from zoo.base import write_text_atomic

        write_text_atomic(out, json.dumps(row))
