"""Convolutional subsampling front (4x in time), as in ESPnet/Conformer's Conv2dSubsampling."""

from __future__ import annotations

import torch
from torch import nn


class Conv2dSubsample(nn.Module):
    """(B, n_mels, F) -> (B, F//4-ish, d_out); lengths follow the exact conv arithmetic (kernel 3, stride 2, pad 1)."""

    def __init__(self, n_mels: int, d_out: int, channels: int = 32, dropout: float = 0.1, norm: bool = False) -> None:
        super().__init__()
        # norm: BatchNorm after each conv (Deep Speech 2); it shortens the CTC plateau of the small RNN models.
        bn = (lambda: nn.BatchNorm2d(channels)) if norm else nn.Identity
        self.conv = nn.Sequential(
            nn.Conv2d(1, channels, 3, stride=2, padding=1), bn(), nn.GELU(),
            nn.Conv2d(channels, channels, 3, stride=2, padding=1), bn(), nn.GELU())
        freq = (n_mels + 1) // 2
        freq = (freq + 1) // 2
        self.proj = nn.Linear(channels * freq, d_out)
        self.drop = nn.Dropout(dropout)

    @staticmethod
    def out_lengths(frames: torch.Tensor) -> torch.Tensor:
        for _ in range(2):
            frames = (frames - 1) // 2 + 1  # floor((L + 2*1 - 3) / 2) + 1
        return frames

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.conv(feats.transpose(1, 2).unsqueeze(1))  # (B, C, F', M')
        b, c, t, m = x.shape
        x = self.proj(x.permute(0, 2, 1, 3).reshape(b, t, c * m))  # (B, T', d_out)
        return self.drop(x), self.out_lengths(frames).clamp(min=1, max=t)
