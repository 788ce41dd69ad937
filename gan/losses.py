"""GAN objectives as pure functions of the discriminator's raw outputs (logits / critic values), plus WGAN-GP.

- nonsat: the non-saturating loss of Goodfellow et al. 2014 (https://arxiv.org/abs/1406.2661), DCGAN's choice.
- hinge: Lim & Ye 2017 / Miyato et al. 2018 (https://arxiv.org/abs/1802.05957).
- wgan_gp: Wasserstein critic with gradient penalty, Gulrajani et al. 2017 (https://arxiv.org/abs/1704.00028).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

LOSSES = ("nonsat", "hinge", "wgan_gp")


def d_loss(kind: str, real: torch.Tensor, fake: torch.Tensor) -> torch.Tensor:
    """Discriminator loss from D(x) (B,) and D(G(z)) (B,), computed in float32 (AMP-safe)."""
    real, fake = real.float(), fake.float()
    if kind == "nonsat":
        return F.softplus(-real).mean() + F.softplus(fake).mean()  # -log sigmoid(real) - log(1 - sigmoid(fake))
    if kind == "hinge":
        return F.relu(1.0 - real).mean() + F.relu(1.0 + fake).mean()
    if kind == "wgan_gp":
        return fake.mean() - real.mean()
    raise ValueError(f"unknown GAN loss {kind!r}; use one of {LOSSES}")


def g_loss(kind: str, fake: torch.Tensor) -> torch.Tensor:
    """Generator loss from D(G(z)) (B,)."""
    fake = fake.float()
    if kind == "nonsat":
        return F.softplus(-fake).mean()  # -log sigmoid(D(G(z))): strong gradients early on
    if kind in ("hinge", "wgan_gp"):
        return -fake.mean()
    raise ValueError(f"unknown GAN loss {kind!r}; use one of {LOSSES}")


def gradient_penalty(critic: Callable[[torch.Tensor], torch.Tensor], real: torch.Tensor, fake: torch.Tensor,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """E[(||grad_x critic(x_hat)||_2 - 1)^2] on random interpolates x_hat = a*real + (1-a)*fake, a ~ U[0, 1] per sample.

    `critic` maps (B, C, H, W) -> (B,); labels, if any, are bound by the caller. The penalty is differentiable
    (create_graph) so it trains the critic. Computed in float32: squared gradient norms overflow in fp16.
    """
    real, fake = real.detach().float(), fake.detach().float()
    alpha = torch.rand(real.shape[0], 1, 1, 1, device=real.device, generator=generator)
    x_hat = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    with torch.autocast(device_type=real.device.type, enabled=False):
        out = critic(x_hat).float()
    (grad,) = torch.autograd.grad(out.sum(), x_hat, create_graph=True)
    norms = grad.flatten(1).norm(2, dim=1)  # (B,)
    return ((norms - 1.0) ** 2).mean()
