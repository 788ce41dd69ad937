"""Generator / discriminator shapes, DCGAN initialisation, conditioning and spectral norm."""

import pytest
import torch

from zoo.gan.models import build, list_models
from zoo.gan.models.dcgan import Discriminator, Generator


@pytest.mark.parametrize("size", [32, 64])
@pytest.mark.parametrize("channels", [1, 3])
def test_shapes(size, channels):
    g, d = build("dcgan_small", nz=16, channels=channels, image_size=size, width=8)
    x = g(torch.randn(5, 16))
    assert x.shape == (5, channels, size, size)
    assert x.min() >= -1 and x.max() <= 1  # tanh output, the data's range
    assert d(x).shape == (5,)


def test_conditional_shapes_and_labels_matter():
    g = Generator(nz=8, ngf=8, channels=1, image_size=32, num_classes=4).eval()
    d = Discriminator(ndf=8, channels=1, image_size=32, num_classes=4, spectral=True)
    z = torch.randn(3, 8)
    a, b = g(z, torch.tensor([0, 1, 2])), g(z, torch.tensor([3, 3, 3]))
    assert a.shape == (3, 1, 32, 32) and not torch.allclose(a, b)
    assert d(a, torch.tensor([0, 1, 2])).shape == (3,)
    with pytest.raises(ValueError):
        g(z)


def test_dcgan_init_statistics():
    g, d = build("dcgan", nz=100, channels=3, image_size=64)
    w = torch.cat([m.weight.flatten() for m in g.modules() if isinstance(m, torch.nn.ConvTranspose2d)])
    assert abs(w.std().item() - 0.02) < 0.002 and abs(w.mean().item()) < 0.002
    bn = torch.cat([m.weight for m in d.modules() if isinstance(m, torch.nn.BatchNorm2d)])
    assert abs(bn.mean().item() - 1.0) < 0.01


def test_spectral_norm_bounds_layers():
    d = Discriminator(ndf=8, channels=1, image_size=32, norm="none", spectral=True)
    for _ in range(20):  # power iteration converges over training-mode forwards
        d(torch.randn(4, 1, 32, 32))
    conv = d.features[0]
    sigma = torch.linalg.matrix_norm(conv.weight.flatten(1), ord=2)
    assert sigma.item() == pytest.approx(1.0, abs=0.05)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in d.modules())


def test_registry():
    assert list_models() == ["dcgan", "dcgan_small"]
    with pytest.raises(ValueError):
        Generator(image_size=48)
