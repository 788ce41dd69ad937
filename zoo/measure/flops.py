"""FLOPs: the one counter (torch's FlopCounterMode) and model FLOPs utilisation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def count_flops(step: Callable[[], Any]) -> tuple[int, Any]:
    """FLOPs of whatever `step()` runs (forward, backward: every matmul/conv torch dispatches), and its result.

    Under torch.compile the step runs eagerly while the counter is active (Dynamo does not compile under a dispatch
    mode), so the count is the same as eager and compilation happens on the next call.
    """
    counter = FlopCounter()
    counter.start()
    try:
        out = step()
    finally:
        flops = counter.stop()
    return int(flops or 0), out


def mfu(flops_per_step: float | None, step_s: float, peak_per_device: float | None, devices: int = 1) -> float | None:
    """Model FLOPs utilisation: FLOPs per optimizer step (all devices) / step time / peak of all devices."""
    if not flops_per_step or not peak_per_device or step_s <= 0:
        return None
    return flops_per_step / step_s / (peak_per_device * devices)


def implausible(flops_per_step: float | None, step_s: float, peak_per_device: float | None, kind: str,
                devices: int = 1) -> str | None:
    """Why a measurement cannot be right, or None: more FLOP/s than the devices' peak for the math that ran (MFU above
    100 %), i.e. more units per second than the step's FLOPs and that peak allow. Such a row is a measurement error
    (a faster math ran than the one the peak is for, an underestimated CPU peak, a miscounted step, a clock that
    missed queued work), never a number to quote."""
    util = mfu(flops_per_step, step_s, peak_per_device, devices)
    if util is None or util <= 1.0 or not flops_per_step or not peak_per_device:  # mfu is None without both
        return None
    rate = flops_per_step / step_s / 1e12
    return (f"{rate:.3g} TFLOP/s measured, above the {kind} peak of {devices} x {peak_per_device / 1e12:.3g} TFLOP/s "
            f"(MFU would be {100 * util:.1f} %): the math that ran, the peak or the clock is wrong")


class FlopCounter:
    """FLOPs of whatever torch dispatches between `start()` and `stop()` (every matmul/conv, forward and backward):
    the one counter behind `count_flops`, the throughput callback and `zoo bench`, whose step spans several hooks."""

    def __init__(self) -> None:
        self._mode: Any = None

    def start(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def stop(self) -> int | None:
        """The count since `start()`, or None when not counting."""
        mode, self._mode = self._mode, None
        if mode is None:
            return None
        mode.__exit__(None, None, None)
        return int(mode.get_total_flops())
