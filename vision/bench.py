"""`zoo bench` hooks for vision: throughput in images per second (the batch's first tensor is (B, C, H, W))."""

from __future__ import annotations

from typing import Any

UNIT = "images"
BATCH_KEY = "task.data.batch_size"
LOSS_KEY = "train/loss"


def units(module: Any, batch: Any) -> float:
    return float(batch[0].shape[0])
