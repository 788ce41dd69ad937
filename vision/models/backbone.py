"""timm backbones by name, with a fresh head, and pretrained weights from the hub, a file or a zoo checkpoint."""

from __future__ import annotations

import logging
from pathlib import Path

import timm
from torch import nn

from vision.models.weights import head_prefixes, load_weights_file
from zoo.errors import ZooError
from zoo.hub import hub_online

__all__ = ["create_backbone", "head_prefixes", "list_models", "norm_config"]

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".pth", ".pt", ".bin", ".safetensors", ".ckpt")


def list_models() -> list[str]:
    """A short list of good transfer-learning backbones; any `timm.list_models()` name works."""
    return ["resnet18", "resnet34", "resnet50", "resnet50.a1_in1k", "resnet101", "wide_resnet50_2",
            "resnext50_32x4d", "convnext_tiny", "efficientnet_b0", "mobilenetv3_large_100", "regnety_016",
            "vit_small_patch16_224", "(any name from timm.list_models())"]


def _base_name(arch: str) -> str:
    return arch.split(".")[0] if not arch.startswith("hf-hub:") else arch


def check_arch(arch: str) -> None:
    if not arch.startswith("hf-hub:") and not timm.is_model(_base_name(arch)):
        near = timm.list_models(f"*{_base_name(arch)[:6]}*")[:5]
        raise ZooError(f"unknown backbone '{arch}'; try one of {near or list_models()[:5]} "
                       "(`python -m zoo list vision/resnet`)")


def norm_config(arch: str) -> dict:
    """The backbone's pretrained preprocessing (mean, std, input size), read without building the model."""
    check_arch(arch)
    cfg = None if arch.startswith("hf-hub:") else timm.models.get_pretrained_cfg(arch)
    mean, std = (tuple(cfg.mean), tuple(cfg.std)) if cfg else ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    size = int(cfg.input_size[-1]) if cfg else 224
    return {"mean": list(mean), "std": list(std), "input_size": size}


def _is_path(pretrained: str) -> bool:
    return pretrained.endswith(WEIGHT_SUFFIXES) or "/" in pretrained or Path(pretrained).exists()


def create_backbone(arch: str, num_classes: int, in_chans: int = 3, pretrained: bool | str = "auto",
                    drop_rate: float = 0.0) -> tuple[nn.Module, str]:
    """Build `arch` with a `num_classes` head; returns (model, where its weights came from).

    pretrained: False | True (hub weights or fail) | "auto" (hub weights when reachable, else random init, loudly)
    | a path to a state dict (.pth/.safetensors, timm or torchvision naming) or a zoo .ckpt.
    """
    check_arch(arch)
    kwargs = {"num_classes": num_classes, "in_chans": in_chans, "drop_rate": drop_rate}
    choice = str(pretrained).lower() if isinstance(pretrained, (bool, str)) else "auto"
    if choice in ("false", "none", "0", "random"):
        return timm.create_model(arch, pretrained=False, **kwargs), "random init"
    if choice in ("true", "auto", "1"):
        return _from_hub(arch, kwargs, required=choice != "auto")

    model = timm.create_model(arch, pretrained=False, **kwargs)
    report = load_weights_file(model, Path(str(pretrained)).expanduser(), arch)
    return model, report


def _from_hub(arch: str, kwargs: dict, required: bool) -> tuple[nn.Module, str]:
    online = hub_online()  # offline: sets HF_HUB_OFFLINE so timm reads only the local cache (no 45 s of retries)
    try:
        model = timm.create_model(arch, pretrained=True, **kwargs)
        return model, f"hub weights {arch} ({'downloaded or cached' if online else 'local cache'})"
    except Exception as e:  # noqa: BLE001 - hub/cache failures come in many types
        reason = "hub unreachable and not in the local cache" if not online else f"{type(e).__name__}: {e}"
        if required:
            raise ZooError(f"pretrained weights for {arch} are not available ({reason[:120]}); "
                           "use pretrained=auto or false for random init, or pretrained=<weights file>") from None
    # A warning reaches the console as well as cli.log (configs/hydra/default.yaml): said once, loudly.
    log.warning("no pretrained weights for %s (%s): training from RANDOM INIT", arch, reason[:120])
    return timm.create_model(arch, pretrained=False, **kwargs), "random init (pretrained=auto: hub weights unavailable)"
