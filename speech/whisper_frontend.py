"""Whisper's log-Mel front end in torch, at the audio's own length (no 30 s padding).

16 kHz waveform -> 80 log-Mel bins every 10 ms, as OpenAI Whisper and transformers' `WhisperFeatureExtractor`
compute them: a 400-sample periodic Hann window, hop 160, power spectrum, Slaney-normalised Mel filters up to
8 kHz, log10 of the Mel energies clamped at 1e-10, then clamped from below at (the utterance's maximum - 8) and
scaled as (x + 4) / 4. The extractor pads every clip with zeros to 30 s before its centred STFT, so the first
window reflects the audio and the last ones see zeros; here the left edge is reflected and the right edge padded
with zeros the same way, and `samples // 160` frames are kept (the extractor drops the STFT's last frame), so a
clip gives exactly the extractor's first frames (tests/speech/test_whisper.py measures the difference).

The STFT is a strided convolution with a fixed DFT basis rather than torch.stft: it exports to ONNX with a dynamic
length (the graph takes the waveform) and costs ~16 M multiply-adds per second of audio.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
import torchaudio
from torch import nn

RATE, N_FFT, HOP = 16000, 400, 160


class WhisperLogMel(nn.Module):
    """(B, T) 16 kHz waveforms + sample counts -> (B, n_mels, F) Whisper features + frame counts (F = T // 160)."""

    def __init__(self, n_mels: int = 80) -> None:
        super().__init__()
        bins = N_FFT // 2 + 1
        n = torch.arange(N_FFT, dtype=torch.float64)
        window = 0.5 - 0.5 * torch.cos(2 * math.pi * n / N_FFT)  # periodic Hann, as torch.hann_window
        k = torch.arange(bins, dtype=torch.float64)[:, None]
        phase = 2 * math.pi * k * n[None, :] / N_FFT
        basis = torch.cat([torch.cos(phase), -torch.sin(phase)]) * window  # (2 * bins, N_FFT): real, imaginary
        self.register_buffer("basis", basis.float()[:, None, :], persistent=False)
        mel = torchaudio.functional.melscale_fbanks(bins, 0.0, RATE / 2, n_mels, RATE, norm="slaney",
                                                    mel_scale="slaney")  # (bins, n_mels)
        self.register_buffer("mel", mel.T.contiguous().float(), persistent=False)
        self.bins = bins
        self.voice: nn.Module | None = None  # zoo.speech.augment.VoiceAugment (VTLP, pitch), training only

    @staticmethod
    def frames(lengths: torch.Tensor) -> torch.Tensor:
        return torch.div(lengths, HOP, rounding_mode="floor")

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(device_type=wave.device.type, enabled=False):
            x = wave.float()[:, None, :]
            x = torch.cat([x[:, :, 1:N_FFT // 2 + 1].flip(-1), x], dim=-1)  # reflect the left edge (center=True)
            x = F.pad(x, (0, N_FFT // 2))  # zeros after the audio, as after the extractor's 30 s padding
            spec = F.conv1d(x, self.basis, stride=HOP)  # (B, 2 * bins, frames + 1)
            power = spec[:, : self.bins] ** 2 + spec[:, self.bins:] ** 2
            if self.voice is not None:
                power = self.voice(power)
            logmel = torch.matmul(self.mel, power[..., :-1]).clamp(min=1e-10).log10()  # (B, n_mels, F)
        frames = self.frames(lengths).clamp(max=logmel.shape[-1])
        mask = (torch.arange(logmel.shape[-1], device=wave.device)[None, :] < frames[:, None]).unsqueeze(1)
        top = logmel.masked_fill(~mask, -1e4).amax(dim=(1, 2), keepdim=True)  # over the real frames only
        feats = (torch.maximum(logmel, top - 8.0) + 4.0) / 4.0
        return feats.masked_fill(~mask, 0.0), frames
