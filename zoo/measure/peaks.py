"""Peak FLOP/s of a device for the math a run actually uses (for MFU)."""

from __future__ import annotations

import os
import re

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


def gpu_peak(name: str, kind: str) -> float | None:
    """Peak FLOP/s of one GPU for that math (`zoo.measure.mathmode.peak_kind`), or None for a GPU or a kind (fp64)
    not in the table."""
    for pattern, peaks in GPU_PEAKS:
        if re.search(pattern, name):
            return peaks[kind] * 1e12 if kind in peaks else None
    return None


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> tuple[set[str], str, float | None]:
    """(flags, vendor, clock in GHz) of the first CPU in /proc/cpuinfo; empty when unreadable (not Linux)."""
    try:
        text = open(cpuinfo).read()
    except OSError:
        return set(), "", None
    line = re.search(r"^flags\s*:(.*)$", text, re.M)
    flags = set(line.group(1).split()) if line else set()
    found = re.search(r"^vendor_id\s*:\s*(\S+)", text, re.M)
    vendor = found.group(1) if found else ""
    ghz: float | None = None
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
    if kind == "fp64":  # half the lanes of fp32
        return cores * ghz * 1e9 * cpu_flops_per_cycle(flags, vendor, "fp32") / 2
    return cores * ghz * 1e9 * cpu_flops_per_cycle(flags, vendor, "fp32" if kind == "tf32" else kind)
