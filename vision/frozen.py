"""A frozen backbone's pooled features through an optimised inference graph, for the epochs that cache them.

While the backbone is frozen its weights are constants, so its forward can be traced once and compiled for inference:
`torch.jit.freeze` inlines the weights, and `optimize_for_inference` folds each BatchNorm into its convolution and
pre-packs the weights for oneDNN. On the 2-core CPU this took a batch of 32 EfficientNet-Lite0 images at 224 px from
2.10 s to 1.36 s (median of 7 alternated pairs, scripts/evidence/bench_vision_frozen_graph.py, docs/vision.md), the
features within 1e-5 of eager mode. The graph holds copies of the weights: whoever changes the backbone must drop it
(CachedHeadClassifier.drop_graph). CPU and float32 only (autocast and CUDA
keep eager mode); where tracing fails the caller falls back to eager mode. It is not traced while a dispatch mode
(a FLOP counter) is on, and a graph that returns a different number of rows than it was given is not used.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import torch
from torch import nn

log = logging.getLogger(__name__)


class _Pooled(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model.forward_head(self.model.forward_features(x), pre_logits=True)


def usable(example: torch.Tensor) -> bool:
    """Where the graph is worth building: float32 on the CPU, outside autocast."""
    return (example.device.type == "cpu" and example.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu"))


def modes_active() -> bool:
    """Whether a torch dispatch or function mode is on, as torch's FlopCounterMode is over a run's first training step
    (zoo.measure.throughput): a trace taken under one bakes the example's batch size into the graph (measured: a graph
    traced there on 2 images returned 2 rows for 15)."""
    try:
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._python_dispatch import _get_current_dispatch_mode
    except ImportError:  # private helpers: where they are gone, the caller's row check still guards
        return False
    return _get_current_dispatch_mode() is not None or bool(_get_current_function_mode_stack())


def pooled_graph(model: nn.Module, example: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """The model's pooled features (timm's forward_head(pre_logits=True)) as an optimised TorchScript graph, traced
    on `example` with the model in its current (eval) mode; None where it cannot be built."""
    if not usable(example):
        return None
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore", FutureWarning)  # TorchScript's deprecation notice in torch >= 2.10
            traced = torch.jit.trace(_Pooled(model).eval(), example[:2], check_trace=False)
            return torch.jit.optimize_for_inference(torch.jit.freeze(traced))
    except Exception as e:  # noqa: BLE001 - any model TorchScript cannot trace: eager mode is right, only slower
        log.info("frozen backbone stays in eager mode (%s: %s)", type(e).__name__, e)
        return None
