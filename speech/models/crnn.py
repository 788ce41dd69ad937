"""Conv subsampling + bidirectional LSTM/GRU stack: the quick-on-CPU default (Deep Speech 2 in miniature)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .subsample import Conv2dSubsample


class CRNN(nn.Module):
    def __init__(self, n_mels: int, vocab_size: int, rnn: str = "lstm", hidden: int = 256, layers: int = 3,
                 dropout: float = 0.15, conv_channels: int = 32, norm: bool = False) -> None:
        super().__init__()
        self.subsample = Conv2dSubsample(n_mels, hidden, channels=conv_channels, dropout=dropout, norm=norm)
        cell = {"lstm": nn.LSTM, "gru": nn.GRU}[rnn]
        self.rnn = cell(hidden, hidden, num_layers=layers, bidirectional=True, batch_first=True,
                        dropout=dropout if layers > 1 else 0.0)
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(2 * hidden, vocab_size))

    def forward(self, feats: torch.Tensor, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, lengths = self.subsample(feats, frames)  # (B, T', H)
        # Packing keeps the backward direction from reading padding first.
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        y, _ = self.rnn(packed)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return self.head(y), lengths  # (B, T', V)
