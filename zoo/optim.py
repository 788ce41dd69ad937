"""Optimiser helpers shared by every domain: weight-decay groups, warm-up schedules, configure_optimizers."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from zoo.errors import NoOptimizerError


def no_decay(name: str, param: nn.Parameter) -> bool:
    """Biases and norm weights (any 1-d parameter) get no weight decay, as in BERT and timm."""
    return param.ndim <= 1 or name.endswith(".bias")


def param_groups(
    named_params: Iterable[tuple[str, nn.Parameter]], weight_decay: float, lr_scale: float = 1.0, **extra: Any
) -> list[dict]:
    """Split parameters into a decayed and an undecayed group (empty groups dropped)."""
    decay, skip = [], []
    for name, p in named_params:
        if p.requires_grad:
            (skip if no_decay(name, p) else decay).append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "lr_scale": lr_scale, **extra},
        {"params": skip, "weight_decay": 0.0, "lr_scale": lr_scale, **extra},
    ]
    return [g for g in groups if g["params"]]


def warmup_schedule(
    optimizer: torch.optim.Optimizer,
    total_steps: int,
    warmup_steps: int = 0,
    warmup_ratio: float = 0.0,
    kind: str = "cosine",
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """Linear warm-up, then cosine / linear decay (or constant) to `min_lr_ratio` of the peak, per optimiser step.

    Each param group may carry `lr_scale` (discriminative learning rates) and `lr_gate`, a callable
    `step -> float` that can hold a group at zero (freeze-then-unfreeze without touching requires_grad,
    which DDP does not sync: Lightning-AI/pytorch-lightning#20340).
    """
    if kind not in ("cosine", "linear", "constant"):
        raise ValueError(f"unknown schedule kind {kind!r}: use cosine, linear or constant")
    total = max(1, int(total_steps))
    warm = int(warmup_steps) or int(round(warmup_ratio * total))

    def base(step: int) -> float:
        if warm and step < warm:
            return (step + 1) / warm
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warm) / max(1, total - warm))
        shape = 0.5 * (1 + math.cos(math.pi * progress)) if kind == "cosine" else 1.0 - progress
        return min_lr_ratio + (1 - min_lr_ratio) * shape

    def for_group(group: dict) -> Callable[[int], float]:
        scale, gate = group.get("lr_scale", 1.0), group.get("lr_gate")
        return lambda step: base(step) * scale * (gate(step) if gate else 1.0)

    return LambdaLR(optimizer, [for_group(g) for g in optimizer.param_groups])


def require_optimizer(module: Any) -> None:
    """Every task's configure_optimizers starts here: one error type for a module built without an optimizer."""
    if getattr(module, "optimizer_factory", None) is None:
        raise NoOptimizerError(module)


def configure(module: Any, params: Iterable | list[dict]) -> dict | torch.optim.Optimizer:
    """configure_optimizers body: the task's optimizer partial, plus its scheduler partial stepped per batch."""
    require_optimizer(module)
    groups = list(params)
    # LambdaLR multiplies the initial lr; groups without a scheduler still honour lr_scale.
    optimizer = module.optimizer_factory(_strip_private(groups))
    scheduler_factory = module.scheduler_factory
    if scheduler_factory is None and any(isinstance(g, dict) and "lr_gate" in g for g in groups):
        scheduler_factory = lambda opt, total_steps: warmup_schedule(opt, total_steps, kind="constant")  # noqa: E731
    if scheduler_factory is None:
        for g in optimizer.param_groups:
            g["lr"] = g["lr"] * g.get("lr_scale", 1.0)
        return optimizer
    for g, src in zip(optimizer.param_groups, groups):
        if isinstance(src, dict) and "lr_gate" in src:
            g["lr_gate"] = src["lr_gate"]
    scheduler = scheduler_factory(optimizer, total_steps=module.trainer.estimated_stepping_batches)
    for g in optimizer.param_groups:
        g.pop("lr_gate", None)  # keep optimizer state_dict plain (weights_only checkpoints)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def _strip_private(groups: list) -> list:
    out = []
    for g in groups:
        if isinstance(g, dict):
            g = {k: v for k, v in g.items() if k != "lr_gate"}
        out.append(g)
    return out
