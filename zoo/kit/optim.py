"""Optimiser helpers shared by every domain: weight-decay groups, warm-up schedules, fast optimiser steps,
configure_optimizers."""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable, Collection, Iterable
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from zoo.errors import NoOptimizerError

# Wrapper segments that FSDP (use_orig_params), activation checkpointing and torch.compile insert into names.
_WRAPPER_SEGMENTS = re.compile(r"(?:_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)\.")
# Owner names that say "normalisation layer": LayerNorm, layer_norm, norm1, bn1, ln_f, gn ...
_NORM_NAME = re.compile(r"norm|^(?:bn|ln|gn)(?:\d|_|$)", re.IGNORECASE)
# Norm classes outside torch's own (HF's T5LayerNorm, LlamaRMSNorm, timm's LayerNorm2d subclasses anyway).
_NORM_CLASS = re.compile(r"Norm(?:\d?d)?$")
_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm, nn.RMSNorm)


def canonical_name(name: str) -> str:
    """A parameter's name without wrapper segments, so names taken before and after wrapping match."""
    return _WRAPPER_SEGMENTS.sub("", name)


def _no_decay_by_name(name: str) -> bool:
    *owners, local = canonical_name(name).split(".")
    return "bias" in local or local.startswith("gamma") or any(_NORM_NAME.search(o) for o in owners)


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, _NORM_TYPES) or bool(_NORM_CLASS.search(type(module).__name__))


def no_decay_names(model: nn.Module) -> set[str]:
    """Names (canonical, as model.named_parameters() gives them) of the parameters that get no weight decay:
    every bias, every parameter of a normalisation layer, and layer-scale `gamma`s, as in BERT and timm.

    Decided from names and owning module types, never from shapes: FSDP flattens parameters to 1-d shards, and an
    `ndim <= 1` rule then switches weight decay off for every weight. FSDP with use_orig_params keeps names and
    module types, so this gives the same answer before and after wrapping.
    """
    out = set()
    for owner_name, owner in model.named_modules():
        norm = _is_norm(owner)
        for local, _ in owner.named_parameters(recurse=False):
            name = f"{owner_name}.{local}" if owner_name else local
            if norm or _no_decay_by_name(name):
                out.add(canonical_name(name))
    return out


def param_groups(
    params: nn.Module | Iterable[tuple[str, nn.Parameter]],
    weight_decay: float,
    lr_scale: float = 1.0,
    *,
    no_decay: Collection[str] | None = None,
    **extra: Any,
) -> list[dict]:
    """Split parameters into a decayed and an undecayed group (empty groups dropped).

    `params` is a module (the split then also reads its layer types) or `(name, parameter)` pairs; pairs use
    `no_decay` (from `no_decay_names(model)`, names relative to the same model) when given, otherwise names alone
    (biases, owners named like a norm: LayerNorm, norm1, bn1, ln_f). Frozen parameters (requires_grad False) are left
    out. Each group carries `lr_scale`, which `warmup_schedule` (or `configure` without a schedule) multiplies in.
    """
    if isinstance(params, nn.Module):
        no_decay = no_decay_names(params) if no_decay is None else no_decay
        params = params.named_parameters()
    skip_name = _no_decay_by_name if no_decay is None else (lambda n: canonical_name(n) in no_decay)
    decay: list[nn.Parameter] = []
    skip: list[nn.Parameter] = []
    for name, p in params:
        if p.requires_grad:
            (skip if skip_name(name) else decay).append(p)
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

    Each param group's `lr_scale` (discriminative learning rates) multiplies its rate.
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
        scale = group.get("lr_scale", 1.0)
        return lambda step: base(step) * scale

    return LambdaLR(optimizer, [for_group(g) for g in optimizer.param_groups])


def _accepts(factory: Callable, name: str) -> bool:
    """Whether the optimiser the factory builds takes the keyword `name` (torch's Adam, AdamW, SGD do)."""
    target = factory.func if isinstance(factory, functools.partial) else factory
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # builtins and C callables without a signature: ask for nothing
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def step_kwargs(factory: Callable, device: torch.device, amp_clipping: bool = False) -> dict[str, Any]:
    """Keywords that make an optimiser's step a few kernels: `fused=True` on CUDA, `foreach=True` elsewhere.

    A small model's step on a GPU is mostly kernel launches, one per parameter and operation without these. The
    config's own `fused`/`foreach` wins, and an optimiser without the keyword gets nothing; on CPU, foreach groups the
    per-parameter arithmetic into a few ops. A fused optimiser unscales its gradients inside its step, so Lightning
    refuses to clip them under mixed precision (`amp_clipping`): then foreach, and a configured `fused=True` is off.
    """
    given = factory.keywords if isinstance(factory, functools.partial) else {}
    if given.get("fused") and amp_clipping:
        return {"fused": False}
    if given.get("fused") is not None or given.get("foreach") is not None:
        return {}
    key = "fused" if device.type == "cuda" and not amp_clipping else "foreach"
    return {key: True} if _accepts(factory, key) else {}


def build_optimizer(factory: Callable, params: Iterable, device: torch.device,
                    amp_clipping: bool = False) -> torch.optim.Optimizer:
    """factory(params) with `step_kwargs`; an optimiser that refuses them on this device (torch's Adagrad has a fused
    kernel for CPU only, say) is built as configured instead."""
    params = list(params)
    fast = step_kwargs(factory, device, amp_clipping)
    if fast:
        try:
            return factory(params, **fast)
        except (RuntimeError, ValueError) as e:
            if not any(k in str(e) for k in fast):
                raise
    return factory(params)


def device_of(params: list) -> torch.device:
    """Where the optimiser steps: the device of the first parameter (in a group or bare); CPU when there is none.
    Lightning moves the module to its device before configure_optimizers, so this is the training device."""
    for p in params:
        first = next(iter(p["params"]), None) if isinstance(p, dict) else p
        if isinstance(first, torch.Tensor):
            return first.device
    return torch.device("cpu")


def clips_under_amp(trainer: Any) -> bool:
    """Whether Lightning clips gradients under mixed precision in this trainer (then fused optimisers are refused)."""
    return bool(getattr(trainer, "gradient_clip_val", None)) and "mixed" in str(getattr(trainer, "precision", ""))


def require_optimizer(module: Any) -> None:
    """Every task's configure_optimizers starts here: one error type for a module built without an optimizer."""
    if getattr(module, "optimizer_factory", None) is None:
        raise NoOptimizerError(module)


def configure(module: Any, params: Iterable | list[dict]) -> dict | torch.optim.Optimizer:
    """configure_optimizers body: the task's optimizer partial (built by `build_optimizer` for the module's device),
    plus its scheduler partial stepped per batch."""
    require_optimizer(module)
    params = list(params)
    trainer = getattr(module, "_trainer", None)
    optimizer = build_optimizer(module.optimizer_factory, params, device_of(params), clips_under_amp(trainer))
    if module.scheduler_factory is None:
        for g in optimizer.param_groups:  # LambdaLR multiplies lr_scale in; without a schedule, do it once here
            g["lr"] = g["lr"] * g.get("lr_scale", 1.0)
        return optimizer
    scheduler = module.scheduler_factory(optimizer, total_steps=module.trainer.estimated_stepping_batches)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
