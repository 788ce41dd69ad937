"""Every task and preset composes, and its data and module instantiate (no network, no downloads)."""

from __future__ import annotations

import pytest

from zoo.base import instantiate
from zoo.core.config import options
from zoo.testing import compose


@pytest.mark.parametrize("task", options("task"))
def test_task_composes_and_instantiates(task):
    cfg = compose([f"task={task}"])
    assert cfg.task.name == task
    assert cfg.task.monitor.startswith("val/") and cfg.task.mode in ("min", "max")
    _instantiate(cfg)


@pytest.mark.parametrize("preset", options("experiment"))
def test_preset_composes_and_instantiates(preset):
    cfg = compose([f"experiment={preset}"])
    _instantiate(cfg)


def _instantiate(cfg):
    # Presets name real hub weights and datasets: build them offline (random init, no download at construction).
    from omegaconf import open_dict

    with open_dict(cfg):
        if "pretrained" in cfg.task.module:
            cfg.task.module.pretrained = False
    from zoo.errors import ZooError, one_line

    try:
        data = instantiate(cfg.task.data) if cfg.task.get("data") is not None else None
        extra = data.model_kwargs() if hasattr(data, "model_kwargs") else {}
    except ZooError as e:  # presets for a user's own files (manifests, folders) name the missing path in one line
        assert "not found" in one_line(e) and "\n" not in one_line(e)
        return
    module = instantiate(cfg.task.module, _convert_="all", **extra)
    assert sum(p.numel() for p in module.parameters()) > 0
    for c in cfg.callbacks.values():
        if c is not None:
            instantiate(c)


@pytest.mark.parametrize("name", options("trainer"))
def test_trainer_presets_compose(name):
    from zoo.core.trainer import trainer_kwargs

    kwargs = trainer_kwargs(compose([f"trainer={name}"]).trainer)
    assert "precision" in kwargs
