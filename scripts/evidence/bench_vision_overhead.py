"""The zoo trainer's own overhead on the default vision task: alternating plain-PyTorch and zoo blocks, median ratio.

    python scripts/evidence/bench_vision_overhead.py           # 10 pairs, 2 warm-up + 6 timed steps per block
    python scripts/evidence/bench_vision_overhead.py --pairs 20 --profile

Both sides do the same work: the default `task=vision/resnet` config (ResNet-18 from random init, digits at 32x32,
batch 128, augmentation on, channels_last, AdamW + the zoo's cosine schedule), built through the zoo's own
composition (`zoo.core.build.build_data_and_module`), reseeded before every block so both draw the same batches.
The plain block is a hand-written loop (forward, cross-entropy, backward, AdamW step, scheduler step, the loss read
as a float). The zoo block is `trainer.fit` with everything a default `zoo train` adds: the default callbacks
(checkpoints, LR monitor, progress bar, throughput), TensorBoard logging, ZooMetadata, the task's metrics and
`self.log` calls.
Validation is off in both (the plain loop has none), and the timed steps lie inside the first epoch, so the figure
is the per-step overhead; per-epoch costs (checkpoint saving) are measured separately with --profile.

Why one process and short blocks: the machine is shared and its speed drifts over seconds; a pair is two blocks a few
seconds apart, so the drift mostly cancels within a pair, and the order inside each pair is random so a drift
cannot favour one side. One process keeps allocator and oneDNN caches equally warm for both (an untimed pair runs
first); fresh processes would add start-up variance to every block without making the comparison fairer.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from common import Spread, load1, this_command, write_record

from zoo.core.build import build_callbacks_and_loggers, build_data_and_module, start
from zoo.core.config import compose, register_resolvers
from zoo.core.trainer import build_trainer, prepare_module
from zoo.vision import finetune as ft


def config(warmup: int, steps: int, run_dir: str, extra: list[str]) -> Any:
    register_resolvers()
    return compose([f"run_dir={run_dir}", "task=vision/resnet", "task.module.pretrained=false",
                    f"trainer.max_steps={warmup + steps}", "trainer.max_epochs=-1", "trainer.limit_val_batches=0",
                    "trainer.num_sanity_val_steps=0", "trainer.accelerator=cpu", "trainer.enable_model_summary=false",
                    "test_after_fit=false", *extra])


def build(cfg: Any) -> tuple[Any, Any]:
    pl.seed_everything(int(cfg.seed), verbose=False)
    datamodule, module = build_data_and_module(cfg)
    pl.seed_everything(int(cfg.seed), verbose=False)  # both loaders start shuffling from the same RNG state
    return datamodule, module


def plain_block(cfg: Any, warmup: int, steps: int) -> tuple[float, float, list[float]]:
    """(wall seconds per step, CPU seconds per step of this process, losses)."""
    datamodule, module = build(cfg)
    datamodule.setup("fit")
    model = prepare_module(module, cfg.trainer).model.train()  # channels_last as the zoo applies it
    groups = ft.groups(model, module.heads, module.hparams.finetune, module.hparams.weight_decay,
                       module.hparams.backbone_lr_scale, module.no_decay)
    opt = module.optimizer_factory(groups)
    sched = module.scheduler_factory(opt, total_steps=warmup + steps)
    losses, t0, c0 = [], 0.0, 0.0
    it = iter(datamodule.train_dataloader())
    for step in range(warmup + steps):
        if step == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        x, y = next(it)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss))
    return (time.perf_counter() - t0) / steps, (time.process_time() - c0) / steps, losses


class StepClock(pl.Callback):
    """From the end of the last warm-up step to the end of the last step: N whole steps, as in the plain loop."""

    def __init__(self, warmup: int) -> None:
        self.warmup, self.losses, self.t0, self.t1, self.c0, self.c1 = warmup, [], 0.0, 0.0, 0.0, 0.0

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.losses.append(float(outputs["loss"]))
        self.t1, self.c1 = time.perf_counter(), time.process_time()
        if len(self.losses) == self.warmup:
            self.t0, self.c0 = self.t1, self.c1


def zoo_block(cfg: Any, warmup: int, steps: int) -> tuple[float, float, list[float]]:
    datamodule, module = build(cfg)
    callbacks, loggers = build_callbacks_and_loggers(cfg, [])
    clock = StepClock(warmup)
    trainer = build_trainer(cfg, [*callbacks, clock], loggers)
    trainer.fit(prepare_module(module, cfg.trainer), datamodule=datamodule)
    return (clock.t1 - clock.t0) / steps, (clock.c1 - clock.c0) / steps, clock.losses


def pairs(cfg: Any, n: int, warmup: int, steps: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    blocks = {"plain": plain_block, "zoo": zoo_block}
    for name in ("plain", "zoo"):
        blocks[name](cfg, warmup, 1)  # untimed: first-use costs (allocator, oneDNN primitives) go to neither side
    out = []
    for i in range(n):
        order = rng.sample(["plain", "zoo"], 2)
        r: dict = {"first": order[0]}
        for name in order:
            wall, cpu, losses = blocks[name](cfg, warmup, steps)
            r[name], r[name + "_cpu"], r[name + "_loss"] = 1000 * wall, 1000 * cpu, losses[-1]
        out.append(r)
        print(f"pair {i + 1:2d} ({order[0]} first): wall ms/step plain {r['plain']:7.1f} zoo {r['zoo']:7.1f} "
              f"ratio {r['zoo'] / r['plain']:.3f} | CPU ms/step plain {r['plain_cpu']:7.1f} zoo {r['zoo_cpu']:7.1f} "
              f"ratio {r['zoo_cpu'] / r['plain_cpu']:.3f} | last loss plain {r['plain_loss']:.4f} "
              f"zoo {r['zoo_loss']:.4f}", flush=True)
    return out


def spread(ratios: list[float]) -> str:
    s = Spread.of(ratios)
    return (f"median {s.median:.3f} ({100 * (s.median - 1):+.1f}%), IQR {s.q1:.3f}-{s.q3:.3f}, "
            f"min-max {s.min:.3f}-{s.max:.3f}, zoo slower in {sum(x > 1 for x in ratios)} of {s.n}")


def summary(results: list[dict]) -> None:
    plain = Spread.of(r["plain"] for r in results)
    added = Spread.of(r["zoo_cpu"] - r["plain_cpu"] for r in results)
    print(f"\n{len(results)} pairs, zoo/plain per-step ratio\n  wall time: "
          f"{spread([r['zoo'] / r['plain'] for r in results])}\n  CPU time:  "
          f"{spread([r['zoo_cpu'] / r['plain_cpu'] for r in results])}\n  CPU ms the zoo adds per step: median "
          f"{added.median:.2f}, IQR {added.q1:.2f} to {added.q3:.2f}, min-max {added.min:.2f} to {added.max:.2f}"
          "\n  plain wall ms/step median "
          f"{plain.median:.1f} (min-max {plain.min:.1f}-{plain.max:.1f}); "
          f"losses equal in every pair: {all(r['plain_loss'] == r['zoo_loss'] for r in results)}")


def record(results: list[dict]) -> None:
    """vision.overhead_ratio: the median zoo / plain wall time per step, which docs/overhead.md and the vision
    results page render."""
    wall = Spread.of(r["zoo"] / r["plain"] for r in results)
    print("record:", write_record(
        "vision.overhead_ratio", round(wall.median, 3), command=this_command(), load=f"{load1():.1f}",
        metric=f"wall time per step, zoo / plain PyTorch loop, median of {wall.n} pairs",
        extra={"iqr_low": round(wall.q1, 3), "iqr_high": round(wall.q3, 3), "pairs": wall.n}))


# What the zoo block runs and the plain loop does not, by the function that does it (cumulative time: the torch ops
# these functions launch count too).
HOOKS = {
    "torchmetrics: train accuracy update (Metric.forward)": ("torchmetrics/metric.py", "forward"),
    "LightningModule.log (self.log calls in the step)": ("lightning/pytorch/core/module.py", "log"),
    "logger connector: per-step metrics to the loggers": ("logger_connector.py", "update_train_step_metrics"),
    "TensorBoard writes": ("loggers/tensorboard.py", "log_metrics"),
    "progress bar on_train_batch_end": ("progress/tqdm_progress.py", "on_train_batch_end"),
    "throughput (zoo.measure.throughput) on_train_batch_end": ("zoo/measure/throughput.py", "on_train_batch_end"),
    "LR monitor on_train_batch_start": ("callbacks/lr_monitor.py", "on_train_batch_start"),
    "checkpoint saves (epoch/fit end, not per step)": ("trainer/trainer.py", "save_checkpoint"),
}
PACKAGES = ("lightning/", "lightning_utilities/", "torchmetrics/", "tensorboard/", "tqdm/", "/zoo/")


def profile(cfg: Any, warmup: int, steps: int) -> None:
    """cProfile of one zoo block: the zoo's extra work per step, by hook, and Python time in the framework."""
    zoo_block(cfg, warmup, 1)  # untimed
    prof = cProfile.Profile()
    prof.enable()
    ms, _, _ = zoo_block(cfg, warmup, steps)
    prof.disable()
    stats = pstats.Stats(prof).stats
    n = warmup + steps
    print(f"\nprofile of one zoo block under cProfile ({n} steps; {1000 * ms:.0f} ms/step timed, inflated by the "
          "profiler): ms per step")
    for label, (file, func) in HOOKS.items():
        cum = sum(v[3] for (f, _, fn), v in stats.items() if fn == func and f.endswith(file) or
                  (fn == func and file in f))
        print(f"  {1000 * cum / n:8.2f}  {label}")
    own = sum(v[2] for (f, _, _), v in stats.items() if any(p in f for p in PACKAGES))
    print(f"  {1000 * own / n:8.2f}  Python self time in lightning, torchmetrics, tensorboard, tqdm and zoo (all)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6, help="timed steps per block (the digits epoch has 9 at batch 128)")
    ap.add_argument("--seed", type=int, default=0, help="of the order inside pairs")
    ap.add_argument("--profile", action="store_true", help="also profile one block of each kind")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a config override for both sides, e.g. --set task.data.batch_size=8 (repeatable): a small "
                         "step makes the zoo's absolute cost per step measurable above the noise")
    args = ap.parse_args()
    if args.pairs < 5:
        raise SystemExit("zoo: error: --pairs must be at least 5 to give a median and a spread; use --pairs 5 or more")
    with tempfile.TemporaryDirectory(prefix="zoo-overhead-") as tmp:
        cfg = config(args.warmup, args.steps, str(Path(tmp) / "run"), args.set)
        start(cfg)
        print(f"threads {torch.get_num_threads()}, batch {cfg.task.data.batch_size}, "
              f"channels_last {cfg.trainer.channels_last}, {args.warmup} warm-up + {args.steps} timed steps per block",
              flush=True)
        results = pairs(cfg, args.pairs, args.warmup, args.steps, args.seed)
        summary(results)
        if not args.set:  # the default task as it is
            record(results)
        if args.profile:
            profile(cfg, args.warmup, args.steps)


if __name__ == "__main__":
    main()
