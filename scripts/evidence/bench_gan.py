"""Benchmark the GAN task on this machine: train it, then put its Fréchet distance next to the floor and init.

    python scripts/evidence/bench_gan.py [--timeout 900] [--grid docs/gan_samples.png] [-- extra zoo overrides]

1. `python -m zoo train task=gan/dcgan ...` in a subprocess (wall time measured; its own test stage reports the
   trained FD, the real-vs-real floor at the same sample count, and class coverage);
2. the same config and seed, untrained: FD at initialisation, through the same test stage in-process;
3. a grid of 64 samples from the best checkpoint through `zoo predict` (the picture in docs/).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from common import ROOT, ZOO_MODULE, load1, run, shown, this_command, write_record, zoo_env


def train(overrides: list[str], out: Path, timeout: float) -> tuple[float, Path, dict]:
    cmd = [*ZOO_MODULE, "train", "task=gan/dcgan", "logger=csv", "callbacks.progress_bar=null",
           "trainer.enable_progress_bar=false", *overrides]
    print("$", shown(cmd), flush=True)
    done = run(cmd, env=zoo_env(ZOO_OUTPUT_ROOT=str(out)), timeout=timeout).check("training")
    best = done.printed("best checkpoint")
    if best is None:  # e.g. the run was interrupted (SIGTERM) and exited early
        sys.exit(f"training did not finish:\n{done.output[-3000:]}")
    return done.wall, Path(best), done.metrics(("test", "val"))


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
    ap.add_argument("--record", default=None,
                    help="the record to write (docs/results/records/<id>.json); default gan.fd without overrides")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    load_before = load1()
    print(f"torch threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')}; "
          f"load average before: {load_before:.1f}", flush=True)
    wall, best, trained = train(args.overrides, Path(args.out), args.timeout)
    print(f"trained in {wall:.0f} s: {json.dumps(trained)}", flush=True)
    init = fd_at_init(best.parent.parent)
    if args.grid:
        subprocess.run([*ZOO_MODULE, "predict", f"ckpt_path={best}", "predict.grid=true", "predict.num=64",
                        f"predict.out={Path(args.grid).resolve()}"], cwd=ROOT, env=zoo_env(ZOO_OUTPUT_ROOT=args.out),
                       check=True, stdout=subprocess.DEVNULL)
    n, nan = int(trained.get("test/fd_samples", 0)), float("nan")
    rows = [
        ("wall time of `zoo train` (s)", f"{wall:.0f}"),
        (f"FD trained (EMA G, best val/fd checkpoint), n={n} vs {int(trained.get('test/fd_real_samples', 0))} real",
         f"{trained['test/fd']:.2f}"),
        (f"FD at initialisation (same seed), n={int(init['test/fd_samples'])}", f"{init['test/fd']:.2f}"),
        (f"FD floor, real train vs real val, n={n}", f"{trained['test/fd_floor']:.2f}"),
        ("class coverage of generated samples: min / max class share",
         f"{trained.get('test/coverage_min', nan):.3f} / {trained.get('test/coverage_max', nan):.3f}"),
        ("classes with >= half their fair share", f"{trained.get('test/classes_covered', nan):.0f}"),
    ]
    print("\n| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    print(f"\nload average after: {load1():.1f}")
    print(json.dumps({"wall_s": wall, "trained": trained, "init": init, "best": str(best)}))
    record = args.record or (None if args.overrides else "gan.fd")
    if record:  # README, docs/gan.md and docs/results/gan.md render these figures from it
        extra = {"floor": round(trained["test/fd_floor"], 2), "init": round(init["test/fd"], 1),
                 "min_share": trained.get("test/coverage_min"), "max_share": trained.get("test/coverage_max"),
                 "classes_half_share": trained.get("test/classes_covered"), "wall_s": round(wall), "samples": n}
        print("record:", write_record(record, round(trained["test/fd"], 2), metric="test/fd", command=this_command(),
                                      load=f"{load_before:.1f}->{load1():.1f}", extra=extra))


if __name__ == "__main__":
    main()
