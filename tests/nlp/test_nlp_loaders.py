"""The nlp loaders on a CUDA trainer: pinned batches (Lightning's copy to the GPU is then non-blocking); never on a
CPU trainer. No GPU here: a stand-in trainer says where the step runs, and the loaders are built, not iterated."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from zoo.nlp.data import TextDataModule


def on(device: str) -> SimpleNamespace:
    return SimpleNamespace(world_size=1, global_rank=0, strategy=SimpleNamespace(root_device=torch.device(device)))


def test_pinned_on_a_cuda_trainer_only(tiny_encoder):
    dm = TextDataModule(tiny_encoder, builtin_size=64, batch_size=8, num_workers=2)
    dm.setup("fit")
    dm.trainer = on("cuda")
    loader = dm.train_dataloader()
    assert loader.pin_memory and loader.persistent_workers and loader.prefetch_factor == 4
    dm.trainer = on("cpu")
    assert not dm.val_dataloader().pin_memory
    dm.num_workers = 0
    assert dm.train_dataloader().prefetch_factor is None  # torch refuses a prefetch factor without workers
