"""Loader settings follow the machine and the trainer's device (zoo.kit.loaders), in every domain that loads images."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from zoo.kit.loaders import auto_workers, loader_options

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


def trainer_on(device: torch.device) -> SimpleNamespace:
    return SimpleNamespace(strategy=SimpleNamespace(root_device=device))


def test_workers_follow_the_usable_cores_and_the_processes_per_node(monkeypatch):
    monkeypatch.setattr("zoo.kit.loaders.usable_cores", lambda: 16)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert auto_workers("auto") == 15  # one core is the training loop's
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert auto_workers("auto") == 3  # four ranks on the node share the 16 cores
    monkeypatch.setattr("zoo.kit.loaders.usable_cores", lambda: 1)
    assert auto_workers("auto") == 0 and auto_workers(2) == 2


def test_pinned_only_for_a_cuda_trainer_and_only_off_the_main_thread():
    on_gpu = loader_options(trainer_on(CUDA), 4)
    assert on_gpu == {"num_workers": 4, "persistent_workers": True, "prefetch_factor": 4, "pin_memory": True}
    assert not loader_options(trainer_on(CPU), 4)["pin_memory"]
    assert not loader_options(trainer_on(CUDA), 0)["pin_memory"]  # would copy each batch again in the loop's thread
    assert loader_options(trainer_on(CUDA), 0, pin_in_main=True)["pin_memory"]  # small batches: token ids
    assert loader_options(trainer_on(CPU), 0)["prefetch_factor"] is None  # DataLoader refuses one without workers


@pytest.mark.parametrize("device, pinned", [(CUDA, True), (CPU, False)])
def test_image_folder_loaders_pin_on_a_gpu(tmp_path, device, pinned):
    from PIL import Image

    from zoo.vision.data import ImageDataModule

    for split in ("train", "val"):
        for c in ("a", "b"):
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(tmp_path / split / c / f"{i}.png")
    dm = ImageDataModule(dataset="imagefolder", root=str(tmp_path), image_size=8, batch_size=2, num_workers=2,
                         arch="resnet10t", pretrained=False)
    dm.trainer = trainer_on(device)
    loader = dm.train_dataloader()  # built, not iterated: there is no GPU to pin into here
    assert loader.pin_memory is pinned and loader.num_workers == 2 and loader.prefetch_factor == 4
