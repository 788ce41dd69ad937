"""Loading weights into a timm model: state dicts in timm, torchvision or efficientnet_pytorch naming, a zoo .ckpt of
this task (any head), or the pip-packaged ImageNet weights (vision/models/packaged.py).

The head is always the new task's; every other tensor must match by name and shape. What did not load is
reported by name, and weights that match too little of the model are refused instead of silently training
from (mostly) random weights.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch
from torch import nn

from zoo.errors import ZooError

TASK = "vision/resnet"
MIN_MATCH = 0.5  # fraction of the backbone's tensors the weights must provide

log = logging.getLogger(__name__)


def head_prefixes(model: nn.Module) -> tuple[str, ...]:
    """Parameter-name prefixes of the classifier head (timm records them in pretrained_cfg['classifier'])."""
    head = getattr(model, "pretrained_cfg", {}).get("classifier", "fc")
    return tuple(head) if isinstance(head, (list, tuple)) else (head,)


def _check_checkpoint(ckpt: dict, path: Path, arch: str) -> dict:
    task = ckpt.get("zoo", {}).get("task")
    if task and task != TASK:
        raise ZooError(f"{path} is a {task} checkpoint, not {TASK}; pretrained= takes weights or a checkpoint "
                       "of an image classifier")
    trained_arch = ckpt.get("hyper_parameters", {}).get("arch")
    if trained_arch and trained_arch.split(".")[0] != arch.split(".")[0]:
        raise ZooError(f"{path} holds a {trained_arch} model, not {arch}; set task.module.arch={trained_arch}")
    return ckpt


def read_checkpoint_hparams(path: Path, arch: str) -> dict | None:
    """The hyper-parameters of a zoo .ckpt (its mean/std say what inputs it was trained on); None for other files."""
    if path.suffix != ".ckpt":
        return None
    from zoo.core.checkpoint import load_checkpoint

    return _check_checkpoint(load_checkpoint(path), path, arch).get("hyper_parameters", {})


def read_state_dict(path: Path, arch: str) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise ZooError(f"pretrained weights file not found: {path}; check the path")
    if path.suffix == ".ckpt":  # every zoo checkpoint read goes through zoo.checkpoint (one-line errors)
        from zoo.core.checkpoint import load_checkpoint

        obj = load_checkpoint(path)
    else:
        try:
            if path.suffix == ".safetensors":
                from safetensors.torch import load_file

                return load_file(str(path))
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - corrupt files raise many types
            raise ZooError(f"cannot read weights file {path} ({type(e).__name__}); is it a torch/safetensors "
                           "file?") from None
    if isinstance(obj, dict) and "state_dict" in obj and ("zoo" in obj or "hyper_parameters" in obj):
        sd = _check_checkpoint(obj, path, arch)["state_dict"]
        return {k.removeprefix("model."): v for k, v in sd.items() if k.startswith("model.")}
    for key in ("state_dict", "model", "model_state_dict", "module"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ZooError(f"{path} is not a state dict of tensors; save one with torch.save(model.state_dict(), ...)")
    return {k.removeprefix("module.").removeprefix("model."): v for k, v in obj.items()}


def _convert(model: nn.Module, sd: dict, path: Path, arch: str) -> dict:
    """Foreign naming -> timm: efficientnet_pytorch by the verified mapping, others by timm's own converter."""
    from zoo.vision.models.packaged import is_efficientnet_pytorch, to_timm

    if is_efficientnet_pytorch(sd):
        return to_timm(sd, arch, path.name)
    filter_fn = getattr(sys.modules.get(type(model).__module__), "checkpoint_filter_fn", None)
    if filter_fn is None:
        return sd
    try:
        return filter_fn(sd, model)
    except Exception:  # noqa: BLE001 - converters assume their own format; fall back to names as they are
        return sd


def load_weights_file(model: nn.Module, path: Path, arch: str) -> str:
    return load_state_dict(model, _convert(model, read_state_dict(path, arch), path, arch), path.name, arch)


def load_state_dict(model: nn.Module, sd: dict[str, torch.Tensor], where: str, arch: str) -> str:
    """Load everything but the head (and adapt the first conv to the input channels); report what loaded by name."""
    from timm.models import adapt_input_conv

    own = model.state_dict()
    heads = head_prefixes(model)
    first_conv = getattr(model, "pretrained_cfg", {}).get("first_conv")
    load, reshaped, unused = {}, [], []
    for name, value in sd.items():
        if name.startswith(heads):
            continue  # the new task's head starts fresh
        if name not in own:
            unused.append(name)
            continue
        if first_conv and name == f"{first_conv}.weight" and value.shape[1] != own[name].shape[1]:
            value = adapt_input_conv(own[name].shape[1], value)  # RGB weights -> grey (or more channels)
        if value.shape != own[name].shape:
            reshaped.append(f"{name} {tuple(value.shape)}->{tuple(own[name].shape)}")
            continue
        load[name] = value
    backbone = [n for n in own if not n.startswith(heads)]
    matched = sum(n in load for n in backbone)
    if matched < MIN_MATCH * len(backbone):
        example = ", ".join(list(sd)[:3])
        raise ZooError(f"incompatible weights: {where} matches {matched} of {len(backbone)} tensors of {arch} "
                       f"(its keys look like {example}); use weights of the same architecture")
    model.load_state_dict(load, strict=False)
    missing = [n for n in backbone if n not in load and not n.endswith("num_batches_tracked")]
    parts = [f"weights from {where}: {matched}/{len(backbone)} backbone tensors, new head {', '.join(heads)}"]
    if missing:
        parts.append(f"missing (random init): {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
    if reshaped:
        parts.append(f"skipped (shape): {', '.join(reshaped[:8])}")
    if unused:
        parts.append(f"unused: {', '.join(unused[:8])}{' ...' if len(unused) > 8 else ''}")
    report = "; ".join(parts)
    print(f"zoo: {report}", flush=True)
    return report
