"""gan/speed.py and the loaders: fused/foreach optimisers, the foreach EMA, compile_mode plumbing, GPU loaders.

No GPU here: the CUDA choices are checked through the functions that make them and stand-in trainers.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from gan.data import GANDataModule, resolve_workers
from gan.module import DCGAN
from gan.speed import build_optimizer, ema_update_, optimizer_kwargs
from zoo.errors import ZooError
from zoo.testing import compose

CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


def tiny(**kw) -> DCGAN:
    args = dict(arch="dcgan_small", nz=8, width=8, num_classes=10, class_names=[str(i) for i in range(10)],
                eval_train_steps=3, optimizer=functools.partial(torch.optim.Adam, lr=2e-4, betas=(0.5, 0.999)))
    return DCGAN(**{**args, **kw})


def test_fused_on_cuda_foreach_elsewhere_and_the_config_wins():
    adam = functools.partial(torch.optim.Adam, lr=1e-3)
    assert optimizer_kwargs(adam, CUDA) == {"fused": True}
    assert optimizer_kwargs(adam, CPU) == {"foreach": True}
    assert optimizer_kwargs(functools.partial(torch.optim.Adam, fused=False), CUDA) == {}  # the user's choice
    assert optimizer_kwargs(functools.partial(torch.optim.AdamW, foreach=False), CPU) == {}

    def plain(params, lr=1e-3):  # noqa: ANN001, ANN202 - an optimiser factory without the keywords
        return torch.optim.SGD(params, lr=lr)

    assert optimizer_kwargs(plain, CUDA) == {}


def test_an_optimiser_that_refuses_the_keyword_is_built_as_configured():
    params = [nn.Parameter(torch.zeros(2))]

    def cpu_fused_only(params, lr=0.1, fused=None):  # noqa: ANN001, ANN202 - as torch's Adagrad on CUDA tensors
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported "
                               "devices: ['cpu']")
        return torch.optim.Adagrad(params, lr=lr)

    assert not build_optimizer(cpu_fused_only, params, CUDA).defaults.get("fused")
    with pytest.raises(ValueError, match="Invalid learning rate"):  # other errors are not swallowed
        build_optimizer(functools.partial(torch.optim.Adam, lr=-1.0), params, CPU)


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


def test_compile_mode_plumbing(monkeypatch):
    cfg = compose(["task=gan/dcgan", "task.module.compile_mode=reduce-overhead"])
    assert cfg.task.module.compile_mode == "reduce-overhead"
    calls = []
    monkeypatch.setattr(nn.Module, "compile", lambda self, **kw: calls.append((type(self).__name__, kw)))
    m = tiny(compile_mode="reduce-overhead")
    m.judge = object()  # setup() builds the evaluator only when missing
    m._trainer = SimpleNamespace(datamodule=None)
    m.setup("fit")
    m.setup("fit")  # once per module
    assert calls == [("Generator", {"mode": "reduce-overhead"}), ("Discriminator", {"mode": "reduce-overhead"})]
    assert m._compiled == ["generator", "discriminator"]
    calls.clear()
    eager = tiny()
    eager.judge, eager._trainer = object(), SimpleNamespace(datamodule=None)
    eager.setup("fit")
    assert calls == [] and tiny().hparams.compile_mode is None  # the default stays eager


@pytest.mark.parametrize("kw, msg", [
    (dict(compile_mode="fast"), "compile_mode='fast'"),
    (dict(compile_mode="default", loss="wgan_gp"), "no double backward"),
])
def test_bad_compile_mode(kw, msg):
    with pytest.raises(ZooError, match=msg):
        tiny(**kw)


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
