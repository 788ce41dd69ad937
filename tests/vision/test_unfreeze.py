"""Gradual fine-tuning across the unfreeze boundary: a pretrained backbone keeps the BatchNorm statistics its head was
fitted to, its learning rate ramps up from zero, frozen epochs can run on cached features, and a test on the
validation images says so. A tiny timm ResNet with made-up "pretrained" weights; no shared data."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import timm
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from zoo.kit.optim import warmup_schedule
from zoo.vision import finetune as ft
from zoo.vision.module import ImageClassifier

ARCH = "resnet10t"


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/vision/conftest.py


@pytest.fixture()
def weights(tmp_path) -> str:
    """A weights file whose BatchNorm statistics are not the defaults (0, 1), as a pretrained backbone's are not."""
    torch.manual_seed(0)
    source = timm.create_model(ARCH, num_classes=1000)
    for m in source.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    torch.save(source.state_dict(), tmp_path / "w.pth")
    return str(tmp_path / "w.pth")


def module(**kw) -> ImageClassifier:
    args = dict(arch=ARCH, num_classes=4, image_size=16, pretrained=False, finetune="gradual", unfreeze_epoch=1,
                weight_decay=0.0, log_images=0, optimizer=lambda groups: torch.optim.AdamW(groups, lr=1e-2),
                scheduler=lambda opt, total_steps: warmup_schedule(opt, total_steps, kind="constant"))
    args.update(kw)
    return ImageClassifier(**args)


def data(n: int = 32, index: bool = False) -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    tensors = [torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 4, (n,), generator=g)]
    ds = TensorDataset(*tensors, torch.arange(n)) if index else TensorDataset(*tensors)
    return DataLoader(ds, batch_size=8, shuffle=True), DataLoader(ds, batch_size=8)


def fit(m: ImageClassifier, epochs: int, callbacks: list, index: bool = False) -> None:
    trainer = pl.Trainer(accelerator="cpu", max_epochs=epochs, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=callbacks)
    trainer.fit(m, *data(index=index))


def conv_weights(m: ImageClassifier) -> set[str]:
    return {f"{n}.weight" for n, mod in m.model.named_modules() if isinstance(mod, nn.Conv2d)}


def backbone_state(m: ImageClassifier) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in m.model.state_dict().items()
            if not k.startswith(m.heads) and "num_batches" not in k}


class Record(pl.Callback):
    """Per training step: epoch, batch, the backbone's rate as the optimizer applies it, the scheduled rate, and
    whether the backbone's features in train mode are the eval-mode features the head was fitted to."""

    def __init__(self, features: bool = True) -> None:
        self.features, self.batch = features, -1
        self.steps: list[tuple[int, int, float, float]] = []
        self.same_features: list[bool] = []
        self.states: list[dict] = []

    def on_train_batch_start(self, trainer, m, batch, batch_idx) -> None:
        self.batch = batch_idx
        if not self.features:
            return
        with torch.no_grad():
            as_trained = m.model.forward_features(batch[0])
            m.model.eval()
            as_fitted = m.model.forward_features(batch[0])
            m.train()
        self.same_features.append(torch.allclose(as_trained, as_fitted, atol=1e-5))

    def on_before_optimizer_step(self, trainer, m, optimizer) -> None:  # inside optimizer.step: rates as applied
        backbone = [g["lr"] for g in optimizer.param_groups if g.get("backbone")][0]
        scheduled = trainer.lr_scheduler_configs[0].scheduler.get_last_lr()[-1]
        self.steps.append((trainer.current_epoch, self.batch, backbone, scheduled))

    def on_train_epoch_end(self, trainer, m) -> None:
        self.states.append(backbone_state(m))


def test_gradual_keeps_the_pretrained_batchnorm_statistics_after_unfreezing(weights):
    m = module(pretrained=weights)
    before = backbone_state(m)
    rec = Record()
    fit(m, 2, [rec])
    frozen, opened = rec.states
    bn_stats = {k for k in before if "running_" in k}
    assert bn_stats and all(torch.equal(before[k], opened[k]) for k in bn_stats)  # both epochs
    assert all(not torch.equal(frozen[k], opened[k]) for k in conv_weights(m))  # the backbone did train in epoch 1
    assert all(rec.same_features)  # so the features under the head do not jump at the first unfrozen step


def test_a_randomly_initialised_backbone_updates_its_batchnorm_once_open():
    m = module(pretrained=False)
    rec = Record()
    fit(m, 2, [rec])
    frozen, opened = rec.states
    assert all(not torch.equal(frozen[k], opened[k]) for k in frozen if "running_mean" in k)


def test_the_backbone_rate_warms_up_from_zero_after_unfreezing():
    m = module(unfreeze_warmup=1.0, backbone_lr_scale=0.1)
    rec = Record()
    fit(m, 3, [rec])
    n = 4  # batches per epoch
    for epoch, batch, applied, scheduled in rec.steps:
        want = 0.0 if epoch == 0 else min(1.0, (epoch - 1 + (batch + 1) / n)) * scheduled
        assert applied == pytest.approx(want, rel=1e-6, abs=1e-12), (epoch, batch)
    assert [s[2] for s in rec.steps if s[0] == 1] == pytest.approx([1e-3 * k / n for k in (1, 2, 3, 4)])
    lrs = {g["lr"] for g in m.trainer.optimizers[0].param_groups}  # scheduled rates put back after each step
    assert sorted(lrs) == pytest.approx([1e-3, 1e-2])


def test_backbone_factor():
    assert ft.backbone_factor(0, 3, 10, unfreeze_epoch=2, warmup_epochs=1) == 0.0
    assert ft.backbone_factor(2, 4, 10, unfreeze_epoch=2, warmup_epochs=1) == pytest.approx(0.5)
    assert ft.backbone_factor(3, 4, 10, unfreeze_epoch=2, warmup_epochs=2) == pytest.approx(0.75)
    assert ft.backbone_factor(3, 0, 10, unfreeze_epoch=2, warmup_epochs=1) == 1.0
    assert ft.backbone_factor(2, 0, 10, unfreeze_epoch=2, warmup_epochs=0) == 1.0


def test_gradual_with_cached_features_caches_while_frozen_then_trains_the_whole_network(weights):
    m = module(pretrained=weights, cache_features=True, unfreeze_epoch=2)
    passes: list[tuple[int, int]] = []
    forward_features = m.model.forward_features
    m.model.forward_features = lambda x: (passes.append((m.current_epoch, len(x))), forward_features(x))[1]
    rec = Record(features=False)
    fit(m, 3, [rec], index=True)
    per_epoch = [sum(k for e, k in passes if e == epoch) for epoch in range(3)]
    assert per_epoch == [64, 0, 64]  # 32 train + 32 val images once, then cached, then every batch again
    first, cached, opened = rec.states
    assert all(torch.equal(first[k], cached[k]) for k in first)
    assert all(not torch.equal(cached[k], opened[k]) for k in conv_weights(m))
    assert not m._features  # dropped once the backbone trains


def test_a_test_on_the_validation_images_says_so(tmp_path, capsys):
    from PIL import Image

    from zoo.vision.data import ImageDataModule

    for split in ("train", "val"):
        for c in ("a", "b"):
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (16, 16), (40 * i, 90, 200)).save(tmp_path / split / c / f"{i}.png")
    dm = ImageDataModule("imagefolder", root=str(tmp_path), arch=ARCH, image_size=16, batch_size=4, num_workers=0,
                         pretrained=False)
    assert dm.test_is_val
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.test(module(num_classes=2, finetune="full"), datamodule=dm)
    assert "test/* is measured on the validation images, which chose the checkpoint" in capsys.readouterr().out
    (tmp_path / "test").symlink_to(tmp_path / "val")
    dm = ImageDataModule("imagefolder", root=str(tmp_path), arch=ARCH, image_size=16, batch_size=4, num_workers=0,
                         pretrained=False)
    assert not dm.test_is_val
    trainer.test(module(num_classes=2, finetune="full"), datamodule=dm)
    assert "validation images" not in capsys.readouterr().out
