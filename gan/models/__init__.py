"""GAN architectures by name: `arch: dcgan` builds a (Generator, Discriminator) pair."""

from __future__ import annotations

from torch import nn

from zoo.gan.models.dcgan import SIZES, Discriminator, Generator, dcgan_init

# name -> default widths (ngf, ndf); `width` in the task config overrides them.
ARCHS: dict[str, tuple[int, int]] = {"dcgan": (64, 64), "dcgan_small": (32, 32)}


def list_models() -> list[str]:
    return sorted(ARCHS)


def build(arch: str, nz: int, channels: int, image_size: int, num_classes: int = 0, width: int | None = None,
          d_norm: str = "batch", spectral_norm: bool = False) -> tuple[nn.Module, nn.Module]:
    if arch not in ARCHS:
        raise KeyError(arch)
    ngf, ndf = (width, width) if width else ARCHS[arch]
    g = Generator(nz=nz, ngf=ngf, channels=channels, image_size=image_size, num_classes=num_classes)
    d = Discriminator(ndf=ndf, channels=channels, image_size=image_size, num_classes=num_classes, norm=d_norm,
                      spectral=spectral_norm)
    dcgan_init(g)
    dcgan_init(d)
    return g, d


__all__ = ["ARCHS", "SIZES", "Discriminator", "Generator", "build", "dcgan_init", "list_models"]
