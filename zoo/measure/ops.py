"""Operations per training step: aten ops dispatched (CPU) or CUDA kernels launched (GPU), the one counter.

Why count them: a step of many small operations is bound by their launch and dispatch overhead, not by FLOPs (a
small policy network, a GAN's D and G steps, an unfused optimizer); the count says so where MFU alone cannot.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def aten_counter() -> Any:
    """A TorchDispatchMode that counts every aten op it sees (below autograd: the forward, the backward's ops and the
    optimizer's, as the backend runs them)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class AtenCount(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            self.count += 1
            return func(*args, **(kwargs or {}))

    return AtenCount()


def count_kernels(events: Iterable[Any]) -> int:
    """GPU kernels among a profiler's kineto events (copies and memsets are not kernel launches)."""
    from torch.autograd import DeviceType

    copies = ("Memcpy", "Memset")
    return sum(1 for e in events if e.device_type() == DeviceType.CUDA and not e.name().startswith(copies))


class OpCounter:
    """`start()` ... `stop()` -> how many operations ran between them, and of which kind (`kind`: "aten ops" on a
    CPU, "kernels" on CUDA).

    On CUDA the kernels come from torch.profiler (CUPTI), so a compiled step counts its fused kernels. On a CPU a
    dispatch mode counts aten ops; Dynamo does not compile under a dispatch mode, so a compiled step counts as eager
    (`eager` is then True).
    """

    def __init__(self, device_type: str) -> None:
        self.cuda = device_type == "cuda"
        self.kind = "kernels" if self.cuda else "aten ops"
        self._ctx: Any = None

    def start(self) -> None:
        if self.cuda:
            from torch.profiler import ProfilerActivity, profile

            self._ctx = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        else:
            self._ctx = aten_counter()
        self._ctx.__enter__()

    def stop(self) -> int | None:
        """The count since `start()`, or None when not counting."""
        ctx, self._ctx = self._ctx, None
        if ctx is None:
            return None
        if self.cuda:
            import torch

            torch.cuda.synchronize()  # the step's kernels must have run before the trace is read
            ctx.__exit__(None, None, None)
            return count_kernels(ctx.profiler.kineto_results.events())
        ctx.__exit__(None, None, None)
        return ctx.count
