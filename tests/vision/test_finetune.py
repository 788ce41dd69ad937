"""Fine-tuning strategies change exactly the parameters they should; pretrained weights load from files and
zoo checkpoints (different class count); bf16-mixed runs on CPU."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from zoo.errors import ZooError
from zoo.kit.optim import warmup_schedule
from zoo.vision.module import ImageClassifier

ARCH = "resnet10t"  # a tiny timm ResNet: same code paths as resnet18, a fraction of the time


def tiny_module(**kw) -> ImageClassifier:
    args = dict(arch=ARCH, num_classes=4, in_chans=3, image_size=16, pretrained=False, weight_decay=0.0,
                log_images=0, optimizer=lambda groups: torch.optim.AdamW(groups, lr=1e-2),
                scheduler=lambda opt, total_steps: warmup_schedule(opt, total_steps, kind="constant"))
    args.update(kw)
    return ImageClassifier(**args)


def loaders(n: int = 32, size: int = 16) -> tuple[DataLoader, DataLoader]:
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(n, 3, size, size, generator=g), torch.randint(0, 4, (n,), generator=g))
    return DataLoader(ds, batch_size=8, shuffle=True), DataLoader(ds, batch_size=8)


def snapshot(module: ImageClassifier) -> tuple[dict, dict]:
    backbone, head = {}, {}
    for name, t in module.model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        (head if name.startswith(module.heads) else backbone)[name] = t.clone()
    return backbone, head


def changed(before: dict, after: dict) -> set[str]:
    return {k for k in before if not torch.equal(before[k], after[k])}


class EpochSnapshots(pl.Callback):
    def __init__(self) -> None:
        self.states: list[tuple[dict, dict]] = []

    def on_train_epoch_end(self, trainer, module) -> None:
        self.states.append(snapshot(module))


def fit(module: ImageClassifier, epochs: int) -> EpochSnapshots:
    snaps = EpochSnapshots()
    train, val = loaders()
    trainer = pl.Trainer(accelerator="cpu", max_epochs=epochs, limit_train_batches=2, limit_val_batches=1,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, callbacks=[snaps])
    trainer.fit(module, train, val)
    return snaps


def test_full_finetune_trains_everything():
    module = tiny_module(finetune="full")
    backbone0, head0 = snapshot(module)
    (backbone1, head1), = fit(module, 1).states
    assert changed(head0, head1) == set(head0)
    assert changed(backbone0, backbone1) == set(backbone0)


def test_linear_probe_changes_only_the_head():
    module = tiny_module(finetune="linear_probe")
    backbone0, head0 = snapshot(module)
    (backbone1, head1), = fit(module, 1).states
    assert changed(head0, head1) == set(head0)
    assert changed(backbone0, backbone1) == set()  # weights and BatchNorm running statistics


@pytest.mark.parametrize("schedule", ["constant", "cosine", None])
def test_gradual_freezes_then_unfreezes_at_the_given_epoch(schedule):
    scheduler = schedule and (lambda opt, total_steps: warmup_schedule(opt, total_steps, 1, kind=schedule))
    module = tiny_module(finetune="gradual", unfreeze_epoch=1, backbone_lr_scale=0.1, scheduler=scheduler)
    backbone0, head0 = snapshot(module)
    (b1, h1), (b2, h2) = fit(module, 2).states
    assert changed(head0, h1) == set(head0)
    assert changed(backbone0, b1) == set()  # epoch 0: frozen (lr held at zero, BN statistics fixed)
    assert changed(b1, b2) == set(b1)  # epoch 1: open, from its first step
    # every parameter keeps requires_grad, so DDP's buckets cover the backbone after unfreezing
    assert all(p.requires_grad for p in module.parameters())


class SaveAt(pl.Callback):
    """Saves a checkpoint after `batch` of the first epoch: mid-epoch, as SIGTERM or every_n_train_steps would."""

    def __init__(self, path, batch: int) -> None:
        self.path, self.batch = path, batch

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.current_epoch == 0 and batch_idx == self.batch:
            trainer.save_checkpoint(self.path)


def test_gradual_stays_frozen_after_a_mid_epoch_resume(tmp_path):
    """Lightning skips on_train_epoch_start when it resumes mid-epoch: the backbone (weights and BatchNorm
    statistics) must stay frozen for the rest of that epoch all the same, then open."""
    ckpt = tmp_path / "mid.ckpt"
    train, val = loaders()
    kw = dict(accelerator="cpu", limit_train_batches=4, limit_val_batches=1, logger=False,
              enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
              num_sanity_val_steps=0)
    first = tiny_module(finetune="gradual", unfreeze_epoch=1)
    pl.Trainer(max_steps=2, callbacks=[SaveAt(ckpt, batch=1)], **kw).fit(first, train, val)
    saved = torch.load(ckpt, weights_only=True)
    assert saved["global_step"] == 2 and saved["epoch"] == 0

    module = tiny_module(finetune="gradual", unfreeze_epoch=1)
    snaps = EpochSnapshots()
    pl.Trainer(max_epochs=2, callbacks=[snaps], **kw).fit(module, train, val, ckpt_path=ckpt)
    module.load_state_dict(saved["state_dict"])  # the weights at the checkpoint, to compare against
    at_ckpt, head_at_ckpt = snapshot(module)
    (b0, h0), (b1, _) = snaps.states
    assert changed(head_at_ckpt, h0) == set(head_at_ckpt)  # the head trained in the rest of epoch 0
    assert changed(at_ckpt, b0) == set()  # the backbone did not, BatchNorm statistics included
    assert changed(b0, b1) == set(b0)  # and opened in epoch 1
    assert module.trainer.global_step == 8


def test_discriminative_learning_rates():
    module = tiny_module(finetune="full", backbone_lr_scale=0.1)
    fit(module, 1)
    lrs = sorted({round(g["lr"], 6) for g in module.trainer.optimizers[0].param_groups})
    assert lrs == [1e-3, 1e-2]


def test_bf16_mixed_on_cpu_autocasts_the_forward():
    # 32 px, not 16: at 16 px layer4's stride-2 3x3 conv sees a 1x1 map, and torch 2.14.1's bf16 CPU conv backward
    # then sporadically returns weight gradients of 1e7-1e31 (true max ~3e-4) in a fresh process: reproduced in plain
    # torch without Lightning or the zoo (timm resnet10t, torch.autocast("cpu", bfloat16), AdamW; see docs/vision.md).
    pl.seed_everything(0)
    module = tiny_module(image_size=32, optimizer=lambda groups: torch.optim.AdamW(groups, lr=1e-3))
    dtypes = []
    module.model.register_forward_hook(lambda m, i, out: dtypes.append(out.dtype))
    train, val = loaders(size=32)
    trainer = pl.Trainer(accelerator="cpu", precision="bf16-mixed", max_steps=2, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(module, train, val)
    assert dtypes and dtypes[0] == torch.bfloat16
    bad = [n for n, p in module.named_parameters() if not torch.isfinite(p).all()]
    assert not bad, bad


def test_bf16_on_cpu_below_32_px_warns(caplog):
    module = tiny_module(image_size=16)
    train, _ = loaders()
    trainer = pl.Trainer(accelerator="cpu", precision="bf16-mixed", max_steps=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    with caplog.at_level("WARNING", logger="zoo.vision.module"):
        trainer.fit(module, train)
    assert any("image_size>=32" in r.getMessage() for r in caplog.records)


def test_weights_file_in_timm_or_torchvision_naming(tmp_path):
    import timm
    from safetensors.torch import save_file

    source = timm.create_model(ARCH, num_classes=1000)
    sd = {k: v.contiguous() for k, v in source.state_dict().items()}
    save_file(sd, tmp_path / "w.safetensors")
    torch.save({"state_dict": {f"module.{k}": v for k, v in sd.items()}}, tmp_path / "w.pth")
    for name in ("w.safetensors", "w.pth"):
        module = tiny_module(pretrained=str(tmp_path / name))
        for key, value in module.model.state_dict().items():
            if not key.startswith(module.heads) and "num_batches" not in key:
                assert torch.equal(value, sd[key]), key
        assert module.model.get_classifier().out_features == 4
        assert "new head fc" in module.pretrained_report["line"]


def test_torchvision_resnet18_weights_load_into_timm(tmp_path):
    import torchvision

    tv = torchvision.models.resnet18(num_classes=1000)
    torch.save(tv.state_dict(), tmp_path / "tv.pth")
    module = tiny_module(arch="resnet18", pretrained=str(tmp_path / "tv.pth"))
    assert torch.equal(module.model.layer4[1].conv2.weight, tv.layer4[1].conv2.weight)


def test_zoo_checkpoint_with_another_class_count(tmp_path):
    trained = tiny_module(num_classes=7)
    ckpt = {"state_dict": {f"model.{k}": v for k, v in trained.model.state_dict().items()},
            "hyper_parameters": {"arch": ARCH}, "zoo": {"task": "vision/resnet"}}
    torch.save(ckpt, tmp_path / "run.ckpt")
    module = tiny_module(num_classes=3, pretrained=str(tmp_path / "run.ckpt"))
    assert torch.equal(module.model.conv1[0].weight, trained.model.conv1[0].weight)
    assert module.model.get_classifier().out_features == 3


def test_incompatible_weights_are_refused(tmp_path):
    import timm

    torch.save(timm.create_model("mobilenetv3_small_050").state_dict(), tmp_path / "other.pth")
    with pytest.raises(ZooError, match="incompatible weights"):
        tiny_module(pretrained=str(tmp_path / "other.pth"))
    ckpt = {"state_dict": {}, "hyper_parameters": {"arch": "resnet50"}, "zoo": {"task": "vision/resnet"}}
    torch.save(ckpt, tmp_path / "r50.ckpt")
    with pytest.raises(ZooError, match="holds a resnet50 model"):
        tiny_module(pretrained=str(tmp_path / "r50.ckpt"))
    with pytest.raises(ZooError, match="not found"):
        tiny_module(pretrained=str(tmp_path / "missing.pth"))


def test_pretrained_true_fails_clearly_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ZooError, match="not available"):
        tiny_module(pretrained=True)
    assert tiny_module(pretrained="auto").pretrained_report["line"].startswith("random init")


def test_unknown_backbone_is_one_line():
    with pytest.raises(ZooError, match="unknown backbone 'resnet1800'"):
        tiny_module(arch="resnet1800")


def test_training_a_module_built_without_an_optimizer_is_one_error():
    from zoo.errors import NoOptimizerError

    module = tiny_module(optimizer=None)  # as load_from_checkpoint builds it, for inference
    with pytest.raises(NoOptimizerError, match="ImageClassifier was built without an optimizer"):
        fit(module, 1)


def test_groups_are_the_same_when_fsdp_wraps_layers():
    """FSDP (use_orig_params) inserts `_fsdp_wrapped_module` into names and flattens parameters to 1-d: the head,
    the backbone and the no-decay parameters are still found by their names from before wrapping."""
    from torch import nn

    from zoo.vision import finetune as ft

    class Wrapped(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self._fsdp_wrapped_module = inner

    module = tiny_module(finetune="gradual", weight_decay=0.05)
    summary = lambda: [(g["weight_decay"], g.get("backbone", False), [id(p) for p in g["params"]])  # noqa: E731
                       for g in ft.groups(module.model, module.heads, "gradual", 0.05, 0.1, module.no_decay)]
    before = summary()
    assert [(wd, bb) for wd, bb, _ in before] == [(0.05, False), (0.0, False), (0.05, True), (0.0, True)]
    module.model.fc = Wrapped(module.model.fc)
    module.model.layer1 = Wrapped(module.model.layer1)
    for p in module.model.parameters():
        p.data = p.data.reshape(-1)
    assert summary() == before


def test_cache_features_runs_the_frozen_backbone_once_per_image():
    """A linear probe with cache_features: each image passes the backbone once (train and val apart), the head
    trains on the cached features, and the logits equal the uncached model's."""
    n = 24
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(n, 3, 16, 16, generator=g), torch.randint(0, 4, (n,), generator=g), torch.arange(n))
    module = tiny_module(finetune="linear_probe", cache_features=True)
    seen: list[int] = []
    forward_features = module.model.forward_features
    module.model.forward_features = lambda x: (seen.append(len(x)), forward_features(x))[1]
    backbone0, head0 = snapshot(module)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=3, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    trainer.fit(module, DataLoader(ds, batch_size=8, shuffle=True), DataLoader(ds, batch_size=8))
    assert sum(seen) == 2 * n  # 3 epochs of train and val: one backbone pass per image and stage
    backbone1, head1 = snapshot(module)
    assert changed(head0, head1) == set(head0) and changed(backbone0, backbone1) == set()
    module.eval()
    x, y, idx = ds[:8]
    assert torch.allclose(module._logits((x, y, idx), "val"), module.model(x), atol=1e-5)


def test_cache_features_needs_a_frozen_backbone_and_indexed_batches():
    with pytest.raises(ZooError, match="cache_features=true needs a frozen backbone .*finetune=full"):
        tiny_module(finetune="full", cache_features=True)
    module = tiny_module(finetune="linear_probe", cache_features=True)
    with pytest.raises(ZooError, match="set task.data.cache_features=true"):
        module._logits((torch.zeros(2, 3, 16, 16), torch.zeros(2)), "train")
