"""Peak FLOP/s per device and precision, FLOPs of a training step, MFU, and energy meters (NVML, Intel RAPL).

What `zoo bench` divides by. GPU peaks are vendor datasheet figures for DENSE math (no 2:4 sparsity), in TFLOP/s;
the CPU's is estimated from its cores, clock and vector width. Everything here is plain functions so that a test can
check MFU exactly against a model whose FLOPs are known by hand.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Callable

# Dense TFLOP/s by (name pattern, checked in order) -> {math: peak}. Sources: NVIDIA datasheets (H100/H200 SXM and
# PCIe/NVL, A100 80GB, L40S, L4) and the Ada Lovelace whitepaper (RTX 4090, tensor cores with FP32 accumulate, which
# is what mixed-precision training uses). The datasheets print the sparse figure first: these are half of it.
GPU_PEAKS: list[tuple[str, dict[str, float]]] = [
    (r"H200.*NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}),
    (r"H200", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    (r"H100.*(PCIe|NVL)", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}),
    (r"H100", {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    (r"A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    (r"L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.1, "fp16": 362.1}),
    (r"\bL4\b", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}),
    (r"RTX 4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2}),
]


def math_kind(precision: str, matmul_precision: str = "highest") -> str:
    """Which peak applies: a Lightning precision plus torch's float32 matmul precision -> fp32 | tf32 | bf16 | fp16."""
    if "bf16" in precision:
        return "bf16"
    if precision.startswith("16"):
        return "fp16"
    return "tf32" if matmul_precision in ("high", "medium") else "fp32"


def gpu_peak(name: str, kind: str) -> float | None:
    """Peak FLOP/s of one GPU for that math, or None for a GPU not in the table."""
    for pattern, peaks in GPU_PEAKS:
        if re.search(pattern, name):
            return peaks[kind] * 1e12
    return None


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> tuple[set[str], str, float | None]:
    """(flags, vendor, clock in GHz) of the first CPU in /proc/cpuinfo; empty when unreadable (not Linux)."""
    try:
        text = open(cpuinfo).read()
    except OSError:
        return set(), "", None
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split()) if "flags" in text else set()
    vendor = (re.search(r"^vendor_id\s*:\s*(\S+)", text, re.M) or [None, ""])[1]
    ghz = None
    nominal = re.search(r"^model name\s*:.*@\s*([\d.]+)\s*GHz", text, re.M)  # the rated clock, when the name has it
    if nominal:
        ghz = float(nominal.group(1))
    else:
        try:  # the maximum boost clock, where cpufreq is exposed
            ghz = int(open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read()) / 1e6
        except (OSError, ValueError):
            mhz = re.search(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M)
            ghz = float(mhz.group(1)) / 1000 if mhz else None
    return flags, vendor, ghz


def cpu_flops_per_cycle(flags: set[str], vendor: str, kind: str) -> int:
    """FLOPs per cycle per core: vector lanes x 2 (an FMA is two FLOPs) x 2 FMA pipes (most x86 server cores).

    AMD's Zen 4 runs AVX-512 on 256-bit pipes, so it counts as 8 lanes. bf16: AMX tiles (Sapphire Rapids+) do 1024
    FLOPs a cycle; AVX512-BF16's dot products twice the fp32 rate. Without either, bf16 is converted to fp32 math.
    """
    if kind == "bf16" and "amx_bf16" in flags:
        return 1024
    lanes = 16 if "avx512f" in flags and vendor != "AuthenticAMD" else 8 if {"avx2", "avx", "avx512f"} & flags else 4
    per_lane = 2 if "fma" in flags or "avx512f" in flags else 1
    rate = lanes * per_lane * 2
    return rate * 2 if kind == "bf16" and "avx512_bf16" in flags else rate


def cpu_peak(kind: str, cores: int | None = None, cpuinfo: str = "/proc/cpuinfo") -> float | None:
    """Estimated peak FLOP/s of the cores this process may use (None when the clock or flags are unknown)."""
    flags, vendor, ghz = cpu_flags(cpuinfo)
    if not flags or not ghz:
        return None
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores * ghz * 1e9 * cpu_flops_per_cycle(flags, vendor, "fp32" if kind == "tf32" else kind)


def count_flops(step: Callable[[], Any]) -> tuple[int, Any]:
    """FLOPs of whatever `step()` runs (forward, backward: every matmul/conv torch dispatches), and its result.

    Under torch.compile the step runs eagerly while the counter is active (Dynamo does not compile under a dispatch
    mode), so the count is the same as eager and compilation happens on the next call.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        out = step()
    return int(counter.get_total_flops()), out


def mfu(flops_per_step: float | None, step_s: float, peak_per_device: float | None, devices: int = 1) -> float | None:
    """Model FLOPs utilisation: FLOPs per optimizer step (all devices) / step time / peak of all devices."""
    if not flops_per_step or not peak_per_device or step_s <= 0:
        return None
    return flops_per_step / step_s / (peak_per_device * devices)


# ---------------------------------------------------------------------------------------------------------- energy
class EnergyMeter:
    """Joules since `start()`: NVML's total-energy counter of the GPUs given, else Intel RAPL's package counters
    (the whole socket: other processes' work counts too), else none (`read()` returns None)."""

    def __init__(self, cuda_devices: list[int] | None = None) -> None:
        self.source, self._nvml, self._rapl = "n/a", [], []
        if cuda_devices:
            self._nvml = _nvml_handles(cuda_devices)
            if self._nvml:
                self.source = "nvml"
        else:
            self._rapl = _rapl_zones()
            if self._rapl:
                self.source = "rapl"
        self._start: list[int] = []

    def _raw(self) -> list[int]:
        if self._nvml:
            import pynvml

            return [int(pynvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._nvml]  # mJ
        return [int(open(p).read()) for p, _ in self._rapl]  # uJ

    def start(self) -> None:
        self._start = self._raw() if self.source != "n/a" else []

    def read(self) -> float | None:
        if self.source == "n/a" or not self._start:
            return None
        now = self._raw()
        if self._nvml:
            return sum(b - a for a, b in zip(self._start, now)) / 1e3
        total = 0
        for (a, b), (_, wrap) in zip(zip(self._start, now), self._rapl):
            total += b - a if b >= a else b + wrap - a  # the counter wraps at max_energy_range_uj
        return total / 1e6


def _nvml_handles(cuda_devices: list[int]) -> list:
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        handles = []
        for i in cuda_devices:
            props = torch.cuda.get_device_properties(i)
            bus = getattr(props, "pci_bus_id", None)
            if bus is not None:  # CUDA and NVML number GPUs differently under CUDA_VISIBLE_DEVICES: match the bus
                dom, dev = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
                handles.append(pynvml.nvmlDeviceGetHandleByPciBusId(f"{dom:08x}:{bus:02x}:{dev:02x}.0".encode()))
            else:
                handles.append(pynvml.nvmlDeviceGetHandleByIndex(i))
        for h in handles:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # Volta+; older GPUs raise NotSupported
        return handles
    except Exception:  # noqa: BLE001 - no NVML, no driver, or no energy counter: energy is "n/a"
        return []


def _rapl_zones() -> list[tuple[str, int]]:
    """Readable package-level RAPL counters (intel-rapl:N, not the core/dram sub-zones), with their wrap value."""
    zones = []
    for zone in sorted(glob.glob("/sys/class/powercap/intel-rapl:[0-9]*")):
        if ":" in os.path.basename(zone).split("intel-rapl:", 1)[1]:
            continue
        try:
            int(open(f"{zone}/energy_uj").read())
            wrap = int(open(f"{zone}/max_energy_range_uj").read())
        except (OSError, ValueError):  # root-only on most kernels since 2020 (CVE-2020-8694)
            continue
        zones.append((f"{zone}/energy_uj", wrap))
    return zones
