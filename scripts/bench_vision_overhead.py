"""Framework overhead: the zoo trainer against a plain PyTorch loop, same model, data, batch, seed and optimiser.

    python scripts/bench_vision_overhead.py --steps 60

Both runs build the same ImageClassifier (ResNet-18, digits at 32x32, batch 64, AdamW + the zoo's cosine schedule),
draw the same shuffled batches (augmentation off so that the data are identical), and time the same steps after a
warm-up. Prints the loss of every 10th step for both, the largest difference, and milliseconds per step.
"""

from __future__ import annotations

import argparse
import time

import lightning.pytorch as pl
import torch
import torch.nn.functional as F

from vision import finetune as ft
from vision.data import ImageDataModule
from vision.module import ImageClassifier
from zoo import optim
from zoo.testing import compose
from zoo.trainer import build_trainer


def make(seed: int, lr: float) -> tuple[ImageClassifier, ImageDataModule]:
    pl.seed_everything(seed, verbose=False)
    dm = ImageDataModule(dataset="digits", image_size=32, batch_size=64, augment=False, seed=seed)
    dm.setup()
    module = ImageClassifier(pretrained=False, log_images=0, **dm.model_kwargs(),
                             optimizer=lambda g: torch.optim.AdamW(g, lr=lr),
                             scheduler=lambda o, total_steps: optim.warmup_schedule(o, total_steps, warmup_ratio=0.05))
    pl.seed_everything(seed, verbose=False)  # the loaders' shuffling starts from the same RNG state in both runs
    return module, dm


def plain_loop(steps: int, warmup: int, seed: int, lr: float) -> tuple[list[float], float]:
    module, dm = make(seed, lr)
    model = module.model.train()
    groups = ft.groups(model, module.heads, "full", module.hparams.weight_decay, 1.0, module.no_decay)
    opt = torch.optim.AdamW(groups, lr=lr)
    sched = optim.warmup_schedule(opt, steps, warmup_ratio=0.05)
    losses, t0 = [], 0.0
    loader = dm.train_dataloader()
    it = iter(loader)
    for step in range(steps):
        if step == warmup:
            t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses, (time.perf_counter() - t0) / (steps - warmup)


class StepClock(pl.Callback):
    def __init__(self, warmup: int) -> None:
        self.warmup, self.losses, self.t0, self.t1 = warmup, [], 0.0, 0.0

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if trainer.global_step == self.warmup:
            self.t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))
        self.t1 = time.perf_counter()


def zoo_trainer(steps: int, warmup: int, seed: int, lr: float) -> tuple[list[float], float]:
    module, dm = make(seed, lr)
    clock = StepClock(warmup)
    cfg = compose([f"trainer.max_steps={steps}", "trainer.max_epochs=-1", "trainer.limit_val_batches=0",
                   "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false",
                   "trainer.accelerator=cpu", "trainer.enable_model_summary=false"])
    trainer = build_trainer(cfg, callbacks=[clock], loggers=[])
    trainer.fit(module, datamodule=dm)
    return clock.losses, (clock.t1 - clock.t0) / (steps - warmup)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True, warn_only=True)
    plain, t_plain = plain_loop(args.steps, args.warmup, args.seed, args.lr)
    zoo, t_zoo = zoo_trainer(args.steps, args.warmup, args.seed, args.lr)
    for i in range(0, args.steps, 10):
        print(f"step {i:3d}  plain {plain[i]:.4f}  zoo {zoo[i]:.4f}")
    diff = max(abs(a - b) for a, b in zip(plain, zoo))
    print(f"final loss: plain {plain[-1]:.4f}  zoo {zoo[-1]:.4f}  max |diff| over {args.steps} steps {diff:.2e}")
    print(f"ms/step ({args.steps - args.warmup} timed): plain {1000 * t_plain:.1f}  zoo {1000 * t_zoo:.1f}  "
          f"overhead {100 * (t_zoo / t_plain - 1):+.1f}%")


if __name__ == "__main__":
    main()
