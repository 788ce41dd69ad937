"""Benchmark the GAN task on this machine: train it, then put its Fréchet distance next to the floor and init.

    python scripts/bench_gan.py [--timeout 900] [--grid docs/gan_samples.png] [-- extra zoo overrides]

1. `python -m zoo train task=gan/dcgan ...` in a subprocess (wall time measured; its own test stage reports the
   trained FD, the real-vs-real floor at the same sample count, and class coverage);
2. the same config and seed, untrained: FD at initialisation, through the same test stage in-process;
3. a grid of 64 samples from the best checkpoint through `zoo predict` (the picture in docs/).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def train(overrides: list[str], out: Path, timeout: float) -> tuple[float, Path, dict]:
    env = dict(os.environ, ZOO_OUTPUT_ROOT=str(out), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "zoo", "train", "task=gan/dcgan", "logger=csv", "callbacks.progress_bar=null",
           "trainer.enable_progress_bar=false", *overrides]
    print("$", " ".join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"training failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    found = re.search(r"best checkpoint: (\S+)", proc.stdout)
    if found is None:  # e.g. the run was interrupted (SIGTERM) and exited early
        sys.exit(f"training did not finish:\n{proc.stdout[-3000:]}")
    best = found.group(1)
    metrics = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+((?:test|val)/\w+)\s+([-\d.]+)$",
                                                                   proc.stdout, re.M)}
    return wall, Path(best), metrics


def fd_at_init(run_dir: Path) -> dict:
    """Rebuild data + module exactly as the run did (same resolved config, same seed) and test it untrained."""
    import lightning as L
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(run_dir / "config.yaml").config
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    data = instantiate(cfg.task.data)
    module = instantiate(cfg.task.module, _convert_="all", **data.model_kwargs())
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(run_dir / "init"))
    return trainer.test(module, datamodule=data, verbose=False)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default="/tmp/zoo-bench-gan")
    ap.add_argument("--grid", default=None, help="write a 64-sample grid here (e.g. docs/gan_samples.png)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    print(f"torch threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}; "
          f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    wall, best, trained = train(args.overrides, Path(args.out), args.timeout)
    print(f"trained in {wall:.0f} s: {json.dumps(trained)}", flush=True)
    init = fd_at_init(best.parent.parent)
    if args.grid:
        env = dict(os.environ, ZOO_OUTPUT_ROOT=args.out, PYTHONPATH=str(ROOT))
        subprocess.run([sys.executable, "-m", "zoo", "predict", f"ckpt_path={best}", "predict.grid=true",
                        "predict.num=64", f"predict.out={Path(args.grid).resolve()}"], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)
    n = int(trained.get("test/fd_samples", 0))
    rows = [
        ("wall time of `zoo train` (s)", f"{wall:.0f}"),
        (f"FD trained (EMA G, best val/fd checkpoint), n={n} vs {int(trained.get('test/fd_real_samples', 0))} real",
         f"{trained['test/fd']:.2f}"),
        (f"FD at initialisation (same seed), n={int(init['test/fd_samples'])}", f"{init['test/fd']:.2f}"),
        (f"FD floor, real train vs real val, n={n}", f"{trained['test/fd_floor']:.2f}"),
        ("class coverage of generated samples: min / max class share",
         f"{trained.get('test/coverage_min', float('nan')):.3f} / {trained.get('test/coverage_max', float('nan')):.3f}"),
        ("classes with >= half their fair share", f"{trained.get('test/classes_covered', float('nan')):.0f}"),
    ]
    print("\n| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")
    print(json.dumps({"wall_s": wall, "trained": trained, "init": init, "best": str(best)}))


if __name__ == "__main__":
    main()
