"""GAN losses and the WGAN-GP gradient penalty against hand-computed values."""

import math

import pytest
import torch

from zoo.gan.losses import d_loss, g_loss, gradient_penalty


def test_nonsat_values():
    real, fake = torch.zeros(4), torch.zeros(4)  # D undecided: sigmoid = 0.5
    assert d_loss("nonsat", real, fake).item() == pytest.approx(2 * math.log(2))
    assert g_loss("nonsat", fake).item() == pytest.approx(math.log(2))


def test_hinge_and_wgan_values():
    real, fake = torch.tensor([2.0, 0.5]), torch.tensor([-2.0, 0.0])
    # relu(1-real) = [0, .5] -> .25; relu(1+fake) = [0, 1] -> .5
    assert d_loss("hinge", real, fake).item() == pytest.approx(0.75)
    assert d_loss("wgan_gp", real, fake).item() == pytest.approx(-1.0 - 1.25)
    assert g_loss("hinge", fake).item() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        d_loss("lsgan", real, fake)


def test_gradient_penalty_linear_critic():
    # critic(x) = <w, x>: grad is w everywhere, so GP = (||w|| - 1)^2 whatever the interpolates
    w = torch.full((1, 2, 3, 3), 0.5)  # ||w|| = sqrt(18 * 0.25) = 2.1213
    gp = gradient_penalty(lambda x: (x * w).flatten(1).sum(1), torch.randn(6, 2, 3, 3), torch.randn(6, 2, 3, 3))
    assert gp.item() == pytest.approx((math.sqrt(18 * 0.25) - 1) ** 2, rel=1e-5)


def test_gradient_penalty_is_zero_for_unit_norm_and_trains_critic():
    w = torch.zeros(1, 1, 2, 2)
    w[0, 0, 0, 0] = 1.0
    gp = gradient_penalty(lambda x: (x * w).flatten(1).sum(1), torch.randn(3, 1, 2, 2), torch.randn(3, 1, 2, 2))
    assert gp.item() == pytest.approx(0.0, abs=1e-10)
    # differentiable w.r.t. the critic's parameters (create_graph): this is what trains the critic
    lin = torch.nn.Linear(4, 1)
    gp = gradient_penalty(lambda x: lin(x.flatten(1)).flatten(), torch.randn(3, 1, 2, 2), torch.randn(3, 1, 2, 2))
    gp.backward()
    assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0
