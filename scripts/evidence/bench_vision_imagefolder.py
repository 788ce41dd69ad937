"""Measure `experiment=vision_imagefolder` on subsets of flowers12 (../shared/data/images/flowers12) and on flowers12.

    python scripts/evidence/bench_vision_imagefolder.py                         # every subset below, seed 42
    python scripts/evidence/bench_vision_imagefolder.py --subsets dandelion_colts-foot all --seeds 1 2
    python scripts/evidence/bench_vision_imagefolder.py --work /tmp/vision/pairs -- trainer.max_epochs=2

Each subset is an ImageFolder tree of symlinks built outside the repository (`<work>/<a>_<b>/{train,val}/<class>`);
each run is a real `python -m zoo train experiment=vision_imagefolder task.data.root=<tree> seed=<s>` in a subprocess,
timed start to end (interpreter start, folder scan, weights, every epoch, the test pass), with the 1-minute load
average before and after. It prints a row per run (val acc per epoch, the epoch kept and its phase, the L2 and TTA
the head fit chose, test acc, time) and a summary: minimum and median of the kept val acc over the two-class subsets.
The subsets were chosen before the recipe was tuned (docs/vision.md).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
from pathlib import Path

from common import SHARED, ZOO_MODULE, csv_series, run, shown, this_command, write_record, zoo_env

FLOWERS = SHARED / "images" / "flowers12"
SUBSETS = ["dandelion_colts-foot", "buttercup_dandelion", "daisy_windflower", "iris_pansy", "bluebell_iris",
           "fritillary_tigerlily", "bluebell_buttercup", "bluebell_buttercup_colts-foot_dandelion", "all"]


def tree(name: str, work: Path) -> Path:
    """The subset as a folder of symlinks (made once); `all` is flowers12 itself."""
    if name == "all":
        return FLOWERS
    root = work / name
    for split in ("train", "val"):
        for c in name.split("_"):
            src = FLOWERS / split / c
            if not src.is_dir():
                raise SystemExit(f"bench_vision_imagefolder: no class '{c}' in {FLOWERS / split}")
            dst = root / split / c
            dst.mkdir(parents=True, exist_ok=True)
            for f in sorted(src.iterdir()):
                if not (dst / f.name).exists():
                    (dst / f.name).symlink_to(f)
    return root


def run_one(name: str, seed: int, work: Path, timeout: int, extra: list[str]) -> dict:
    out_root = Path(tempfile.mkdtemp(prefix=f"bench_imagefolder_{name}_"))
    cmd = [*ZOO_MODULE, "train", "experiment=vision_imagefolder", f"task.data.root={tree(name, work)}",
           f"seed={seed}", "logger=csv", "trainer.enable_progress_bar=false", *extra]
    env = zoo_env(ZOO_OUTPUT_ROOT=str(out_root), HF_HUB_OFFLINE="1")
    print(f"$ HF_HUB_OFFLINE=1 {shown(cmd)}", flush=True)
    done = run(cmd, env=env, timeout=timeout)
    (out_root / "console.txt").write_text(done.output)  # the run's zoo: lines (plan, head fits, kept checkpoint)
    files = sorted(out_root.rglob("metrics.csv"))
    val = csv_series(files[0]).get("val/acc", []) if files else []
    kept = re.search(r"zoo: kept checkpoint: epoch (\d+), ([a-z ]+) \(val acc ([\d.]+)\)", done.output)
    fits = re.findall(r"head fitted to .*?: L2 ([\d.e-]+) .*?flip TTA (on|off)", done.output)
    fit_s = sum(float(s) for s in re.findall(r"head fitted to .*?flip TTA (?:on|off) \(([\d.]+) s\)", done.output))
    return {"name": name, "seed": seed, "status": done.status, "wall": done.wall, "cpu": done.cpu,
            "load": f"{done.load_before:.1f}->{done.load_after:.1f}", "val": val,
            "kept": (int(kept.group(1)), kept.group(2), float(kept.group(3))) if kept else None,
            "fit": fits[-1] if fits else ("-", "-"), "fit_s": fit_s, "test": done.metrics().get("test/acc"),
            "console": out_root / "console.txt",
            "tail": "" if done.ok else done.tail(8)}


def row(r: dict) -> str:
    epochs = ", ".join(f"{a:.3f}" for a in r["val"]) or "-"
    kept = f"{r['kept'][2]:.3f} (epoch {r['kept'][0]}, {r['kept'][1]})" if r["kept"] else "-"
    test = f"{r['test']:.3f}" if r["test"] is not None else "-"
    return (f"| {r['name'].replace('_', ' / ')} | {r['seed']} | {epochs} | {kept} | {r['fit'][0]} | {r['fit'][1]} | "
            f"{test} | {r['wall']:.0f} s | {r['cpu']:.0f} s | {r['fit_s']:.0f} s | {r['load']} | {r['status']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--subsets", nargs="+", default=SUBSETS, help="<class>_<class>[_...] or all (flowers12)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[42])
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "vision" / "pairs",
                    help="where the symlink trees go (outside the repository)")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per run before it is killed")
    ap.add_argument("extra", nargs="*", help="more zoo overrides for every run")
    args = ap.parse_args()
    if not (FLOWERS / "train").is_dir():
        raise SystemExit(f"bench_vision_imagefolder: {FLOWERS} not found (set ZOO_SHARED_DATA to the folder holding "
                         "images/flowers12)")
    print(f"# {os.cpu_count()} CPUs, uptime: {os.popen('uptime').read().strip()}", flush=True)
    header = ("| subset | seed | val acc per epoch | kept (epoch, phase) | L2 | flip TTA | test acc (val photos) | "
              "start to end | CPU | head fits | load avg (1 min) before->after | status |\n"
              "|---|---:|---|---|---:|---|---:|---:|---:|---:|---|---|")
    results = []
    for seed in args.seeds:
        for name in args.subsets:
            results.append(run_one(name, seed, args.work, args.timeout, args.extra))
            print(row(results[-1]), f"(console: {results[-1]['console']})", flush=True)
            if results[-1]["tail"]:
                print(results[-1]["tail"], flush=True)
    print(f"\n{header}")
    for r in results:
        print(row(r))
    pairs = [r["kept"][2] for r in results if r["kept"] and r["name"].count("_") == 1]
    if pairs:
        print(f"\n# two-class subsets: {len(pairs)} runs, kept val acc min {min(pairs):.3f}, "
              f"median {statistics.median(pairs):.3f}")
    print(f"# uptime at the end: {os.popen('uptime').read().strip()}")
    if not args.extra:  # the preset as it is: README and the vision pages render these records
        record(results)


def record(results: list[dict]) -> None:
    """vision.imagefolder_flowers12_acc (the kept val acc on flowers12) and vision.imagefolder_two_class_acc (the
    lowest over the two-class subsets), each with its start-to-end seconds."""
    loads = ", ".join(r["load"] for r in results)
    for record_id, runs, metric in (
            ("vision.imagefolder_flowers12_acc", [r for r in results if r["name"] == "all" and r["kept"]],
             "val/acc of the kept checkpoint, flowers12"),
            ("vision.imagefolder_two_class_acc", [r for r in results if r["name"].count("_") == 1 and r["kept"]],
             "val/acc of the kept checkpoint, lowest of the two-class subsets of flowers12")):
        if not runs:
            continue
        accs, walls = [r["kept"][2] for r in runs], [round(r["wall"]) for r in runs]
        extra = {"median": statistics.median(accs), "runs": len(runs), "wall_s_min": min(walls),
                 "wall_s_max": max(walls), "seeds": sorted({r["seed"] for r in runs})}
        print("record:", write_record(record_id, min(accs), metric=metric, command=this_command(),
                                      preset="vision_imagefolder", load=loads, extra=extra))


if __name__ == "__main__":
    main()
