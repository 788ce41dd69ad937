"""Loading a local weights file into a timm model: state dicts in timm or torchvision naming, or a zoo .ckpt.

The head is always the new task's; every other tensor must match by name and shape. What did not load is
reported by name, and a file that matches too little of the model is refused instead of silently training
from (mostly) random weights.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch
from torch import nn

from zoo.errors import ZooError


def head_prefixes(model: nn.Module) -> tuple[str, ...]:
    """Parameter-name prefixes of the classifier head (timm records them in pretrained_cfg['classifier'])."""
    head = getattr(model, "pretrained_cfg", {}).get("classifier", "fc")
    return tuple(head) if isinstance(head, (list, tuple)) else (head,)


log = logging.getLogger(__name__)

MIN_MATCH = 0.5  # fraction of the backbone's tensors a file must provide


def read_state_dict(path: Path, arch: str) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise ZooError(f"pretrained weights file not found: {path}; check the path")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path))
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - corrupt files raise many types
        raise ZooError(f"cannot read weights file {path} ({type(e).__name__}); is it a torch/safetensors file?") from None
    if isinstance(obj, dict) and "state_dict" in obj and "zoo" in obj:  # a zoo checkpoint
        trained_arch = obj.get("hyper_parameters", {}).get("arch")
        if trained_arch and trained_arch.split(".")[0] != arch.split(".")[0]:
            raise ZooError(f"{path} holds a {trained_arch} model, not {arch}; set task.module.arch={trained_arch}")
        return {k.removeprefix("model."): v for k, v in obj["state_dict"].items() if k.startswith("model.")}
    for key in ("state_dict", "model", "model_state_dict", "module"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ZooError(f"{path} is not a state dict of tensors; save one with torch.save(model.state_dict(), ...)")
    return {k.removeprefix("module.").removeprefix("model."): v for k, v in obj.items()}


def _convert(model: nn.Module, sd: dict) -> dict:
    """timm's own converter for the architecture (original / torchvision naming -> timm), where it has one."""
    filter_fn = getattr(sys.modules.get(type(model).__module__), "checkpoint_filter_fn", None)
    if filter_fn is None:
        return sd
    try:
        return filter_fn(sd, model)
    except Exception:  # noqa: BLE001 - converters assume their own format; fall back to names as they are
        return sd


def load_weights_file(model: nn.Module, path: Path, arch: str) -> str:
    from timm.models import adapt_input_conv


    sd = _convert(model, read_state_dict(path, arch))
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
        raise ZooError(f"incompatible weights: {path} matches {matched} of {len(backbone)} tensors of {arch} "
                       f"(its keys look like {example}); use weights of the same architecture")
    model.load_state_dict(load, strict=False)
    missing = [n for n in backbone if n not in load and not n.endswith("num_batches_tracked")]
    parts = [f"weights from {path.name}: {matched}/{len(backbone)} backbone tensors, new head {', '.join(heads)}"]
    if missing:
        parts.append(f"missing (random init): {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
    if reshaped:
        parts.append(f"skipped (shape): {', '.join(reshaped[:8])}")
    if unused:
        parts.append(f"unused: {', '.join(unused[:8])}{' ...' if len(unused) > 8 else ''}")
    report = "; ".join(parts)
    print(f"zoo: {report}", flush=True)
    return report
