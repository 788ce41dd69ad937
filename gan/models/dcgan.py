"""DCGAN generator and discriminator (Radford et al. 2015, https://arxiv.org/abs/1511.06434) for 32x32 / 64x64.

Extras the zoo's GAN task needs: any channel count, optional class conditioning (label embedding concatenated to z
in G; projection discriminator, Miyato & Koyama 2018, https://arxiv.org/abs/1802.05637, in D) and optional spectral
normalisation in D (Miyato et al. 2018, https://arxiv.org/abs/1802.05957).

Activations are out of place: an in-place one on a tensor autograd keeps costs two more dispatched ops per call
(detach) for the same kernel, and a small GAN step on a GPU is bound by dispatch (gan/speed.py).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.parametrizations import spectral_norm

SIZES = (32, 64)


def _check_size(image_size: int) -> int:
    if image_size not in SIZES:
        raise ValueError(f"image_size {image_size} not supported; use one of {SIZES}")
    return int(math.log2(image_size)) - 2  # number of x2 stages between 4x4 and the image: 3 (32) or 4 (64)


class Generator(nn.Module):
    """z (B, nz) [+ labels (B,)] -> image (B, C, H, W) in [-1, 1]."""

    def __init__(self, nz: int = 100, ngf: int = 64, channels: int = 1, image_size: int = 32,
                 num_classes: int = 0, embed_dim: int = 32) -> None:
        super().__init__()
        stages = _check_size(image_size)
        self.nz, self.num_classes = nz, num_classes
        self.embed = nn.Embedding(num_classes, embed_dim) if num_classes else None
        width = ngf * 2 ** (stages - 1)  # 32x32: 4*ngf at 4x4, halving at each x2 stage
        layers: list[nn.Module] = [
            nn.ConvTranspose2d(nz + (embed_dim if num_classes else 0), width, 4, 1, 0, bias=False),  # (B, w, 4, 4)
            nn.BatchNorm2d(width), nn.ReLU(),
        ]
        for _ in range(stages - 1):
            layers += [nn.ConvTranspose2d(width, width // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(width // 2),
                       nn.ReLU()]
            width //= 2
        layers += [nn.ConvTranspose2d(width, channels, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.embed is not None:
            if labels is None:
                raise ValueError("conditional generator needs labels")
            z = torch.cat([z, self.embed(labels)], dim=1)
        return self.net(z.view(*z.shape, 1, 1))  # one view op, not two


class Discriminator(nn.Module):
    """image (B, C, H, W) [+ labels (B,)] -> one logit / critic value per image (B,).

    norm: "batch" (DCGAN), or "none" (required by the WGAN-GP penalty, which is per-sample; also the usual choice
    with spectral normalisation).
    """

    def __init__(self, ndf: int = 64, channels: int = 1, image_size: int = 32, num_classes: int = 0,
                 norm: str = "batch", spectral: bool = False) -> None:
        super().__init__()
        if norm not in ("batch", "none"):
            raise ValueError(f"norm {norm!r}: use batch or none")
        stages = _check_size(image_size)
        sn = spectral_norm if spectral else (lambda m: m)
        layers: list[nn.Module] = [sn(nn.Conv2d(channels, ndf, 4, 2, 1)), nn.LeakyReLU(0.2)]  # no norm on input
        width = ndf
        for _ in range(stages - 1):
            layers.append(sn(nn.Conv2d(width, width * 2, 4, 2, 1, bias=norm == "none")))
            if norm == "batch":
                layers.append(nn.BatchNorm2d(width * 2))
            layers.append(nn.LeakyReLU(0.2))
            width *= 2
        self.features = nn.Sequential(*layers)  # (B, width, 4, 4)
        self.head = sn(nn.Conv2d(width, 1, 4, 1, 0))
        self.embed = sn(nn.Embedding(num_classes, width)) if num_classes else None

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        h = self.features(x)
        out = self.head(h).flatten()  # (B,)
        if self.embed is not None:
            if labels is None:
                raise ValueError("conditional discriminator needs labels")
            out = out + (self.embed(labels) * h.sum(dim=(2, 3))).sum(dim=1)  # projection term <e_y, phi(x)>
        return out


@torch.no_grad()
def dcgan_init(module: nn.Module) -> None:
    """DCGAN initialisation: conv weights ~ N(0, 0.02), BatchNorm scale ~ N(1, 0.02), biases 0."""
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Embedding, nn.Linear)):
            # with spectral norm the raw weight lives in parametrizations.weight.original
            weight = m.parametrizations.weight.original if hasattr(m, "parametrizations") else m.weight
            nn.init.normal_(weight, 0.0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.normal_(m.weight, 1.0, 0.02)
            nn.init.zeros_(m.bias)
