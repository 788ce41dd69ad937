"""The GAN evaluator's contract with vision checkpoints (docs/architecture.md), tested on a REAL checkpoint written
by `python -m zoo train task=vision/resnet`, not a hand-built imitation: if vision renames a hparam or moves its
weights, these tests say which part of the contract broke."""

from __future__ import annotations

import functools

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from zoo.gan.data import GANDataModule
from zoo.gan.evaluator import TimmClassifier, load_classifier_checkpoint
from zoo.gan.module import DCGAN
from zoo.testing import TINY, make_runner, run_dirs

pytestmark = pytest.mark.slow
DIGITS = [str(i) for i in range(10)]
# what zoo.gan.evaluator reads (docs/architecture.md, "The GAN evaluator's contract with vision checkpoints")
CONTRACT_HPARAMS = {"arch", "num_classes", "class_names", "in_chans", "image_size", "mean", "std"}


@pytest.fixture(scope="module")
def vision_ckpt(tmp_path_factory):
    """A tiny real vision/resnet run on the digits (16x16, 1 channel, resnet10t, 3 batches)."""
    tmp = tmp_path_factory.mktemp("vision_for_gan")
    make_runner(tmp)("train", *TINY, "task=vision/resnet", "task.data.image_size=16", "task.module.arch=resnet10t",
                     "task.module.pretrained=false", "test_after_fit=false", check=True)
    (run,) = run_dirs(tmp, "vision/resnet")
    return run / "checkpoints" / "last.ckpt"


def test_real_vision_checkpoint_holds_what_the_evaluator_reads(vision_ckpt):
    ckpt = torch.load(vision_ckpt, weights_only=True)
    assert CONTRACT_HPARAMS <= set(ckpt["hyper_parameters"]), "vision hparams changed: update zoo.gan.evaluator + docs"
    assert any(k.startswith("model.") for k in ckpt["state_dict"]), "vision weights left state_dict 'model.*'"
    assert ckpt["hyper_parameters"]["in_chans"] == 1 and ckpt["hyper_parameters"]["image_size"] == 16


def test_evaluator_gives_the_vision_models_own_logits(vision_ckpt):
    """GAN images (32x32 in [-1, 1]) are mapped to what vision trained on (16x16, its mean/std): the evaluator's
    logits equal the vision module's on the same images prepared the vision way."""
    from zoo.vision.module import ImageClassifier

    ev = load_classifier_checkpoint(str(vision_ckpt), channels=1, num_classes=10, class_names=DIGITS)
    vis = ImageClassifier.load_from_checkpoint(vision_ckpt, map_location="cpu").eval()
    dm = GANDataModule(batch_size=16)
    dm.setup()
    x, _ = next(iter(dm.val_dataloader()))  # (16, 1, 32, 32) in [-1, 1]
    feats, logits = ev(x)
    with torch.no_grad():
        ref = vis((F.interpolate((x + 1) / 2, size=(16, 16), mode="bilinear", align_corners=False) - vis.mean)
                  / vis.std)
    torch.testing.assert_close(logits, ref, rtol=1e-4, atol=1e-4)
    assert feats.shape == (16, vis.model.num_features)
    with pytest.raises(Exception, match="predicts 10 classes but the GAN data has 5"):
        load_classifier_checkpoint(str(vision_ckpt), channels=1, num_classes=5)


def test_gan_trains_and_validates_with_the_vision_classifier(vision_ckpt, tmp_path):
    """task.module.eval_classifier=<vision ckpt>: val/fd and class coverage come from the vision model, which stays
    out of the GAN's checkpoint."""
    m = DCGAN(arch="dcgan_small", nz=8, width=8, channels=1, image_size=32, num_classes=10, class_names=DIGITS,
              eval_classifier=str(vision_ckpt), optimizer=functools.partial(torch.optim.Adam, lr=2e-4))
    trainer = L.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=2, accelerator="cpu", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, default_root_dir=tmp_path)
    trainer.fit(m, datamodule=GANDataModule(batch_size=8))
    assert isinstance(m.judge.evaluator, TimmClassifier)
    metrics = trainer.callback_metrics
    assert torch.isfinite(metrics["val/fd"]) and "val/coverage_min" in metrics and metrics["val/fd_samples"] == 16
    assert not any(k.startswith("model.") or "judge" in k for k in m.state_dict())
