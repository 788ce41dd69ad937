"""Numbers that are not numbers: a non-finite loss or weight stops a run, ranks no checkpoint, is refused on load,
and never reaches a metrics file as a bare NaN."""

from __future__ import annotations

import json
import math
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from zoo.core.callbacks import FiniteModelCheckpoint, FiniteTraining
from zoo.core.checkpoint import check_finite_weights
from zoo.core.numbers import non_finite_tensors, strict_json
from zoo.errors import ZooError


class Diverging(L.LightningModule):
    """A linear model whose loss turns NaN from step `nan_from` on; `manual`: it steps its own optimiser and returns
    nothing (a GAN's, PPO's way), so only its weights tell."""

    def __init__(self, nan_from: int = 10**9, manual: bool = False, val_nan: bool = False) -> None:
        super().__init__()
        self.net = nn.Linear(2, 1)
        self.nan_from, self.val_nan = nan_from, val_nan
        self.automatic_optimization = not manual

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor | None:
        loss = self.net(batch[0]).pow(2).mean()
        if self.global_step + 1 >= self.nan_from:
            loss = loss * float("nan")
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return None

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        loss = self.net(batch[0]).pow(2).mean()
        self.log("val/loss", loss * float("nan") if self.val_nan else loss)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def fit(tmp_path: Path, module: L.LightningModule, epochs: int = 1) -> tuple[L.Trainer, FiniteModelCheckpoint]:
    data = DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4)
    best = FiniteModelCheckpoint(dirpath=tmp_path / "checkpoints", filename="best", monitor="val/loss")
    trainer = L.Trainer(max_epochs=epochs, callbacks=[FiniteTraining(), best], logger=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(module, data, data)
    return trainer, best


@pytest.mark.parametrize("manual", [False, True], ids=["automatic", "manual-optimisation"])
@pytest.mark.parametrize("step", [3, 4], ids=["mid-epoch", "the-epochs-last-step"])
def test_a_nan_loss_stops_the_run_at_its_step(tmp_path, manual, step):
    """The verdict of a step is read one step later; the epoch's last one before validation and the save."""
    with pytest.raises(ZooError, match=rf"at step {step} \(epoch 0\): training diverged.*learning rate.*no checkpoint"):
        fit(tmp_path, Diverging(nan_from=step, manual=manual))
    assert not list(tmp_path.rglob("*.ckpt"))


def test_a_run_that_diverges_later_keeps_its_finite_checkpoint(tmp_path):
    """Epoch 0 saves last.ckpt; the NaN in epoch 1 names it as kept, and no checkpoint of NaN weights is written."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    data = DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4)
    last = ModelCheckpoint(dirpath=tmp_path / "checkpoints", filename="last", monitor=None)
    trainer = L.Trainer(max_epochs=3, callbacks=[FiniteTraining(), last], logger=False, enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp_path)
    with pytest.raises(ZooError, match="last finite checkpoint .*last.ckpt is kept"):
        trainer.fit(Diverging(nan_from=6), data, data)
    kept = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert kept["global_step"] == 4 and not non_finite_tensors(kept["state_dict"])


def test_a_nan_metric_ranks_no_checkpoint(tmp_path):
    trainer, best = fit(tmp_path, Diverging(val_nan=True))
    assert best.best_model_path == "" and not list(tmp_path.rglob("best*.ckpt"))


def test_a_finite_metric_still_ranks(tmp_path):
    trainer, best = fit(tmp_path, Diverging())
    assert Path(best.best_model_path).name == "best.ckpt" and math.isfinite(float(best.best_model_score))


def test_a_checkpoint_save_refuses_non_finite_weights(tmp_path):
    module = Diverging()
    with torch.no_grad():
        module.net.weight.fill_(float("inf"))
    with pytest.raises(ZooError, match="net.weight holds NaN or infinity"):
        FiniteTraining().on_save_checkpoint(L.Trainer(logger=False), module, {"state_dict": module.state_dict()})


def test_loading_a_checkpoint_with_non_finite_weights_is_one_line(tmp_path):
    state = {"net.weight": torch.tensor([[1.0, float("nan")]]), "net.bias": torch.zeros(1),
             "attn_mask": torch.tensor([0.0, float("-inf")])}
    with pytest.raises(ZooError, match=r"non-finite weights \(NaN or infinity in net.weight\)"):
        check_finite_weights({"state_dict": state}, "x.ckpt")
    state["net.weight"] = torch.ones(1, 2)
    check_finite_weights({"state_dict": state}, "x.ckpt")  # an attention mask's -inf is no divergence


def test_metrics_json_is_strict():
    text = strict_json({"val/acc": 0.5, "val/loss": float("nan"), "rows": [float("inf"), 1.0]})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}")) == \
        {"val/acc": 0.5, "val/loss": None, "rows": [None, 1.0]}


def test_save_run_metrics_writes_nan_as_null(tmp_path):
    from omegaconf import OmegaConf

    from zoo.core.build import save_run_metrics

    path = save_run_metrics(OmegaConf.create({"run_dir": str(tmp_path)}), {"test/loss": float("nan"), "a": 1.0})
    assert json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(c)) == {"a": 1.0, "test/loss": None}


def test_bench_json_is_strict(tmp_path, monkeypatch):
    """A measurement that came out NaN made bench.json unreadable to a strict parser."""
    from types import SimpleNamespace

    from zoo.verbs.bench import report

    monkeypatch.setattr(report, "write_tensorboard", lambda *a, **k: None)
    bench = {"steps": 5, "warmup": 1, "precision": ["32-true"], "compile": [False], "channels_last": [False],
             "batch_size": [8], "devices": [1], "peak_flops": float("nan")}
    plan = SimpleNamespace(task="toy/blobs", overrides=[], bench=bench, unit="points", run_dir=tmp_path)
    report.report(plan, [])
    saved = json.loads((tmp_path / "bench.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert saved["bench"]["peak_flops"] is None
