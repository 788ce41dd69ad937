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
