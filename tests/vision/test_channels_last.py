"""trainer.channels_last converts the input batches as well as the weights: the first convolution of every step then
needs no layout conversion of its own."""

from __future__ import annotations

import torch

from zoo.core.trainer import prepare_module
from zoo.vision.module import ImageClassifier


def test_channels_last_applies_to_the_weights_and_the_input_batch():
    module = ImageClassifier(arch="resnet10t", num_classes=3, pretrained=False, image_size=16)
    images, labels = torch.randn(2, 3, 16, 16), torch.tensor([0, 1])
    assert module.on_after_batch_transfer([images, labels], 0)[0].is_contiguous()  # off: untouched
    module = prepare_module(module, {"channels_last": True})
    conv = next(m for m in module.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    x, y = module.on_after_batch_transfer([images, labels], 0)
    assert x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous() and y is labels
    assert torch.equal(x, images)  # the same values, another layout
    assert module(x).shape == (2, 3)
