"""Fine-tuning strategies: full, linear probe, and freeze-then-unfreeze with a lower backbone learning rate.

`gradual` freezes the backbone until `unfreeze_epoch` by stepping its parameter groups with learning rate zero,
decided at each optimizer step from the current epoch (so it is right after any resume, mid-epoch included: Lightning
skips `on_train_epoch_start` there). It never flips requires_grad: DDP builds its gradient buckets once, so
parameters that start frozen would never be synchronised after unfreezing (Lightning-AI/pytorch-lightning#20340).

What the head learns while the backbone is frozen is a fit to the features the pretrained BatchNorm statistics give.
So a pretrained backbone's BatchNorm layers stay in eval mode for the whole run, after unfreezing too (their affine
weights train): in train mode they would normalise with batch statistics from the first unfrozen step, a different
function under the head, and after an epoch their running averages (momentum 0.1) would still mix the pretrained
statistics with those of earlier weights, a third function for evaluation (docs/vision.md has the measurements).
`unfreeze_warmup` ramps the backbone's rate linearly from zero over that many epochs after unfreezing: where the
frozen epochs ran on cached features the backbone has no AdamW state yet, and AdamW's first steps move every weight
by about the full rate. The linear probe never unfreezes, so it can drop the backbone from autograd entirely.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch
from torch import nn

from zoo.kit.optim import canonical_name, param_groups

STRATEGIES = ("full", "linear_probe", "gradual")


def is_head(name: str, heads: tuple[str, ...]) -> bool:
    """By the name the layer had before any (FSDP) wrapping."""
    return canonical_name(name).startswith(heads)


def split(model: nn.Module, heads: tuple[str, ...]) -> tuple[list, list]:
    backbone = [(n, p) for n, p in model.named_parameters() if not is_head(n, heads)]
    head = [(n, p) for n, p in model.named_parameters() if is_head(n, heads)]
    return backbone, head


def freeze_for_probe(model: nn.Module, heads: tuple[str, ...]) -> None:
    for name, p in model.named_parameters():
        p.requires_grad_(is_head(name, heads))


def set_backbone_bn_eval(model: nn.Module, heads: tuple[str, ...]) -> None:
    """BatchNorm layers of a frozen backbone keep their (pretrained) running statistics."""
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and not is_head(name, heads):
            m.eval()


def groups(model: nn.Module, heads: tuple[str, ...], strategy: str, weight_decay: float,
           backbone_lr_scale: float, no_decay: Collection[str]) -> list[dict]:
    """Optimizer param groups: the head at the full learning rate, the backbone (marked `backbone: True`) scaled.

    `no_decay`: names relative to `model` (zoo.kit.optim.no_decay_names, taken before any wrapping)."""
    backbone, head = split(model, heads)
    out = param_groups(head, weight_decay, no_decay=no_decay)
    if strategy == "linear_probe":
        return out
    return out + param_groups(backbone, weight_decay, lr_scale=backbone_lr_scale, no_decay=no_decay, backbone=True)


def backbone_factor(epoch: int, batch_idx: int, batches_per_epoch: float, unfreeze_epoch: int,
                    warmup_epochs: float) -> float:
    """The multiplier on the backbone's scheduled learning rate for this step: 0 before `unfreeze_epoch`, then a
    linear ramp to 1 over `warmup_epochs`. From the epoch and batch index alone, so it is right after a resume."""
    if epoch < unfreeze_epoch:
        return 0.0
    if warmup_epochs <= 0:
        return 1.0
    progress = epoch - unfreeze_epoch + (batch_idx + 1) / max(1.0, batches_per_epoch)
    return min(1.0, progress / warmup_epochs)


def step_scaled(optimizer: torch.optim.Optimizer, step: Callable[[], object], factor: float) -> None:
    """Run one optimizer step with the backbone's groups at `factor` times their scheduled learning rate, then put
    back the scheduled rates (the schedule keeps its course).

    With a zero rate SGD, Adam and AdamW (whose decay is scaled by the rate) leave the parameters exactly as they
    were."""
    if factor == 1.0:
        step()
        return
    scaled = [g for g in optimizer.param_groups if g.get("backbone")]
    scheduled = [g["lr"] for g in scaled]
    for g in scaled:
        g["lr"] = g["lr"] * factor
    try:
        step()
    finally:
        for g, lr in zip(scaled, scheduled):
            g["lr"] = lr


class PhaseLog:
    """Validation accuracy per epoch and the phase it came from; says which epoch the best checkpoint holds.

    The first epoch with the highest accuracy, as the zoo's ModelCheckpoint (mode max, replacing only on a strictly
    better value) keeps it, so a fine-tuned epoch that only ties the frozen head is not kept."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, float, str]] = []

    def add(self, epoch: int, acc: float, phase: str) -> None:
        self.entries = [e for e in self.entries if e[0] != epoch] + [(epoch, acc, phase)]

    def kept(self) -> tuple[int, float, str] | None:
        best = None
        for e in sorted(self.entries):
            if best is None or e[1] > best[1]:
                best = e
        return best

    def kept_line(self) -> str:
        best = self.kept()
        if best is None:
            return ""
        others = [e for e in self.entries if e[2] != best[2]]
        rival = max(others, key=lambda e: (e[1], -e[0])) if others else None
        also = (f"; best {rival[2]} epoch {rival[0]}: {rival[1]:.3f}" if rival else "")
        return f"kept checkpoint: epoch {best[0]}, {best[2]} (val acc {best[1]:.3f}){also}"


def fit_then_tune_plan(hp: Any, epochs: int, keep_bn_stats: bool, augmented: bool) -> str:
    """The start line of gradual with head_fit=lbfgs: cached views and fitted head, then the whole network."""
    n = hp.unfreeze_epoch
    frozen = f"epochs 0-{n - 1}" if n > 1 else "epoch 0"
    views = "an augmented view" if augmented else "a view (not augmented)"
    head = (f"{frozen} cache {views} of every training photo and its mirror image, the head fitted to all views "
            f"so far at each epoch's end (L2-regularised logistic regression, L2 by {hp.l2_folds}-fold split of the "
            f"training photos)")
    tta = {True: "flip TTA on", False: "flip TTA off", "auto": "flip TTA where the split says it pays"}[hp.tta]
    if 0 < epochs <= n:
        return f"finetune=gradual: {head}; the backbone never opens (max_epochs); {tta}"
    rest = f"epoch {n}" if epochs - 1 == n else f"epochs {n}-{epochs - 1}" if epochs > 0 else f"from epoch {n}"
    bn = "its pretrained BatchNorm statistics kept" if keep_bn_stats else "BatchNorm statistics updated"
    warm = f", warmed up over {hp.unfreeze_warmup:g} epoch(s)" if hp.unfreeze_warmup > 0 else ""
    photos = "augmented" if augmented else "un-augmented"
    return (f"finetune=gradual: {head}; {rest} the whole network on {photos} photos (the backbone at "
            f"{hp.backbone_lr_scale:g}x the rate{warm}, {bn}); {tta}; the best validation epoch is kept")
