"""Front end: waveform -> per-utterance normalised log-Mel features, and SpecAugment (training only)."""

from __future__ import annotations

from typing import Any

import torch
import torchaudio
from torch import nn

from .augment import VoiceAugment


class LogMel(nn.Module):
    """(B, T) waveforms + lengths -> (B, n_mels, frames) features + frame lengths.

    Per-utterance mean/variance normalisation over the real (unpadded) frames only, so padding never shifts the
    statistics and the same utterance gives the same features alone or in a batch.

    norm: "bin" (each Mel bin to zero mean and unit variance over the utterance: removes any fixed channel colouring)
    or "level" (one mean and variance over all bins: removes only the gain, keeps the spectral shape, which in a
    single short word is much of what tells the words apart).

    voice: options of `zoo.speech.augment.VoiceAugment` (VTLP, pitch shift), applied to the power spectrogram before the
    Mel filterbank in training only; it holds no tensors, so checkpoints are the same with or without it.
    """

    def __init__(self, sample_rate: int = 16000, n_mels: int = 40, win_ms: float = 25.0, hop_ms: float = 10.0,
                 voice: dict[str, Any] | None = None, norm: str = "bin") -> None:
        super().__init__()
        if norm not in ("bin", "level"):
            raise ValueError(f"unknown feature norm {norm!r}; use bin or level")
        self.norm = norm
        self.voice = VoiceAugment(sample_rate, **voice) if voice else None
        self.hop = int(sample_rate * hop_ms / 1000)
        n_fft = 1 << (int(sample_rate * win_ms / 1000) - 1).bit_length()
        self.mel = torchaudio.transforms.MelSpectrogram(
            sample_rate=sample_rate, n_fft=n_fft, win_length=int(sample_rate * win_ms / 1000), hop_length=self.hop,
            n_mels=n_mels, center=True, power=2.0)

    def frames(self, lengths: torch.Tensor) -> torch.Tensor:
        return lengths // self.hop + 1  # center=True pads n_fft//2 on both sides

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(device_type=wave.device.type, enabled=False):
            spec = self.mel.spectrogram(wave.float())  # (B, n_fft // 2 + 1, F) power
            if self.voice is not None:
                spec = self.voice(spec)
            feats = torch.log(self.mel.mel_scale(spec) + 1e-6)  # (B, n_mels, F)
        frames = self.frames(lengths).clamp(max=feats.shape[-1])
        mask = (torch.arange(feats.shape[-1], device=wave.device)[None, :] < frames[:, None]).unsqueeze(1)  # (B,1,F)
        n = frames.clamp(min=1)[:, None, None].to(feats.dtype)
        dims = (-1,) if self.norm == "bin" else (-2, -1)
        if self.norm == "level":
            n = n * feats.shape[1]
        mean = (feats * mask).sum(dims, keepdim=True) / n
        var = (((feats - mean) * mask) ** 2).sum(dims, keepdim=True) / n
        feats = (feats - mean) / (var + 1e-5).sqrt()
        return feats.masked_fill(~mask, 0.0), frames


class SpecAugment(nn.Module):
    """Frequency and time masking (Park et al. 2019, https://arxiv.org/abs/1904.08779); identity in eval mode.

    Time masks are capped at `max_time_ratio` of each utterance's real length so short utterances keep their words.
    """

    def __init__(self, freq_masks: int = 2, freq_width: int = 15, time_masks: int = 2, time_width: int = 20,
                 max_time_ratio: float = 0.1) -> None:
        super().__init__()
        self.freq_masks, self.freq_width = freq_masks, freq_width
        self.time_masks, self.time_width, self.max_time_ratio = time_masks, time_width, max_time_ratio

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return feats
        b, f, t = feats.shape
        feats = feats.clone()
        for i in range(b):
            for _ in range(self.freq_masks):
                w = int(torch.randint(0, self.freq_width + 1, ()))
                f0 = int(torch.randint(0, max(1, f - w), ()))
                feats[i, f0:f0 + w, :] = 0.0
            width = min(self.time_width, int(self.max_time_ratio * int(frames[i])))
            for _ in range(self.time_masks):
                w = int(torch.randint(0, width + 1, ()))
                t0 = int(torch.randint(0, max(1, int(frames[i]) - w), ()))
                feats[i, :, t0:t0 + w] = 0.0
        return feats
