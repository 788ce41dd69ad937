"""What keeps a GAN training step short on a GPU: few, large kernel launches instead of one per parameter.

A DCGAN step is small (a few GFLOP at batch 32), so on a GPU its time is the host launching kernels, not the device
computing: every aten op the step dispatches costs microseconds of Python and launch overhead. Hence:
- the optimisers run fused on CUDA (one kernel for all of a network's parameters) and foreach elsewhere;
- the EMA generator follows G with one `_foreach_lerp_` and one `_foreach_copy_`, never a per-parameter loop;
- `compile_mode` compiles G and D (`reduce-overhead` adds CUDA graphs: one replay per network call).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from zoo.errors import ZooError

# torch.compile's modes; None keeps G and D eager. reduce-overhead records CUDA graphs (CUDA only).
COMPILE_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _accepts(factory: Callable, name: str) -> bool:
    """Whether the optimiser the factory builds takes the keyword `name` (torch's Adam, AdamW, SGD do)."""
    target = factory.func if isinstance(factory, functools.partial) else factory
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):  # builtins and C callables without a signature: ask for nothing
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def optimizer_kwargs(factory: Callable, device: torch.device) -> dict[str, Any]:
    """Keywords that make the optimiser's step a few kernels: `fused=True` on CUDA, `foreach=True` elsewhere.

    The config's own `fused`/`foreach` (set in task.module.optimizer) wins; an optimiser without the keyword gets
    nothing. On CPU foreach groups the same per-parameter arithmetic torch runs by default there into a few ops;
    fused kernels are kept for CUDA, where one launch instead of dozens is the point.
    """
    given = factory.keywords if isinstance(factory, functools.partial) else {}
    if given.get("fused") is not None or given.get("foreach") is not None:
        return {}
    key = "fused" if device.type == "cuda" else "foreach"
    return {key: True} if _accepts(factory, key) else {}


def build_optimizer(factory: Callable, params: Any, device: torch.device) -> torch.optim.Optimizer:
    """factory(params) with `optimizer_kwargs`; an optimiser that refuses them on this device (torch's Adagrad has a
    fused kernel for CPU only, say) is built as configured instead."""
    params = list(params)
    fast = optimizer_kwargs(factory, device)
    if fast:
        try:
            return factory(params, **fast)
        except (RuntimeError, ValueError) as e:
            if not any(k in str(e) for k in fast):
                raise
    return factory(params)


@torch.no_grad()
def ema_update_(ema: nn.Module, net: nn.Module, weight: float) -> None:
    """ema <- ema + weight * (net - ema) for every parameter; buffers (batch-norm statistics) copied.

    Two foreach ops whatever the number of tensors (a per-parameter loop dispatched 2 ops per tensor).
    """
    ema_params, params = list(ema.parameters()), list(net.parameters())
    if ema_params:
        torch._foreach_lerp_(ema_params, params, weight)
    ema_buffers, buffers = list(ema.buffers()), list(net.buffers())
    if ema_buffers:
        torch._foreach_copy_(ema_buffers, buffers)


def check_compile_mode(mode: str | None) -> str | None:
    if mode not in COMPILE_MODES:
        raise ZooError(f"task.module.compile_mode={mode!r}; use null (eager) or one of "
                       f"{', '.join(m for m in COMPILE_MODES if m)}")
    return mode


def compile_networks(networks: dict[str, nn.Module], mode: str | None) -> list[str]:
    """Compile each network in place (`nn.Module.compile`: state-dict keys unchanged), with torch.compile's `mode`.

    reduce-overhead on CUDA replays each network call as a CUDA graph; the module marks each training step's start
    (`torch.compiler.cudagraph_mark_step_begin`) so that a graph's outputs are not overwritten while the step still
    needs them. On CPU the mode compiles without graphs.
    """
    if mode is None:
        return []
    for net in networks.values():
        net.compile(mode=mode)
    return list(networks)
