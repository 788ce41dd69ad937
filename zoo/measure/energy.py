"""Energy and device counters, read in one place: NVML on NVIDIA GPUs, RAPL on CPUs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


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
        counters.append(EnergyCounter(_file_reader(f), 1e-6, wrap))
    return counters, f"RAPL, {len(zones)} CPU package(s)"


def _file_reader(f: Path) -> Callable[[], float]:
    return lambda: float(f.read_text())


def _nvml_reader(nvml: Any, handle: Any) -> Callable[[], float]:
    return lambda: float(nvml.nvmlDeviceGetTotalEnergyConsumption(handle))


def nvml_handle(nvml: Any, index: int) -> Any:
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
                self.energy.append(EnergyCounter(_nvml_reader(nvml, h), 1e-3))
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


def open_nvml() -> Any:
    """pynvml, initialised; raises ImportError or an NVMLError where there is no NVML (the caller says so)."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


class EnergyMeter:
    """Joules since `start()`, summed over the counters a step can use: NVML's total-energy counters of the given
    CUDA devices (found as every reader here finds them, `nvml_handle`), else RAPL's CPU package counters (the whole
    socket: other processes' work counts too), else none (`read()` returns None)."""

    def __init__(self, cuda_devices: list[int] | None = None, rapl_root: str = "/sys/class/powercap") -> None:
        self.counters: list[EnergyCounter] = []
        self.source = "n/a"
        if cuda_devices:
            try:
                nvml = open_nvml()
                stats = GpuStats(nvml, [nvml_handle(nvml, i) for i in cuda_devices])
                self.counters, self.source = stats.energy, "nvml" if stats.energy else "n/a"
            except Exception:  # noqa: BLE001 - no NVML, no driver, or no energy counter: energy is "n/a"
                pass
        else:
            self.counters, _ = rapl_counters(rapl_root)
            self.source = "rapl" if self.counters else "n/a"
        self._started = False

    def start(self) -> None:
        for c in self.counters:
            c.start()
        self._started = bool(self.counters)

    def read(self) -> float | None:
        return sum(c.read() for c in self.counters) if self._started else None
