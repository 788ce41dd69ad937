"""Checkpoints written before ImageClassifier and CachedHeadClassifier were split (vision/module.py,
vision/cached_head.py) name `zoo.vision.module.ImageClassifier` with all 22 hyper-parameters of that one class: they
still load (the cached-head ones as a CachedHeadClassifier, their flip-TTA choice kept), test and predict, with the
logits their weights give."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import timm
import torch
from omegaconf import OmegaConf
from torch.utils.data import DataLoader, TensorDataset

from zoo.core.build import load_module
from zoo.vision.cached_head import CachedHeadClassifier
from zoo.vision.module import ImageClassifier
from zoo.vision.predict import predict

ARCH, SIZE, MEAN, STD = "resnet10t", 16, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]

# ImageClassifier's hyper-parameters as the one class saved them (vision/resnet and vision_imagefolder runs)
GENERAL = {"arch": ARCH, "num_classes": 2, "class_names": ["blue", "red"], "in_chans": 3, "image_size": SIZE,
           "mean": MEAN, "std": STD, "pretrained": False, "unfreeze_epoch": 1, "unfreeze_warmup": 0.0,
           "backbone_lr_scale": 1.0, "weight_decay": 0.05, "label_smoothing": 0.0, "drop_rate": 0.0,
           "log_images": 0}
PLAIN = {**GENERAL, "finetune": "full", "cache_features": False, "head_fit": "sgd", "l2_grid": None, "l2_folds": 5,
         "tta": False, "frozen_jit": False}
CACHED = {**GENERAL, "finetune": "gradual", "unfreeze_epoch": 3, "unfreeze_warmup": 1, "weight_decay": 0.0,
          "cache_features": True, "head_fit": "lbfgs", "l2_grid": None, "l2_folds": 2, "tta": "auto",
          "frozen_jit": True}


def old_checkpoint(path: Path, hparams: dict, tta_flip: bool) -> Path:
    """The dict Lightning and the one class wrote: weights under model.*, vision_run with tta_flip and phases,
    the zoo record naming the class path."""
    torch.manual_seed(0)
    net = timm.create_model(ARCH, num_classes=2, in_chans=3)
    config = {"task": {"name": "vision/resnet", "module": {"_target_": "zoo.vision.module.ImageClassifier"}}}
    torch.save({"epoch": 2, "global_step": 6, "pytorch-lightning_version": pl.__version__,
                "state_dict": {f"model.{k}": v for k, v in net.state_dict().items()},
                "hparams_name": "kwargs", "hyper_parameters": dict(hparams),
                "vision_run": {"tta_flip": tta_flip, "phases": [(0, 0.5, "frozen"), (1, 1.0, "frozen")]},
                "pretrained_report": {"source": "False", "line": "random init"},
                "zoo": {"task": "vision/resnet", "config": config, "overrides": []}}, path)
    return path


def reference_logits(path: Path, x: torch.Tensor, tta_flip: bool) -> torch.Tensor:
    """What the checkpoint's weights give, without the zoo: timm's model, mirror-image TTA averaged in."""
    net = timm.create_model(ARCH, num_classes=2, in_chans=3).eval()
    sd = torch.load(path, weights_only=True)["state_dict"]
    net.load_state_dict({k.removeprefix("model."): v for k, v in sd.items()})
    with torch.no_grad():
        logits = net(x)
        return (logits + net(x.flip(-1))) / 2 if tta_flip else logits


@pytest.mark.parametrize(("hparams", "tta_flip", "cls"), [(PLAIN, False, ImageClassifier),
                                                          (CACHED, True, CachedHeadClassifier)],
                         ids=["vision_resnet", "vision_imagefolder"])
def test_a_checkpoint_of_the_one_class_loads_tests_and_predicts(tmp_path, hparams, tta_flip, cls):
    from PIL import Image

    path = old_checkpoint(tmp_path / "best.ckpt", hparams, tta_flip)
    cfg = OmegaConf.create(torch.load(path, weights_only=True)["zoo"]["config"])
    model = load_module(cfg, str(path))  # what zoo test / predict / export / serve do
    assert type(model) is cls and dict(model.hparams) == hparams
    assert getattr(model, "tta_flip", False) is tta_flip
    assert model.phases.entries == [(0, 0.5, "frozen"), (1, 1.0, "frozen")]

    g = torch.Generator().manual_seed(1)
    x = ((torch.rand(6, 3, SIZE, SIZE, generator=g) - torch.tensor(MEAN).view(1, 3, 1, 1))
         / torch.tensor(STD).view(1, 3, 1, 1))
    expected = reference_logits(path, x, tta_flip)
    with torch.no_grad():
        assert torch.allclose(model(x), expected, atol=1e-5)

    y = expected.argmax(-1)
    y[:2] = 1 - y[:2]  # two of six wrong: the test's accuracy is the checkpoint's, not a constant
    loader = DataLoader(TensorDataset(x, y, torch.arange(6)), batch_size=3)  # indices, as cache_features has
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    (metrics,) = trainer.test(model, dataloaders=loader, verbose=False)
    assert metrics["test/acc"] == pytest.approx(4 / 6)

    for i, colour in enumerate([(200, 40, 40), (40, 40, 200)]):
        Image.new("RGB", (SIZE, SIZE), colour).save(tmp_path / f"{i}.png")
    lines = list(predict(model.eval(), OmegaConf.create({"predict": {"top_k": 1}}), str(tmp_path)))
    photos = torch.stack([(torch.tensor(c, dtype=torch.float32).view(3, 1, 1).expand(3, SIZE, SIZE) / 255
                           - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)
                          for c in [(200, 40, 40), (40, 40, 200)]])
    want = reference_logits(path, photos, tta_flip).softmax(-1)
    assert len(lines) == 2
    for line, p in zip(lines, want):
        top = line["top_k"][0]
        assert top["label"] == ["blue", "red"][int(p.argmax())]
        assert top["prob"] == pytest.approx(float(p.max()), abs=1e-3)


def test_the_general_class_takes_no_cached_head_and_no_unknown_option():
    """With the defaults the options are only recorded; any other value builds the cached-head class."""
    plain = ImageClassifier(**PLAIN)
    assert type(plain) is ImageClassifier and not hasattr(plain, "_features")
    assert type(ImageClassifier(**{**PLAIN, "tta": True})) is CachedHeadClassifier
    assert type(ImageClassifier(**GENERAL)) is ImageClassifier
    with pytest.raises(TypeError, match="unexpected keyword arguments: cache_feature"):
        ImageClassifier(**GENERAL, cache_feature=True)
