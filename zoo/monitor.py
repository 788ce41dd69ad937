"""What every training run measures: throughput (Lightning's ThroughputMonitor, with FLOPs and MFU) and, with
`callbacks=device_stats`, the device's utilisation, memory, power and energy.

Throughput keys in TensorBoard (every `log_every_n_steps`, over the last `window - 1` logging intervals):
`train/samples_per_sec` (all ranks together, in the task's unit of one sample), `train/step_ms`,
`train/tokens_per_sec` (real tokens, when batches carry an attention mask) or `train/items_per_sec` (a task's
`length_fn`), `train/flops_per_sec` and `train/mfu` (where the device's peak is known).
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import torch
from lightning.pytorch.callbacks import Callback, ThroughputMonitor
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.rank_zero import rank_zero_only

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
    from zoo.config import import_attr  # "package.module:function" or "package.module.function"

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
                         length_fn=real_tokens if auto else _resolve(length_fn), window_size=max(2, int(window)))
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
            from torch.utils.flop_counter import FlopCounterMode

            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()
        except Exception as e:  # noqa: BLE001 - a failed count must never stop training
            self._counter = None
            log.info("throughput: FLOPs not counted (%s: %s); no train/mfu", type(e).__name__, e)

    def _stop_counting(self, batch: Any = None) -> None:
        counter, self._counter = self._counter, None
        if counter is None:
            return
        try:
            counter.__exit__(None, None, None)
            total = int(counter.get_total_flops())
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


# ---------------------------------------------------------------------- device statistics (callbacks=device_stats)
class EnergyCounter:
    """Joules since `start()` from a cumulative hardware counter that may wrap around (RAPL's energy_uj wraps at
    max_energy_range_uj; NVML's 64-bit millijoule counter does not). Call `read()` more often than one wrap period."""

    def __init__(self, read_raw: Callable[[], float], to_joules: float, wrap: float | None = None) -> None:
        self.read_raw, self.to_joules, self.wrap = read_raw, to_joules, wrap
        self.total = 0.0
        self._last: float | None = None

    def start(self) -> None:
        self._last, self.total = float(self.read_raw()), 0.0

    def read(self) -> float:
        now = float(self.read_raw())
        if self._last is not None:
            delta = now - self._last
            if delta < 0 and self.wrap:  # the counter went past its range and restarted from 0
                delta += self.wrap
            self.total += max(delta, 0.0) * self.to_joules
        self._last = now
        return self.total


def rapl_counters(root: str = "/sys/class/powercap") -> tuple[list[EnergyCounter], str]:
    """One counter per CPU package (intel-rapl:N, not its sub-domains, which the package already includes); an
    empty list and the reason when RAPL is absent or unreadable (it is root-only on most kernels since 2020)."""
    from pathlib import Path

    base = Path(root)
    zones = sorted(p for p in base.glob("intel-rapl:*") if p.name.count(":") == 1) if base.is_dir() else []
    if not zones:
        return [], f"no RAPL domains under {root}"
    counters = []
    for zone in zones:
        f = zone / "energy_uj"
        try:
            f.read_text()
            wrap = float((zone / "max_energy_range_uj").read_text())
        except (OSError, ValueError) as e:
            return [], f"RAPL {f} not readable ({type(e).__name__}; root-only on this kernel)"
        counters.append(EnergyCounter(lambda f=f: float(f.read_text()), 1e-6, wrap))
    return counters, f"RAPL, {len(zones)} CPU package(s)"


def _nvml_handle(nvml: Any, index: int) -> Any:
    """NVML's handle for torch's cuda:<index> (NVML ignores CUDA_VISIBLE_DEVICES: match by UUID where torch has it)."""
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is not None:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except Exception:  # noqa: BLE001 - older drivers, MIG: fall back to the index
            pass
    return nvml.nvmlDeviceGetHandleByIndex(index)


class GpuStats:
    """Utilisation, memory, power and energy of the given NVML handles (one node's GPUs of this run)."""

    def __init__(self, nvml: Any, handles: list) -> None:
        self.nvml, self.handles = nvml, handles
        self.energy: list[EnergyCounter] = []
        for h in handles:
            try:
                nvml.nvmlDeviceGetTotalEnergyConsumption(h)  # millijoules since the driver loaded (Volta+)
                self.energy.append(EnergyCounter(lambda h=h: nvml.nvmlDeviceGetTotalEnergyConsumption(h), 1e-3))
            except Exception:  # noqa: BLE001 - no counter on this GPU: no energy figure rather than a guess
                self.energy = []
                break
        self.source = f"NVML, {len(handles)} GPU(s)" if self.energy else "n/a (this GPU has no NVML energy counter)"

    def start(self) -> None:
        for c in self.energy:
            c.start()

    def read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for i, h in enumerate(self.handles):
            tag = f"device/gpu{i}_"
            out[tag + "util_pct"] = float(self.nvml.nvmlDeviceGetUtilizationRates(h).gpu)
            out[tag + "memory_gb"] = self.nvml.nvmlDeviceGetMemoryInfo(h).used / 1e9
            out[tag + "power_w"] = self.nvml.nvmlDeviceGetPowerUsage(h) / 1e3  # milliwatts
        if self.energy:
            out["device/energy_j"] = sum(c.read() for c in self.energy)
        return out


class CpuStats:
    """This process's CPU utilisation (of the cores it may use) and resident memory; RAPL energy where readable."""

    def __init__(self, rapl_root: str = "/sys/class/powercap") -> None:
        import os

        self.cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.energy, reason = rapl_counters(rapl_root)
        self.source = reason if self.energy else f"n/a ({reason})"
        self._t: tuple[float, float] | None = None

    def _times(self) -> tuple[float, float]:
        # process_time: all threads of this process at ns resolution (os.times ticks at 10 ms, too coarse for
        # short windows); DataLoader workers are separate processes and not included
        return time.perf_counter(), time.process_time()

    def start(self) -> None:
        self._t = self._times()
        for c in self.energy:
            c.start()

    def read(self) -> dict[str, float]:
        import os

        now = self._times()
        out: dict[str, float] = {}
        if self._t is not None and now[0] > self._t[0]:
            out["device/cpu_util_pct"] = 100 * (now[1] - self._t[1]) / (now[0] - self._t[0]) / self.cores
        self._t = now
        try:
            with open("/proc/self/statm") as f:
                out["device/rss_gb"] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9
        except (OSError, ValueError, IndexError):
            import resource

            out["device/rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1e3 / 1e9  # peak, in kB
        if self.energy:
            out["device/energy_j"] = sum(c.read() for c in self.energy)
        return out


class DeviceStats(Callback):
    """`callbacks=device_stats`: the device's utilisation, memory, power and cumulative energy every N training
    steps (NVML on NVIDIA GPUs, the process's CPU use and RSS plus RAPL on CPU), and the energy of the whole fit on
    one line at its end. Global rank 0 reads the GPUs of its node that this run uses."""

    def __init__(self, every_n_steps: int = 50, rapl_root: str = "/sys/class/powercap") -> None:
        self.every_n_steps, self.rapl_root = max(1, int(every_n_steps)), rapl_root
        self.stats: GpuStats | CpuStats | None = None

    def _open(self, trainer: Any) -> GpuStats | CpuStats:
        if trainer.strategy.root_device.type != "cuda":
            return CpuStats(self.rapl_root)
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as e:  # noqa: BLE001 - ImportError or NVMLError (no driver library)
            log.warning("zoo: device_stats: NVML unavailable (%s: %s); `pip install nvidia-ml-py`. Logging the "
                        "CPU side only", type(e).__name__, e)
            return CpuStats(self.rapl_root)
        local = getattr(trainer.strategy, "parallel_devices", None) or [trainer.strategy.root_device]
        devices = [d.index for d in local]
        return GpuStats(pynvml, [_nvml_handle(pynvml, i or 0) for i in devices])

    @rank_zero_only
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.stats = self._open(trainer)
        self.stats.start()
        self._t0, self._batches = time.perf_counter(), 0

    @rank_zero_only
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._batches += 1  # own count: manual optimisation (GAN, PPO) moves global_step by several per batch
        if self.stats is not None and self._batches % self.every_n_steps == 1 % self.every_n_steps:
            trainer._logger_connector.log_metrics(self.stats.read())

    @rank_zero_only
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.stats is None:
            return
        stats = self.stats.read()
        seconds = time.perf_counter() - self._t0
        if "device/energy_j" in stats:
            j = stats["device/energy_j"]
            used = f"{j / 1e3:.2f} kJ ({j / 3600:.3f} Wh, mean {j / max(seconds, 1e-9):.0f} W over {seconds:.0f} s; " \
                   f"{self.stats.source})"
        else:
            used = self.stats.source if self.stats.source.startswith("n/a") else f"n/a ({self.stats.source})"
        print(f"zoo: energy used by training: {used}", flush=True)
