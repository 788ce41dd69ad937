"""GPU check and throughput: the default vision task with precision=auto against precision=32-true.

    python scripts/evidence/bench_vision_gpu.py        # on a machine with a CUDA GPU

For each precision it runs `python -m zoo train task=vision/resnet` on the GPU (CSV logger) and reports the
training images/s that the zoo's Throughput callback logged (epochs after the first, to skip cudnn autotuning),
plus test accuracy. A second pair runs ResNet-50 at 224 px, where mixed precision and channels_last matter.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from common import ROOT, ZOO_MODULE, csv_series, zoo_env

CASES = {
    "default (resnet18, digits 32px)": ["trainer.max_epochs=4"],
    "resnet50 224px": ["task.module.arch=resnet50", "task.data.image_size=224", "task.data.batch_size=128",
                       "trainer.max_epochs=2", "trainer.channels_last=true"],
}


def run(precision: str, extra: list[str], root: Path) -> tuple[float, float]:
    out = root / precision
    cmd = [*ZOO_MODULE, "train", "task=vision/resnet", "trainer.accelerator=gpu", "trainer.devices=1",
           f"trainer.precision={precision}", "logger=csv", "trainer.enable_progress_bar=false", *extra]
    subprocess.run(cmd, check=True, cwd=ROOT, env=zoo_env(ZOO_OUTPUT_ROOT=str(out)))
    metrics = csv_series(next(out.rglob("metrics.csv")))
    speeds, acc = metrics.get("train/samples_per_sec", []), metrics.get("test/acc", [])
    return (max(speeds[1:] or speeds), acc[-1] if acc else float("nan"))


def main() -> None:
    import torch

    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU here: this benchmark needs one")
    name = torch.cuda.get_device_name(0)
    print(f"GPU: {name}, torch {torch.__version__}, bf16 supported: {torch.cuda.is_bf16_supported()}")
    with tempfile.TemporaryDirectory() as tmp:
        for case, extra in CASES.items():
            for precision in ("auto", "32-true"):
                speed, acc = run(precision, extra, Path(tmp) / case.split()[0])
                print(f"{case:<34} precision={precision:<8} {speed:9.0f} images/s  test/acc {acc:.4f}", flush=True)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
