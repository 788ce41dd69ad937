"""`zoo bench` hooks for nlp: throughput in real tokens per second (the attention mask's sum: padding is not work
anyone asked for, and dynamic padding changes how much of it there is)."""

from __future__ import annotations

from typing import Any

UNIT = "tokens"
BATCH_KEY = "task.data.batch_size"
LOSS_KEY = "train/loss"
RUN_OVERRIDES = {"task": {"module": {"export_hf": False}}}  # no Hugging Face copy of a benchmark's weights


def units(module: Any, batch: Any) -> float:
    return float(batch["attention_mask"].sum())
