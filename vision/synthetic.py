"""Random images of a fixed shape, for measuring speed without a dataset (`zoo bench` on a machine with no data or
network): `task.data._target_=zoo.vision.synthetic.SyntheticImageDataModule task.data.image_size=224`.

A few batches are made once and served again and again, kept on the trainer's GPU (or pinned once), so the loader
costs almost nothing and the numbers are the model's. Accepts (and ignores) the other keys of the task's data config.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

from zoo.kit.loaders import pool_placement


class _Batches(Dataset):
    def __init__(self, pool: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> None:
        self.pool, self.length = pool, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pool[i % len(self.pool)]


class SyntheticImageDataModule(pl.LightningDataModule):
    def __init__(self, image_size: int = 224, channels: int | None = 3, num_classes: int = 1000,
                 batch_size: int = 64, batches: int = 100_000, pool: int = 4, seed: int = 0, **_: Any) -> None:
        super().__init__()
        self.image_size, self.channels = int(image_size), int(channels or 3)
        self.num_classes, self.batch_size = int(num_classes), int(batch_size)
        self.batches, self.pool_size, self.seed = int(batches), int(pool), int(seed)
        self.class_names = [str(i) for i in range(self.num_classes)]
        self.pool: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.placement: str | None = None

    def model_kwargs(self) -> dict:
        return {"num_classes": self.num_classes, "class_names": self.class_names, "in_chans": self.channels,
                "image_size": self.image_size, "mean": [0.5] * self.channels, "std": [0.25] * self.channels}

    def _device(self) -> torch.device | None:
        trainer = self.trainer
        return trainer.strategy.root_device if trainer is not None else None

    def _pool(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The batches, made once for every loader (train and val share them) and placed once."""
        if self.pool is None:
            g = torch.Generator().manual_seed(self.seed)
            shape = (self.batch_size, self.channels, self.image_size, self.image_size)  # (B, C, H, W)
            pool = [(torch.randn(shape, generator=g),
                     torch.randint(0, self.num_classes, (self.batch_size,), generator=g))
                    for _ in range(self.pool_size)]
            device = self._device()
            self.placement = pool_placement(device, torch.cuda.is_available())
            if self.placement == "device":
                pool = [(x.to(device), y.to(device)) for x, y in pool]
            elif self.placement == "pinned":
                pool = [(x.pin_memory(), y.pin_memory()) for x, y in pool]
            self.pool = pool
        return self.pool

    def _loader(self, batches: int) -> DataLoader:
        # batch_size=None: the dataset's items are whole batches already (no per-image collation to pay for);
        # pin_memory=False: the pool is placed once (pool_placement), the loader adds no copy per batch
        return DataLoader(_Batches(self._pool(), batches), batch_size=None, pin_memory=False)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.batches)

    def val_dataloader(self) -> DataLoader:
        return self._loader(2)
