"""Conv subsampling + torchaudio's Conformer encoder (Gulati et al. 2020, https://arxiv.org/abs/2005.08100)."""

from __future__ import annotations

import torch
from torch import nn
from torchaudio.models import Conformer

from .subsample import Conv2dSubsample


class ConformerCTC(nn.Module):
    def __init__(self, n_mels: int, vocab_size: int, d_model: int = 144, layers: int = 16, heads: int = 4,
                 ffn: int = 576, kernel: int = 31, dropout: float = 0.1) -> None:
        super().__init__()
        self.subsample = Conv2dSubsample(n_mels, d_model, channels=d_model // 2, dropout=dropout)
        self.encoder = Conformer(input_dim=d_model, num_heads=heads, ffn_dim=ffn, num_layers=layers,
                                 depthwise_conv_kernel_size=kernel, dropout=dropout)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, lengths = self.subsample(feats, frames)  # (B, T', D)
        y, lengths = self.encoder(x, lengths)
        return self.head(y), lengths
