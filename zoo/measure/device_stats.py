"""`callbacks=device_stats`: utilisation, memory, power and energy of the devices a run uses."""

from __future__ import annotations

import logging
import time
from typing import Any

from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from zoo.measure.energy import CpuStats, GpuStats, nvml_handle, open_nvml

log = logging.getLogger("zoo")


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
            pynvml = open_nvml()
        except Exception as e:  # noqa: BLE001 - ImportError or NVMLError (no driver library)
            log.warning("device_stats: NVML unavailable (%s: %s); `pip install nvidia-ml-py`. Logging the "
                        "CPU side only", type(e).__name__, e)
            return CpuStats(self.rapl_root)
        local = getattr(trainer.strategy, "parallel_devices", None) or [trainer.strategy.root_device]
        devices = [d.index for d in local]
        return GpuStats(pynvml, [nvml_handle(pynvml, i or 0) for i in devices])

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
