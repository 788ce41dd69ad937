"""zoo.optim: weight-decay groups by name and layer type (the same under FSDP's flattened parameters), schedules,
configure."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from zoo.errors import NoOptimizerError
from zoo.kit import optim


class ScaleNorm(nn.Module):
    """A norm layer torch does not know (as HF's T5LayerNorm or LlamaRMSNorm): found by its class name."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.features = nn.Sequential(nn.Conv2d(8, 8, 3, bias=False), nn.BatchNorm2d(8))  # BN named "features.1"
        self.rnn = nn.LSTM(8, 8)
        self.mix = nn.Linear(8, 8)
        self.gamma = nn.Parameter(torch.ones(8))  # layer scale (timm's ConvNeXt, CaiT)
        self.post = ScaleNorm(8)
        self.LayerNorm = nn.LayerNorm(8)
        self.head = nn.Linear(8, 4)


DECAYED = {"conv.weight", "features.0.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "mix.weight", "head.weight"}


def names_of(model: nn.Module, groups: list[dict]) -> tuple[set[str], set[str]]:
    """(decayed names, undecayed names) of `groups`, named through `model`."""
    name = {id(p): optim.canonical_name(n) for n, p in model.named_parameters()}
    decay = {name[id(p)] for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    skip = {name[id(p)] for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    return decay, skip


class FSDPWrapper(nn.Module):
    """What FSDP with use_orig_params leaves: the original module under `_fsdp_wrapped_module`, names and module
    types kept, every parameter a flat 1-d shard."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self._fsdp_wrapped_module = module
        for p in module.parameters():
            p.data = p.data.reshape(-1)


def test_biases_norms_and_layer_scale_get_no_decay():
    model = Block()
    decay, skip = names_of(model, optim.param_groups(model, weight_decay=0.1))
    assert decay == DECAYED
    assert skip == {n for n, _ in model.named_parameters()} - DECAYED
    assert {"features.1.weight", "post.weight", "LayerNorm.weight", "rnn.bias_ih_l0", "gamma"} <= skip


def test_groups_do_not_change_when_fsdp_flattens_the_parameters():
    model = Block()
    names_before = optim.no_decay_names(model)  # taken before wrapping, as a task's __init__ does
    before = names_of(model, optim.param_groups(model, weight_decay=0.1))

    wrapped = FSDPWrapper(model)
    assert all(p.ndim == 1 for p in wrapped.parameters())  # an ndim rule would now skip decay for every weight
    assert all(n.startswith("_fsdp_wrapped_module.") for n, _ in wrapped.named_parameters())
    assert names_of(model, optim.param_groups(wrapped, weight_decay=0.1)) == before
    pairs = optim.param_groups(list(wrapped.named_parameters()), weight_decay=0.1, no_decay=names_before)
    assert names_of(model, pairs) == before
    assert optim.no_decay_names(wrapped) == names_before


def test_named_pairs_alone_are_split_by_name():
    """Callers that pass (name, parameter) pairs without no_decay: biases and owners named like a norm."""
    model = nn.ModuleDict({"encoder": nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 1),
                           "ln_f": nn.LayerNorm(16), "classifier": nn.Linear(16, 2)})
    decay, skip = names_of(model, optim.param_groups(model.named_parameters(), weight_decay=0.1))
    assert decay == {"encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.0.self_attn.out_proj.weight",
                     "encoder.layers.0.linear1.weight", "encoder.layers.0.linear2.weight", "classifier.weight"}
    assert {"encoder.layers.0.norm1.weight", "ln_f.weight", "classifier.bias"} <= skip


def test_timm_resnet_groups_match_the_shape_rule_before_wrapping():
    """On unwrapped weights the name/type rule keeps what the old `ndim <= 1` rule decided for the vision task."""
    import timm

    model = timm.create_model("resnet10t", num_classes=3)
    by_shape = {n for n, p in model.named_parameters() if p.ndim <= 1}
    assert optim.no_decay_names(model) == by_shape


def test_frozen_parameters_lr_scale_and_extra_keys():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2, bias=False))
    model[0].weight.requires_grad_(False)
    groups = optim.param_groups(model, weight_decay=0.1, lr_scale=0.5, backbone=True)
    assert [(len(g["params"]), g["weight_decay"]) for g in groups] == [(1, 0.1), (1, 0.0)]
    assert all(g["lr_scale"] == 0.5 and g["backbone"] for g in groups)
    only_bias_free = optim.param_groups(model[1], weight_decay=0.1)
    assert len(only_bias_free) == 1  # empty groups are dropped


class Task:
    """The parts of a LightningModule that zoo.kit.optim.configure reads."""

    def __init__(self, optimizer, scheduler=None, steps: int = 10) -> None:
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.trainer = type("T", (), {"estimated_stepping_batches": steps})()


def test_configure_scales_learning_rates_with_and_without_a_schedule():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    groups = lambda: optim.param_groups(model[0], 0.1) + optim.param_groups(model[1], 0.1, lr_scale=0.1)  # noqa: E731
    adamw = lambda g: torch.optim.AdamW(g, lr=1.0)  # noqa: E731
    plain = optim.configure(Task(adamw), groups())
    assert [g["lr"] for g in plain.param_groups] == pytest.approx([1.0, 1.0, 0.1, 0.1])
    constant = lambda opt, total_steps: optim.warmup_schedule(opt, total_steps, kind="constant")  # noqa: E731
    out = optim.configure(Task(adamw, constant), groups())
    assert out["lr_scheduler"]["interval"] == "step"
    assert [g["lr"] for g in out["optimizer"].param_groups] == pytest.approx([1.0, 1.0, 0.1, 0.1])
    with pytest.raises(NoOptimizerError, match="built without an optimizer"):
        optim.configure(Task(None), groups())


def test_warmup_then_cosine():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = optim.warmup_schedule(opt, total_steps=10, warmup_steps=2, min_lr_ratio=0.1)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[:3] == pytest.approx([0.5, 1.0, 1.0])
    assert lrs == sorted(lrs[:2]) + sorted(lrs[2:], reverse=True) and lrs[-1] > 0.1


def _fsdp_rank(rank: int, world: int, port: int) -> None:
    import os

    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.Linear(288, 16),
                              nn.LayerNorm(16), nn.Linear(16, 4))
        expected = names_of(model, optim.param_groups(model, weight_decay=0.1))
        wrapped = FSDP(model, use_orig_params=True, device_id=torch.device("cpu"),
                       auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))
        assert all(p.ndim == 1 for p in wrapped.parameters())  # flat shards
        assert names_of(wrapped, optim.param_groups(wrapped, weight_decay=0.1)) == expected
        assert expected[0] == {"0.weight", "3.weight", "5.weight"}
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_groups_under_real_fsdp_on_two_cpu_ranks():
    """torch's FSDP (use_orig_params, as Lightning sets it) with gloo: every parameter becomes a 1-d shard; the
    groups are the ones of the unwrapped model."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_fsdp_rank, args=(2, port), nprocs=2)


CUDA, CPU = torch.device("cuda", 0), torch.device("cpu")


def test_fused_on_cuda_foreach_elsewhere_and_the_config_wins():
    import functools

    adam = functools.partial(torch.optim.Adam, lr=1e-3)
    assert optim.step_kwargs(adam, CUDA) == {"fused": True}
    assert optim.step_kwargs(adam, CPU) == {"foreach": True}
    assert optim.step_kwargs(functools.partial(torch.optim.Adam, fused=False), CUDA) == {}  # the user's choice
    assert optim.step_kwargs(functools.partial(torch.optim.AdamW, foreach=False), CPU) == {}

    def plain(params, lr=1e-3):  # noqa: ANN001, ANN202 - an optimiser factory without the keywords
        return torch.optim.SGD(params, lr=lr)

    assert optim.step_kwargs(plain, CUDA) == {}


def test_no_fused_optimiser_where_lightning_clips_under_mixed_precision():
    """A fused optimiser unscales inside its step; Lightning's mixed precision then refuses to clip gradients."""
    import functools
    from types import SimpleNamespace

    adam = functools.partial(torch.optim.AdamW, lr=1e-3)
    assert optim.step_kwargs(adam, CUDA, amp_clipping=True) == {"foreach": True}
    assert optim.step_kwargs(functools.partial(torch.optim.AdamW, fused=True), CUDA, amp_clipping=True) == \
        {"fused": False}  # even where the config asks for it
    clipping = SimpleNamespace(gradient_clip_val=1.0, precision="bf16-mixed")
    assert optim.clips_under_amp(clipping)
    assert not optim.clips_under_amp(SimpleNamespace(gradient_clip_val=1.0, precision="32-true"))
    assert not optim.clips_under_amp(SimpleNamespace(gradient_clip_val=None, precision="16-mixed"))
    assert not optim.clips_under_amp(None)


def test_an_optimiser_that_refuses_the_keyword_is_built_as_configured():
    import functools

    params = [nn.Parameter(torch.zeros(2))]

    def cpu_fused_only(params, lr=0.1, fused=None):  # noqa: ANN001, ANN202 - as torch's Adagrad on CUDA tensors
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported "
                               "devices: ['cpu']")
        return torch.optim.Adagrad(params, lr=lr)

    assert not optim.build_optimizer(cpu_fused_only, params, CUDA).defaults.get("fused")
    with pytest.raises(ValueError, match="Invalid learning rate"):  # other errors are not swallowed
        optim.build_optimizer(functools.partial(torch.optim.Adam, lr=-1.0), params, CPU)


def test_configure_builds_every_tasks_optimiser_for_its_device():
    """configure (vision, nlp, speech) builds through build_optimizer: foreach on this CPU, same numbers as a plain
    optimiser after a step."""
    import functools

    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Linear(4, 2)
            self.optimizer_factory = functools.partial(torch.optim.AdamW, lr=1e-2)
            self.scheduler_factory = None

    torch.manual_seed(0)
    module = Module()
    twin = nn.Linear(4, 2)
    twin.load_state_dict(module.net.state_dict())
    opt = optim.configure(module, module.net.parameters())
    assert opt.defaults["foreach"] is True
    plain = torch.optim.AdamW(twin.parameters(), lr=1e-2)
    x = torch.randn(8, 4)
    for o, net in ((opt, module.net), (plain, twin)):
        net(x).square().mean().backward()
        o.step()
    for a, b in zip(module.net.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b)
