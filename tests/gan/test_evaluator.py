"""Evaluation classifiers: a zoo vision checkpoint (timm) and the built-in cached CNN; mismatches are one line."""

from __future__ import annotations

import pytest
import torch

from zoo.errors import ZooError
from zoo.gan.evaluator import builtin_evaluator, cache_path, load_classifier_checkpoint

DIGITS = [str(i) for i in range(10)]


def vision_ckpt(path, num_classes=10, in_chans=1, class_names=DIGITS):
    """A checkpoint shaped like task=vision/resnet's: timm model under 'model.', plain hparams."""
    import timm

    net = timm.create_model("test_resnet", pretrained=False, num_classes=num_classes, in_chans=in_chans)
    hp = {"arch": "test_resnet", "num_classes": num_classes, "in_chans": in_chans, "image_size": 32,
          "mean": [0.5] * in_chans, "std": [0.25] * in_chans, "class_names": class_names}
    torch.save({"state_dict": {f"model.{k}": v for k, v in net.state_dict().items()}, "hyper_parameters": hp}, path)
    return path, net


def test_vision_checkpoint_features_and_logits(tmp_path):
    path, net = vision_ckpt(tmp_path / "cls.ckpt")
    ev = load_classifier_checkpoint(str(path), channels=1, num_classes=10, class_names=DIGITS)
    x = torch.rand(4, 1, 32, 32) * 2 - 1
    feats, logits = ev(x)
    assert feats.shape == (4, ev.num_features) and logits.shape == (4, 10)
    with torch.no_grad():  # same logits as the original network on its own normalisation
        torch.testing.assert_close(logits, net.eval()(((x + 1) / 2 - 0.5) / 0.25))


@pytest.mark.parametrize("kw, channels, msg", [
    (dict(num_classes=5, class_names=list("abcde")), 1, "predicts 5 classes but the GAN data has 10"),
    (dict(class_names=list("abcdefghij")), 1, "knows classes"),
    (dict(in_chans=1), 3, "takes 1-channel images but the GAN data has 3"),
])
def test_mismatched_classifier_is_refused(tmp_path, kw, channels, msg):
    path, _ = vision_ckpt(tmp_path / "cls.ckpt", **kw)
    with pytest.raises(ZooError, match=msg):
        load_classifier_checkpoint(str(path), channels=channels, num_classes=10, class_names=DIGITS)


def test_missing_or_foreign_checkpoint(tmp_path):
    with pytest.raises(ZooError, match="not found"):
        load_classifier_checkpoint(str(tmp_path / "nope.ckpt"), 1, 10)
    torch.save({"state_dict": {"generator.w": torch.zeros(1)}, "hyper_parameters": {}}, tmp_path / "gan.ckpt")
    with pytest.raises(ZooError, match="not a timm classifier"):
        load_classifier_checkpoint(str(tmp_path / "gan.ckpt"), 1, 10)


def test_corrupt_classifier_checkpoint_is_one_line(tmp_path):
    (tmp_path / "bad.ckpt").write_bytes(b"\x80\x02 not a checkpoint" * 10)
    with pytest.raises(ZooError, match="bad.ckpt") as e:  # zoo.checkpoint's one line, whatever its wording
        load_classifier_checkpoint(str(tmp_path / "bad.ckpt"), 1, 10)
    assert "\n" not in str(e.value)


def test_builtin_classifier_is_cached(gan_cache):
    from zoo.gan.data import GANDataModule

    dm = GANDataModule(batch_size=32)
    dm.setup()
    a = builtin_evaluator(dm.cache_key(), dm.train_set, 1, 10, max_steps=3)
    assert len(list(gan_cache.glob("gan/classifier-*.pt"))) >= 1
    b = builtin_evaluator(dm.cache_key(), None, 1, 10, max_steps=3)  # from the cache: no data needed
    x = torch.rand(2, 1, 32, 32)
    torch.testing.assert_close(a(x)[0], b(x)[0])
    rand = builtin_evaluator("x", None, 3, 0)  # unlabelled data: random features, no logits
    assert rand(torch.rand(2, 3, 32, 32))[1] is None


def test_unreadable_cache_entry_is_rebuilt(gan_cache, caplog):
    """The cached classifier is ours, not the user's: a broken file (a killed writer) is trained again, with a
    warning, instead of failing every later run."""
    import logging

    from zoo.gan.data import GANDataModule

    dm = GANDataModule(batch_size=32, seed=5)
    dm.setup()
    builtin_evaluator(dm.cache_key(), dm.train_set, 1, 10, max_steps=2)
    entry = cache_path(dm.cache_key(), 10, max_steps=2)
    entry.write_bytes(b"broken")
    with caplog.at_level(logging.WARNING, logger="zoo.gan.evaluator"):
        net = builtin_evaluator(dm.cache_key(), dm.train_set, 1, 10, max_steps=2)
    assert "unreadable" in caplog.text and net(torch.rand(2, 1, 32, 32))[1].shape == (2, 10)
    torch.load(entry, weights_only=True)  # rewritten

