"""`task.module.pretrained=` for GANs: start G, its EMA and D from an earlier gan/dcgan run (e.g. digits -> your
ImageFolder), or from a weights file.

What carries over, by name and shape (zoo.kit.pretrained.match_weights):
- same image size and width: everything but what the data changes (below);
- grey <-> RGB: D's first conv and G's last conv are converted (grey weights repeated over RGB, or RGB averaged);
- another image size (32 <-> 64): DCGAN stages double the resolution, so G is aligned from its output end (its
  last stages load, the new first stage starts fresh) and D from its input end (its first stages load, the new
  last stage and the head start fresh);
- class-conditional embeddings (and G's first layer, which reads them) start fresh when the classes differ.
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch

from zoo.kit.pretrained import announce_report, match_weights, read_pretrained, weights_path

TASK = "gan/dcgan"
NETS = ("generator.", "generator_ema.", "discriminator.")
log = logging.getLogger(__name__)


def _shift_generator(weights: dict, offset: int) -> dict:
    """Renumber G's `net.<i>` layers by `offset` (3 modules per DCGAN stage), aligning the output ends."""
    out = {}
    for name, value in weights.items():
        m = re.match(r"(generator(?:_ema)?\.net\.)(\d+)(\..*)", name)
        if m is None:
            out[name] = value
        elif int(m.group(2)) + offset >= 0:
            out[f"{m.group(1)}{int(m.group(2)) + offset}{m.group(3)}"] = value
    return out


def _convert_channels(own: dict, weights: dict) -> list[str]:
    """Grey <-> RGB for D's input conv (dim 1) and G's output conv (dim 1 of a ConvTranspose weight)."""
    done = []
    for name, value in list(weights.items()):
        target = own.get(name)
        if target is None or value.ndim != 4 or value.shape == target.shape:
            continue
        if value.shape[0] != target.shape[0] or value.shape[2:] != target.shape[2:]:
            continue
        c_old, c_new = value.shape[1], target.shape[1]
        if (c_old, c_new) == (1, 3):
            weights[name] = value.repeat(1, 3, 1, 1) / (3 if name.startswith("discriminator.") else 1)
        elif (c_old, c_new) == (3, 1):
            weights[name] = value.mean(1, keepdim=True) * (3 if name.startswith("discriminator.") else 1)
        else:
            continue
        done.append(f"{name} {c_old}->{c_new} channels")
    return done


def load_pretrained(module: Any, value: Any) -> dict | None:
    """Load `value` into G, G's EMA and D; the report by name (also what the checkpoint records), or None."""
    path = weights_path(value, TASK)
    if path is None:
        return None
    weights, ckpt = read_pretrained(path, TASK)
    hp, new = (ckpt or {}).get("hyper_parameters") or {}, module.hparams
    weights = {k: v for k, v in weights.items() if k.startswith(NETS)}
    notes, fresh = [], []
    if "generator_ema.net.0.weight" not in weights:  # a source trained without EMA: its G seeds the EMA too
        weights.update({"generator_ema." + k[len("generator."):]: v for k, v in list(weights.items())
                        if k.startswith("generator.")})
    old_size = int(hp.get("image_size", new.image_size))
    if old_size != new.image_size:
        offset = 3 * (new.image_size.bit_length() - old_size.bit_length())
        weights = _shift_generator(weights, offset)
        notes.append(f"image size {old_size} -> {new.image_size}: G aligned from its output end, D from its input")
    if hp and (hp.get("class_names") != new.class_names or bool(hp.get("conditional")) != bool(new.conditional)):
        fresh = [f"{net}embed." for net in NETS]  # other classes: their embeddings mean nothing here
        if new.conditional:
            notes.append(f"classes {hp.get('class_names')} -> {new.class_names}: class embeddings start fresh")
    own = {k: v for k, v in module.state_dict().items() if k.startswith(NETS)}
    notes += _convert_channels(own, weights)
    # At another size the new stage (G's z -> 4x4 layer, D's last conv) holds most of the weights (92% at width 8,
    # 32 -> 64 px), so the bar only separates "the stages aligned" from "nothing fits" (another width or arch).
    min_match = 0.5 if old_size == new.image_size else 0.02
    load, report = match_weights(own, weights, path, "GAN (G, EMA G, D)", fresh=tuple(fresh), min_match=min_match)
    with torch.no_grad():
        module.load_state_dict(load, strict=False)
    report["reinit"] = [n for n in report["reinit"] if n in own]
    report["notes"] = notes
    report["line"] = announce_report(report, log)
    return report
