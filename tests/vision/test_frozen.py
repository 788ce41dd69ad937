"""frozen_jit: the frozen backbone's cached forwards through an optimised TorchScript graph (vision/frozen.py): the
same features as eager mode at any batch size, a graph dropped when the backbone may change, eager mode where the
graph cannot be built or would be wrong (autocast, other dtypes). A tiny random ResNet, random images."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from zoo.vision import frozen
from zoo.vision.module import ImageClassifier

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/vision/conftest.py


def module(**kw) -> ImageClassifier:
    args = dict(arch="resnet10t", num_classes=2, image_size=32, pretrained=False, finetune="linear_probe",
                cache_features=True, frozen_jit=True, log_images=0)
    args.update(kw)
    return ImageClassifier(**args).eval()


def eager(m: ImageClassifier, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return m.model.forward_head(m.model.forward_features(x), pre_logits=True)


def test_the_graph_gives_the_eager_features_at_any_batch_size():
    torch.manual_seed(0)
    m = module()
    graph = frozen.pooled_graph(m.model, torch.randn(4, 3, 32, 32))
    assert graph is not None
    for n in (1, 5, 9):  # traced on 2 images; the cached epochs' last batch is smaller than the rest
        x = torch.randn(n, 3, 32, 32)
        with torch.no_grad():
            assert torch.allclose(graph(x), eager(m, x), atol=1e-4, rtol=1e-4)


def test_the_module_caches_through_the_graph_and_drops_it_when_the_backbone_changes():
    torch.manual_seed(0)
    m = module()
    x = torch.randn(6, 3, 32, 32)
    first = m._pooled(x, [("val", i) for i in range(6)])
    assert m._graph["fn"] is not None and torch.allclose(first, eager(m, x), atol=1e-4, rtol=1e-4)
    with torch.no_grad():
        m.model.conv1[0].weight.mul_(1.5)  # the backbone moves (as after the unfreeze)
    stale = m._frozen_forward(x)
    assert not torch.allclose(stale, eager(m, x), atol=1e-3)  # the graph holds copies of the old weights
    m.drop_graph()
    assert torch.allclose(m._frozen_forward(x), eager(m, x), atol=1e-4, rtol=1e-4)


class Indexed(Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.y = torch.arange(n) % 2
        self.x = torch.randn(n, 3, 32, 32, generator=g) + self.y.view(-1, 1, 1, 1)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple:
        return self.x[i], self.y[i], i


def test_a_gradual_run_caches_through_the_graph_then_drops_it_when_the_backbone_opens(tmp_path):
    m = module(finetune="gradual", unfreeze_epoch=1, head_fit="lbfgs", l2_grid=[1e-1], l2_folds=2,
               weight_decay=0.0, optimizer=lambda groups: torch.optim.SGD(groups, lr=1e-2))
    seen: dict[int, bool] = {}

    class Watch(pl.Callback):
        def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: ImageClassifier) -> None:
            seen[trainer.current_epoch] = bool(pl_module._graph.get("fn"))

    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
                         callbacks=[Watch()], default_root_dir=tmp_path)
    trainer.fit(m, DataLoader(Indexed(8, 0), batch_size=4, shuffle=True), DataLoader(Indexed(4, 1), batch_size=4))
    assert seen == {0: True, 1: False}  # cached through the graph, then the open backbone runs eagerly
    m._graph["fn"] = object()
    m.on_load_checkpoint({})
    assert not m._graph


def test_eager_mode_where_the_graph_cannot_or_should_not_be_built(monkeypatch):
    m = module()
    x = torch.randn(3, 3, 32, 32)
    assert not frozen.usable(x.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not frozen.usable(x)

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot trace this model")

    monkeypatch.setattr(torch.jit, "trace", refuse)
    assert frozen.pooled_graph(m.model, x) is None
    out = m._frozen_forward(x)
    assert m._graph["fn"] is None and torch.equal(out, eager(m, x))  # eager, and no second try at each batch


def test_no_graph_is_traced_under_a_flop_counter_and_a_graph_that_drops_rows_is_not_used():
    """torch's FlopCounterMode is on over a run's first training step; a trace taken under it returned 2 rows for 15
    images (the first step of a resumed run, where no sanity validation had built the graph before)."""
    from torch.utils.flop_counter import FlopCounterMode

    m = module()
    x = torch.randn(5, 3, 32, 32)
    with FlopCounterMode(display=False):
        assert frozen.modes_active()
        out = m._frozen_forward(x)
    assert "fn" not in m._graph and torch.allclose(out, eager(m, x), atol=1e-4, rtol=1e-4)
    assert not frozen.modes_active()
    assert torch.allclose(m._frozen_forward(x), eager(m, x), atol=1e-4, rtol=1e-4) and m._graph["fn"] is not None
    m._graph["fn"] = lambda images: eager(m, images[:2])  # as the graph traced under the counter behaved
    assert m._frozen_forward(x).shape == (5, 512) and m._graph["fn"] is None


def test_frozen_jit_takes_true_or_false_only():
    from zoo.errors import ZooError

    with pytest.raises(ZooError, match="task.module.frozen_jit must be true or false, got 'maybe'"):
        module(frozen_jit="maybe")
