"""Fine-tuning parameter groups: no weight decay on biases and LayerNorm, optional layer-wise learning-rate decay.

Layer-wise decay (ELECTRA, Clark et al. 2020, https://arxiv.org/abs/2003.10555; BEiT): the head gets the full rate,
the top encoder layer `decay` times it, ... the embeddings `decay ** (L + 1)`. Lower layers hold more general
features and move less.
"""

from __future__ import annotations

import re

from torch import nn

from zoo.kit.optim import param_groups as zoo_param_groups

_LAYER = re.compile(r"\.layers?\.(\d+)\.")  # BERT/RoBERTa "encoder.layer.3.", DistilBERT "transformer.layer.3."


def layer_id(name: str, num_layers: int) -> int:
    """0 for embeddings, i + 1 for encoder layer i, num_layers + 1 for the pooler and the head."""
    if "embeddings" in name:
        return 0
    m = _LAYER.search(name)
    return int(m.group(1)) + 1 if m else num_layers + 1


def param_groups(model: nn.Module, weight_decay: float, layer_decay: float = 1.0,
                 num_layers: int | None = None) -> list[dict]:
    """Groups for AdamW; each carries `lr_scale`, which `zoo.kit.optim.warmup_schedule` multiplies into its rate."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if layer_decay == 1.0:
        return zoo_param_groups(named, weight_decay)
    if not 0.0 < layer_decay <= 1.0:
        raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
    if num_layers is None:
        num_layers = max((layer_id(n, 10**6) - 1 for n, _ in named if _LAYER.search(n)), default=-1) + 1
    by_layer: dict[int, list] = {}
    for n, p in named:
        by_layer.setdefault(layer_id(n, num_layers), []).append((n, p))
    groups = []
    for lid in sorted(by_layer):
        groups += zoo_param_groups(by_layer[lid], weight_decay, lr_scale=layer_decay ** (num_layers + 1 - lid))
    return groups


def freeze(model: nn.Module, embeddings: bool, layers: int, num_layers: int) -> int:
    """Stop training the embeddings (`embeddings`) and/or the bottom `layers` encoder layers (which implies the
    embeddings); -> the number of parameters frozen. Nothing below the lowest trained layer then needs a backward
    pass, which is where a CPU fine-tune of a 12-layer encoder saves most of its time."""
    if not 0 <= layers <= num_layers:
        raise ValueError(f"freeze_layers must be in [0, {num_layers}], got {layers}")
    top = layers if layers else (0 if embeddings else -1)  # the highest layer_id that stops training
    frozen = 0
    for name, p in model.named_parameters():
        if layer_id(name, num_layers) <= top:
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen
