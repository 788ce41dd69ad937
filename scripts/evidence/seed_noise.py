"""How far a task's final metrics move with the seed alone: the scale `zoo reproduce`'s tolerance is sized to.

    python scripts/evidence/seed_noise.py vision/resnet --seeds 1 2 3 4 5 [overrides...]

Trains the task's default once per seed (everything else as a user's first run), reads each run's metrics.json and
prints, per judged metric (the monitored one and its test/ twin), every seed's value, the spread (max - min) and the
standard deviation. A re-run on other hardware lands within about the seed spread of the original; the tolerance
is set at or above it (configs/task/<task>.yaml `reproduce_tolerance`, README "Reproduce a run").
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from common import ZOO, run, shown, zoo_env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    values: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as out:
        for seed in args.seeds:
            cmd = [*ZOO, "train", f"task={args.task}", f"seed={seed}", "logger=csv",
                   "trainer.enable_progress_bar=false", *args.overrides]
            r = run(cmd, env=zoo_env(ZOO_OUTPUT_ROOT=out)).check(shown(cmd))
            (run_dir,) = [p for p in (Path(out) / args.task).iterdir() if p.name not in seen(values)]
            metrics = json.loads((run_dir / "metrics.json").read_text())
            values.setdefault("_runs", []).append(run_dir.name)  # type: ignore[arg-type]
            for k, v in metrics.items():
                values.setdefault(k, []).append(float(v))
            print(f"seed {seed}: {r.wall:.0f} s, {r.load}: "
                  + ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items())), flush=True)
    command = shown([*ZOO, "train", f"task={args.task}", *args.overrides])
    print(f"\n{args.task}, seeds {' '.join(map(str, args.seeds))}: `{command} seed=<s>`")
    print(f"| metric | {' | '.join(f'seed {s}' for s in args.seeds)} | max - min | std |")
    print(f"|---|{'---:|' * len(args.seeds)}---:|---:|")
    for k, vs in sorted(values.items()):
        if k.startswith("_") or not k.startswith(("val/", "test/")):
            continue
        std = statistics.stdev(vs) if len(vs) > 1 else 0.0
        print(f"| {k} | {' | '.join(f'{v:.4f}' for v in vs)} | {max(vs) - min(vs):.4f} | {std:.4f} |")


def seen(values: dict) -> set[str]:
    return set(values.get("_runs", []))


if __name__ == "__main__":
    main()
