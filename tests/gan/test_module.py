"""Manual optimisation: each optimiser updates only its own network; n_critic; EMA; bad configuration."""

from __future__ import annotations

import functools

import lightning as L
import pytest
import torch

from zoo.errors import ZooError
from zoo.gan.data import GANDataModule
from zoo.gan.evaluator import build_inception
from zoo.gan.module import DCGAN

STEPS: list[tuple[str, set[str]]] = []
MODULE: list[DCGAN] = []


class SpyAdam(torch.optim.Adam):
    """Adam that records which of the module's parameters each step() changed."""

    def step(self, closure=None):  # noqa: ANN001
        (m,) = MODULE
        before = {n: p.detach().clone() for n, p in m.named_parameters()}
        out = super().step(closure)
        changed = {n for n, p in m.named_parameters() if not torch.equal(before[n], p.detach())}
        owner = "d" if self.param_groups[0]["params"][0] is next(m.discriminator.parameters()) else "g"
        STEPS.append((owner, changed))
        return out


def tiny_module(**kw) -> DCGAN:
    args = dict(arch="dcgan_small", nz=8, width=8, channels=1, image_size=32, num_classes=10,
                class_names=[str(i) for i in range(10)], eval_train_steps=3,
                optimizer=functools.partial(SpyAdam, lr=2e-4, betas=(0.5, 0.999)))
    args.update(kw)
    return DCGAN(**args)


def fit(module: DCGAN, max_steps: int, tmp_path) -> None:
    STEPS.clear()
    MODULE[:] = [module]
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        default_root_dir=tmp_path)
    trainer.fit(module, datamodule=GANDataModule(batch_size=8))


def names(module: DCGAN, prefix: str) -> set[str]:
    return {n for n, p in module.named_parameters() if n.startswith(prefix) and p.requires_grad}


def test_each_optimiser_updates_only_its_network(tmp_path):
    m = tiny_module()
    ema_before = [p.clone() for p in m.generator_ema.parameters()]
    fit(m, max_steps=2, tmp_path=tmp_path)  # one batch: a D step then a G step
    assert [o for o, _ in STEPS] == ["d", "g"]
    assert STEPS[0][1] == names(m, "discriminator.")  # every D weight moved, nothing else
    assert STEPS[1][1] == names(m, "generator.")  # every G weight moved, D untouched
    assert not names(m, "generator_ema.")  # EMA weights are not trained by any optimiser ...
    assert any(not torch.equal(a, b) for a, b in zip(ema_before, m.generator_ema.parameters()))  # ... they follow G
    assert all(p.requires_grad for p in m.discriminator.parameters())  # toggled back after the G step
    assert m.judge is None  # this fit has no validation: no evaluator to build (nor classifier to train)
    m.setup("validate")  # built for evaluation, and kept out of the checkpoint:
    assert not any(k.startswith(("judge", "_")) for k in m.state_dict())
    assert all(p is not q for p in m.parameters() for q in m.judge.evaluator.parameters())


def test_n_critic_steps(tmp_path):
    m = tiny_module(loss="wgan_gp", n_critic=2)
    fit(m, max_steps=3, tmp_path=tmp_path)  # batches 0, 1: D, D then G
    assert [o for o, _ in STEPS] == ["d", "d", "g"]
    assert not any(isinstance(x, torch.nn.BatchNorm2d) for x in m.discriminator.modules())  # GP needs no BN in D


def test_ema_update_rule():
    m = tiny_module(ema_decay=0.999)
    with torch.no_grad():
        for p in m.generator.parameters():
            p.add_(1.0)
    before = [p.clone() for p in m.generator_ema.parameters()]
    m.update_ema()  # first update: warm-up decay (1+1)/(10+1)
    d = 2 / 11
    for e, b, g in zip(m.generator_ema.parameters(), before, m.generator.parameters()):
        torch.testing.assert_close(e, d * b + (1 - d) * g)


def test_forward_and_sample_shapes():
    m = tiny_module(conditional=True).eval()
    assert m.sample(5).shape == (5, 1, 32, 32)
    assert m(torch.randn(3, 8), torch.tensor([1, 2, 3])).shape == (3, 1, 32, 32)
    assert m.fixed_z.shape == (64, 8) and m.fixed_labels.tolist()[:11] == [*range(10), 0]


@pytest.mark.parametrize("kw, msg", [
    (dict(conditional=True, num_classes=0, class_names=[]), "conditional=true needs labelled data"),
    (dict(loss="lsgan"), "unknown GAN loss"),
    (dict(arch="stylegan"), "unknown GAN arch"),
    (dict(image_size=48), "image_size 48"),
])
def test_bad_configuration(kw, msg):
    with pytest.raises(ZooError, match=msg):
        tiny_module(**kw)


def test_training_without_an_optimizer_is_the_zoo_error():
    from zoo.errors import NoOptimizerError

    with pytest.raises(NoOptimizerError, match="DCGAN was built without an optimizer"):
        tiny_module(optimizer=None).configure_optimizers()


def test_checkpoint_is_plain(tmp_path):
    m = tiny_module()
    sd = m.state_dict()
    assert {"fixed_z", "ema_updates"} <= set(sd) and any(k.startswith("generator_ema.") for k in sd)
    assert not any(k.startswith("_") for k in sd)  # evaluator and metrics stay out of checkpoints


def test_bf16_mixed_on_cpu(tmp_path):
    m = tiny_module(loss="hinge", spectral_norm=True)
    STEPS.clear()
    MODULE[:] = [m]
    trainer = L.Trainer(max_steps=2, accelerator="cpu", precision="bf16-mixed", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, default_root_dir=tmp_path)
    trainer.fit(m, datamodule=GANDataModule(batch_size=8))
    assert [o for o, _ in STEPS] == ["d", "g"]
    assert all(torch.isfinite(p).all() for p in m.parameters())


def test_inception_fid_unavailable_is_one_clear_line():
    from torchmetrics.utilities.imports import _TORCH_FIDELITY_AVAILABLE

    if _TORCH_FIDELITY_AVAILABLE:
        pytest.skip("torch-fidelity installed here: FID may work")
    with pytest.raises(ZooError, match="inception_fid=true needs the torch-fidelity package"):
        build_inception()
