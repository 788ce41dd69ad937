"""The synthetic benchmark data (vision, nlp): a pool made once, placed once, served with no copy per batch.

Before, each loader rebuilt the pool and `pin_memory=True` copied every batch into pinned memory in the main thread
(154 MB per ResNet-50 step at batch 256). On CPU: pin_memory is off and the loader yields the pool's own tensors; the
GPU choices are checked through the decision function and a stand-in device.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from zoo.nlp import synthetic as text
from zoo.vision import synthetic as images

MODULES = {
    "vision": lambda: images.SyntheticImageDataModule(image_size=8, num_classes=3, batch_size=2, batches=5),
    "nlp": lambda: text.SyntheticTextDataModule(max_length=8, batch_size=2, batches=5),
}


def tensors(batch) -> list[torch.Tensor]:  # noqa: ANN001
    values = batch.values() if isinstance(batch, dict) else batch
    return [v for v in values if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize("domain", MODULES)
def test_pool_built_once_and_served_without_copies(domain, monkeypatch):
    dm = MODULES[domain]()
    made = []
    build = torch.randint
    monkeypatch.setattr(torch, "randint", lambda *a, **k: made.append(1) or build(*a, **k))
    train, val = dm.train_dataloader(), dm.val_dataloader()
    calls = len(made)
    dm.train_dataloader()
    assert len(made) == calls > 0  # a second loader reuses the pool: nothing drawn again
    assert train.pin_memory is False and val.pin_memory is False
    assert dm.placement == ("pinned" if torch.cuda.is_available() else "cpu")
    served = [b for _, b in zip(range(5), train)]
    for i, batch in enumerate(served):  # the pool's own tensors, batch after batch: no per-batch copy or pin
        assert all(a is b for a, b in zip(tensors(batch), tensors(dm.pool[i % len(dm.pool)])))
    assert all(a is b for a, b in zip(tensors(next(iter(val))), tensors(dm.pool[0])))


@pytest.mark.parametrize("module", [images, text])
def test_placement_decision(module):
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert module.pool_placement(cuda, True) == "device"  # GPU trainer: kept on its device
    assert module.pool_placement(None, True) == "pinned"  # CUDA machine, no trainer yet: pinned once
    assert module.pool_placement(cpu, True) == "cpu"  # trainer.accelerator=cpu on a GPU machine
    assert module.pool_placement(cpu, False) == module.pool_placement(None, False) == "cpu"


@pytest.mark.parametrize("domain", MODULES)
def test_pool_moves_once_to_the_trainers_device(domain, monkeypatch):
    """A stand-in device (meta) for a GPU: the pool is moved there when built, and the loader serves it as is."""
    module = images if domain == "vision" else text
    monkeypatch.setattr(module, "pool_placement", lambda device, cuda: "device")
    dm = MODULES[domain]()
    dm.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("meta")))
    loader = dm.train_dataloader()
    assert dm.placement == "device" and loader.pin_memory is False
    assert all(t.device.type == "meta" for b in dm.pool for t in tensors(b))
    assert all(a is b for a, b in zip(tensors(next(iter(loader))), tensors(dm.pool[0])))
