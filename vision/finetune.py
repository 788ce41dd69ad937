"""Fine-tuning strategies: full, linear probe, and freeze-then-unfreeze with a lower backbone learning rate.

The frozen phase of `gradual` holds the backbone's learning rate at zero (and its BatchNorm statistics fixed)
instead of flipping requires_grad: DDP builds its gradient buckets once, so parameters that start frozen would never
be synchronised after unfreezing (Lightning-AI/pytorch-lightning#20340). The linear probe never unfreezes, so it
can drop the backbone from autograd entirely.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from zoo.optim import param_groups

STRATEGIES = ("full", "linear_probe", "gradual")


def split(model: nn.Module, heads: tuple[str, ...]) -> tuple[list, list]:
    backbone = [(n, p) for n, p in model.named_parameters() if not n.startswith(heads)]
    head = [(n, p) for n, p in model.named_parameters() if n.startswith(heads)]
    return backbone, head


def freeze_for_probe(model: nn.Module, heads: tuple[str, ...]) -> None:
    for name, p in model.named_parameters():
        p.requires_grad_(name.startswith(heads))


def set_backbone_bn_eval(model: nn.Module, heads: tuple[str, ...]) -> None:
    """BatchNorm layers of a frozen backbone keep their (pretrained) running statistics."""
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and not name.startswith(heads):
            m.eval()


def groups(model: nn.Module, heads: tuple[str, ...], strategy: str, weight_decay: float,
           backbone_lr_scale: float, backbone_open: Callable[[], bool]) -> list[dict]:
    """Optimizer param groups: the head at the full learning rate, the backbone scaled (and gated for gradual)."""
    backbone, head = split(model, heads)
    out = param_groups(head, weight_decay)
    if strategy == "linear_probe":
        return out
    extra = {"lr_gate": lambda _step: 1.0 if backbone_open() else 0.0} if strategy == "gradual" else {}
    return out + param_groups(backbone, weight_decay, lr_scale=backbone_lr_scale, **extra)
