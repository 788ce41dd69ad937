"""`zoo bench` hooks for speech: throughput in seconds of audio per second (unpadded lengths / sample rate)."""

from __future__ import annotations

from typing import Any

UNIT = "audio-seconds"
BATCH_KEY = "task.data.batch_size"
LOSS_KEY = "train/loss"


def units(module: Any, batch: Any) -> float:
    return float(batch["lengths"].sum()) / float(module.hparams.sample_rate)
