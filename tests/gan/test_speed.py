"""gan/speed.py and the loaders: fused/foreach optimisers, the foreach EMA, trainer.compile for G and D, GPU loaders.

No GPU here: the CUDA choices are checked through the functions that make them and stand-in trainers.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from zoo.errors import ZooError
from zoo.gan.data import GANDataModule, resolve_workers
from zoo.gan.module import DCGAN
from zoo.gan.speed import ema_update_
from zoo.testing import compose

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


def tiny(**kw) -> DCGAN:
    args = dict(arch="dcgan_small", nz=8, width=8, num_classes=10, class_names=[str(i) for i in range(10)],
                eval_train_steps=3, optimizer=functools.partial(torch.optim.Adam, lr=2e-4, betas=(0.5, 0.999)))
    return DCGAN(**{**args, **kw})


def test_module_builds_foreach_optimisers_on_cpu():
    opt_d, opt_g = tiny().configure_optimizers()
    assert opt_d.defaults["foreach"] is True and opt_g.defaults["foreach"] is True
    assert not opt_d.defaults.get("fused")


def test_foreach_ema_matches_the_per_parameter_rule():
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    ema = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    net(torch.randn(8, 3))  # running statistics to copy
    want = [e.detach() + 0.3 * (p.detach() - e.detach()) for e, p in zip(ema.parameters(), net.parameters())]
    ema_update_(ema, net, 0.3)
    for e, w in zip(ema.parameters(), want):
        torch.testing.assert_close(e, w)
    assert all(torch.equal(a, b) for a, b in zip(ema.buffers(), net.buffers()))


def test_ema_count_is_read_from_the_buffer_after_a_load():
    """The host keeps its own copy of ema_updates (no GPU sync per step); a loaded state dict resets it."""
    m = tiny(ema_decay=0.999)
    m.update_ema()
    assert int(m.ema_updates) == 1
    sd = m.state_dict()
    sd["ema_updates"] = torch.tensor(7)
    m.load_state_dict(sd)
    m.update_ema()
    assert int(m.ema_updates) == 8


def test_trainer_compile_compiles_g_and_d_with_the_mode(monkeypatch):
    """trainer.compile reaches the GAN's own choice of networks (G and D, not the EMA copy) with compile_mode."""
    from zoo.core.trainer import prepare_module

    calls = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: calls.append((type(self).__name__, kw)))
    prepare_module(tiny(), {"compile": True, "compile_mode": "reduce-overhead"})
    assert calls == [("Generator", {"mode": "reduce-overhead"}), ("Discriminator", {"mode": "reduce-overhead"})]
    calls.clear()
    prepare_module(tiny(), {"compile": False})
    assert calls == []  # the default stays eager


def test_compile_with_the_gradient_penalty_is_refused(monkeypatch):
    from zoo.core.trainer import prepare_module

    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: None)
    with pytest.raises(ZooError, match="no double backward"):
        prepare_module(tiny(loss="wgan_gp"), {"compile": True})


def test_the_old_compile_key_names_the_new_one():
    from zoo.core.config import check_overrides

    with pytest.raises(ZooError) as e:
        check_overrides(["task=gan/dcgan", "task.module.compile_mode=reduce-overhead"])
    assert str(e.value) == ("task.module.compile_mode has moved: use trainer.compile=true "
                            "trainer.compile_mode=reduce-overhead (torch.compile for every task)")


def test_hparams_saved_with_the_old_key_still_build_the_module():
    """Checkpoints written before the move hold compile_mode in their hparams; the module takes and drops it."""
    m = tiny(compile_mode="default")
    assert "compile_mode" not in m.hparams


def test_gpu_preset_is_gpu_sized():
    cfg = compose(["experiment=gan_gpu"])
    assert cfg.task.module.arch == "dcgan" and cfg.task.data.image_size == 64 and cfg.task.data.batch_size >= 256


def test_workers_auto(monkeypatch):
    monkeypatch.setattr("zoo.kit.loaders.usable_cores", lambda: 16)
    assert resolve_workers("auto", in_memory=True) == 0  # digits: one tensor in memory
    assert resolve_workers("auto", in_memory=False) == 15
    assert resolve_workers(3, in_memory=True) == 3
    with pytest.raises(ZooError, match="num_workers='many'"):
        resolve_workers("many", in_memory=False)


def test_loaders_pin_with_workers_on_a_cuda_trainer(tmp_path):
    dm = GANDataModule(num_workers=2, batch_size=8)
    dm.setup()
    dm.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=CUDA))
    loader = dm.train_dataloader()  # built, not iterated: no CUDA here to pin into
    assert loader.pin_memory and loader.persistent_workers and loader.prefetch_factor == 4
    dm.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=CPU))
    assert not dm.train_dataloader().pin_memory  # a CPU trainer never pins
    in_memory = GANDataModule(batch_size=8)
    in_memory.setup()
    in_memory.trainer = SimpleNamespace(strategy=SimpleNamespace(root_device=CUDA))
    loader = in_memory.val_dataloader()
    assert in_memory.num_workers == 0 and not loader.pin_memory  # would pin in the main thread: a copy per batch
