"""What keeps a GAN training step short on a GPU: few, large kernel launches instead of one per parameter.

A DCGAN step is small (a few GFLOP at batch 32), so on a GPU its time is the host launching kernels, not the device
computing: every aten op the step dispatches costs microseconds of Python and launch overhead. Hence:
- the optimisers run fused on CUDA (one kernel for all of a network's parameters) and foreach elsewhere
  (`zoo.kit.optim.build_optimizer`, as for every task);
- the EMA generator follows G with one `_foreach_lerp_` and one `_foreach_copy_`, never a per-parameter loop;
- `trainer.compile=true` compiles G and D (`trainer.compile_mode=reduce-overhead` adds CUDA graphs: one replay per
  network call), as `DCGAN.compiled_networks` names them.
"""

from __future__ import annotations

import torch
from torch import nn


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
