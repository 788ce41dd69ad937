"""`zoo bench` hooks for gan: throughput in generated images per second (each step's D and G passes generate one
fake per real image of the batch)."""

from __future__ import annotations

from typing import Any

UNIT = "images"
BATCH_KEY = "task.data.batch_size"
LOSS_KEY = "train/loss_g"


def units(module: Any, batch: Any) -> float:
    return float(batch[0].shape[0])
