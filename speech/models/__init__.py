"""Acoustic models by name: features (B, n_mels, F) + frame lengths -> CTC logits (B, T', vocab) + lengths."""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.errors import ZooError

from .conformer import ConformerCTC
from .crnn import CRNN

# name -> (class, default kwargs); a name is a preset over the two architectures.
MODELS: dict[str, tuple[type[nn.Module], dict[str, Any]]] = {
    "bilstm": (CRNN, {"rnn": "lstm", "hidden": 256, "layers": 3, "norm": True}),
    "bilstm_small": (CRNN, {"rnn": "lstm", "hidden": 128, "layers": 2, "norm": True}),
    "bigru": (CRNN, {"rnn": "gru", "hidden": 256, "layers": 3, "norm": True}),
    "conformer_s": (ConformerCTC, {"d_model": 144, "layers": 16, "heads": 4, "ffn": 576, "kernel": 31}),
    "conformer_xs": (ConformerCTC, {"d_model": 96, "layers": 4, "heads": 4, "ffn": 384, "kernel": 15}),
}


def list_models() -> list[str]:
    """The log-Mel models by name, then the transformers encoder families (`task.module.pretrained=<hub id or
    folder>`, speech/models/hf.py)."""
    from .hf import FAMILIES

    return sorted(MODELS) + sorted(FAMILIES)


def build_model(arch: str, n_mels: int, vocab_size: int, **overrides: Any) -> nn.Module:
    if arch not in MODELS:
        raise ZooError(f"unknown speech arch {arch!r}; choose one of {', '.join(list_models())}")
    cls, kwargs = MODELS[arch]
    kwargs = {**kwargs, **{k: v for k, v in overrides.items() if v is not None}}
    return cls(n_mels=n_mels, vocab_size=vocab_size, **kwargs)
