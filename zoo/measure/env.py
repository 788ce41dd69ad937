"""The environment a run or a bench measured on: packages, git commit, Python, OS, CPU, GPU, driver, CUDA, cuDNN.

`collect()` returns plain JSON-serialisable values, so it goes into `env.json` in a run directory, into checkpoints
(loadable with `torch.load(weights_only=True)`) and under `zoo bench` tables (`describe()`), so two numbers are only
compared when their environments match. Nothing here may break a run: every probe falls back to "unknown".
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "lightning", "torchmetrics", "torchvision", "torchaudio", "timm", "transformers", "gymnasium",
            "hydra-core", "numpy")
ROOT = Path(__file__).resolve().parents[2]  # the project checkout (or site-packages when installed)
UNKNOWN = "unknown"


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed distribution versions from their metadata (no import of the packages themselves); None if absent."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _git(args: list[str], cwd: Path, timeout: float) -> str | None:
    try:
        res = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):  # no git binary, or a hung network filesystem
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def git_state(root: Path = ROOT, timeout: float = 5.0) -> dict[str, Any]:
    """{commit, dirty} of the checkout the zoo runs from; "unknown" outside one (an installed package).

    The top level must be `root` itself: an installed zoo inside some other repository (a venv in a user's project)
    must not report that repository's commit. `dirty` counts tracked files only: run outputs are git-ignored and
    untracked scratch files do not change what the code does.
    """
    top = _git(["rev-parse", "--show-toplevel"], root, timeout)
    if top is None or Path(top).resolve() != root.resolve():
        return {"commit": UNKNOWN, "dirty": UNKNOWN}
    commit = _git(["rev-parse", "HEAD"], root, timeout) or UNKNOWN
    status = _git(["status", "--porcelain", "--untracked-files=no"], root, timeout)
    return {"commit": commit, "dirty": UNKNOWN if status is None else bool(status)}


def cpu_info(cpuinfo: str = "/proc/cpuinfo") -> dict[str, Any]:
    """CPU model (from /proc/cpuinfo on Linux, `platform` elsewhere), logical cores and cores this process may use."""
    model = None
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Processor", "cpu model") and value.strip():
                    model = value.strip()
                    break
    except OSError:
        pass
    model = model or platform.processor() or platform.machine() or UNKNOWN
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"model": model, "cores": os.cpu_count(), "usable_cores": usable}


def _nvml_info() -> dict[str, Any]:
    """Driver and GPU names from NVML (no CUDA context created); {} when NVML or a driver is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, or NVMLError: no driver / no GPU
        return {}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(pynvml.nvmlDeviceGetCount())]
        as_str = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731  (old bindings give bytes)
        return {"driver": as_str(driver), "names": [as_str(n) for n in names]}
    except Exception:
        return {}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def gpu_info() -> dict[str, Any]:
    """GPU names, driver, the CUDA and cuDNN versions torch was built with / loads; empty lists and None on CPU."""
    info: dict[str, Any] = {"names": [], "driver": None, "cuda": None, "cudnn": None}
    info.update(_nvml_info())
    try:
        import torch

        info["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            info["cudnn"] = torch.backends.cudnn.version()
            if not info["names"]:  # NVML missing: ask torch (this creates no context either)
                info["names"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:
        pass
    return info


def collect() -> dict[str, Any]:
    """Everything above, JSON-serialisable (str, int, bool, None, lists and dicts only)."""
    uname = platform.uname()
    return {
        "packages": package_versions(),
        "git": git_state(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "os": {"system": uname.system, "release": uname.release, "platform": platform.platform()},
        "cpu": cpu_info(),
        "gpu": gpu_info(),
        "hostname": socket.gethostname(),
    }


def describe(env: dict[str, Any]) -> str:
    """A few markdown lines for under a table: what the numbers above were measured on."""
    pk = env.get("packages", {})
    git = env.get("git", {})
    cpu = env.get("cpu", {})
    gpu = env.get("gpu", {})
    versions = ", ".join(f"{k} {v}" for k, v in pk.items() if v)
    dirty = git.get("dirty")
    commit = str(git.get("commit", UNKNOWN))[:12] + (" (dirty tree)" if dirty is True else "")
    cores = f"{cpu.get('cores')} cores" + (f", {cpu.get('usable_cores')} usable"
                                           if cpu.get("usable_cores") not in (None, cpu.get("cores")) else "")
    if gpu.get("names"):
        devices = ", ".join(gpu["names"])
        gpu_line = f"{devices}; driver {gpu.get('driver') or 'n/a'}, CUDA {gpu.get('cuda') or 'n/a'}, " \
                   f"cuDNN {gpu.get('cudnn') or 'n/a'}"
    else:
        gpu_line = "none"
    return "\n".join([
        f"- **host**: {env.get('hostname', UNKNOWN)}; {env.get('os', {}).get('platform', UNKNOWN)}; "
        f"Python {env.get('python', UNKNOWN)}",
        f"- **CPU**: {cpu.get('model', UNKNOWN)} ({cores})",
        f"- **GPU**: {gpu_line}",
        f"- **code**: commit {commit}",
        f"- **packages**: {versions}",
    ])
