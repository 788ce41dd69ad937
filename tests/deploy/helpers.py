"""Tiny modules saved as real zoo checkpoints (no training): what `zoo export` and `zoo serve` read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from zoo.testing import compose


def save_checkpoint(module: Any, run_dir: Path, task: str, overrides: list[str]) -> Path:
    """A checkpoint as `zoo train` writes it (state dict, hparams, the module's own extras, zoo metadata) into
    <run_dir>/checkpoints/best-tiny.ckpt, so run-dir resolution and <run dir>/export work as after training."""
    from zoo.config import plain

    cfg = compose([f"task={task}", *overrides])
    hp = dict(module.hparams)
    hp["pretrained"] = False if "pretrained" in hp else hp.get("pretrained")
    ckpt = {"state_dict": module.state_dict(), "hyper_parameters": {k: v for k, v in hp.items() if v is not None
                                                                    or k != "pretrained"},
            "pytorch-lightning_version": "2.6.6", "epoch": 0, "global_step": 0,
            "zoo": {"task": task, "overrides": [f"task={task}", *overrides], "config": plain(cfg),
                    "version": "0.1.0"}}
    module.on_save_checkpoint(ckpt)
    path = run_dir / "checkpoints" / "best-tiny.ckpt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path
