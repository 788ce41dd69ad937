"""A task in the fewest files: the module and its data (the hooks are in hooks.py, the config in configs/)."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def blobs(n: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    return torch.randn(n, 4, generator=g) + 3.0 * y[:, None], y  # (n, 4), (n,)


class Blobs(L.LightningDataModule):
    def __init__(self, batch_size: int = 32) -> None:
        super().__init__()
        x, y = blobs()
        self.train_set, self.val_set = TensorDataset(x[:192], y[:192]), TensorDataset(x[192:], y[192:])
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()


class TinyClassifier(L.LightningModule):
    def __init__(self, hidden: int = 16, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _step(self, batch: tuple, stage: str) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        self.log(f"{stage}/loss", loss)
        self.log(f"{stage}/acc", (logits.argmax(-1) == y).float().mean())
        return loss

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
