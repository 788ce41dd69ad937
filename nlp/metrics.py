"""Metrics by name, as GLUE reports them: acc, f1 (binary: of class 1; else macro), mcc, pearson, spearman."""

from __future__ import annotations

import torchmetrics
from torch import nn

from zoo.errors import ZooError

CLASSIFICATION = ("acc", "f1", "mcc")
REGRESSION = ("pearson", "spearman")


def make_metric(name: str, num_labels: int) -> torchmetrics.Metric:
    if name == "acc":
        return torchmetrics.Accuracy(task="multiclass", num_classes=num_labels)
    if name == "f1":
        if num_labels == 2:
            return torchmetrics.F1Score(task="binary")
        return torchmetrics.F1Score(task="multiclass", num_classes=num_labels, average="macro")
    if name == "mcc":
        return torchmetrics.MatthewsCorrCoef(task="multiclass", num_classes=num_labels)
    if name == "pearson":
        return torchmetrics.PearsonCorrCoef()
    if name == "spearman":
        return torchmetrics.SpearmanCorrCoef()
    raise ZooError(f"unknown metric '{name}'; use {', '.join(CLASSIFICATION + REGRESSION)}")


def make_metrics(names: list[str], task_type: str, num_labels: int) -> nn.ModuleDict:
    allowed = CLASSIFICATION if task_type == "classification" else REGRESSION
    bad = [n for n in names if n not in allowed]
    if bad:
        raise ZooError(f"metric(s) {bad} do not apply to {task_type}; use {', '.join(allowed)}")
    return nn.ModuleDict({n: make_metric(n, num_labels) for n in names})
