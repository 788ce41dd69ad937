"""What every verb builds from a composed config: seed and switches, data and module, callbacks and loggers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from zoo.base import instantiate, plain, write_text_atomic
from zoo.errors import ZooError

log = logging.getLogger("zoo")


def build_data_and_module(cfg: DictConfig) -> tuple[Any, Any]:
    from zoo.core.resume import resumed_checkpoint

    datamodule = instantiate(cfg.task.data) if cfg.task.get("data") is not None else None
    extra = datamodule.model_kwargs() if datamodule is not None and hasattr(datamodule, "model_kwargs") else {}
    resumed = resumed_checkpoint()
    if resumed is not None and datamodule is not None:  # a resume continues the classes the model learned
        from types import SimpleNamespace

        check_data_fits(datamodule, SimpleNamespace(hparams=resumed["hyper_parameters"]))
    module = instantiate(cfg.task.module, _convert_="all", **extra)
    if cfg.get("trainer") is not None and cfg.trainer.get("ema_decay") and not module.automatic_optimization:
        from zoo.core.callbacks import ema_refusal

        raise ZooError(ema_refusal(module))  # before the trainer is built (and prints its device lines)
    return datamodule, module


def build_callbacks_and_loggers(cfg: DictConfig, overrides: list[str]) -> tuple[list, list]:
    from zoo.core.checkpoint import ZooMetadata
    from zoo.core.rank_watch import DeadRankWatch

    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    callbacks += [ZooMetadata(cfg.task.name, overrides, plain(cfg)), DeadRankWatch(cfg.run_dir)]
    loggers = [instantiate(c) for c in (cfg.get("logger") or {}).values() if c is not None]
    return callbacks, loggers


def start(cfg: DictConfig) -> None:
    """What every verb does first: the seed, then the process-wide switches (threads, matmul precision), before any
    model is built."""
    import lightning.pytorch as pl

    from zoo.core.trainer import apply_global_switches

    pl.seed_everything(int(cfg.seed), workers=True, verbose=False)
    apply_global_switches(cfg.trainer)


def save_run_config(cfg: DictConfig, overrides: list[str], resume: str | None = None) -> Path:
    """The resolved config at the run-dir root: what DDP children load (with the checkpoint rank 0 resumes from),
    and what reproduces the run."""
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    from zoo.core.presets import GENERATION

    saved = {"config": plain(cfg), "overrides": list(overrides), "resume": resume, "presets": GENERATION}
    return write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(saved)))


METRICS_FILE = "metrics.json"


def save_run_metrics(cfg: DictConfig, metrics: dict[str, float]) -> Path:
    """The run's final metrics (the last evaluation's val/*, then test/*) at the run-dir root, atomically; a resumed
    run replaces them with its own final ones. Strict JSON: a NaN metric is written as null (no value)."""
    from zoo.core.numbers import strict_json

    text = strict_json(dict(sorted(metrics.items())), indent=1) + "\n"
    return write_text_atomic(Path(cfg.run_dir) / METRICS_FILE, text)


def has_test_data(datamodule: Any, module: Any) -> bool:
    from lightning.pytorch.utilities.model_helpers import is_overridden

    if datamodule is not None:
        return is_overridden("test_dataloader", datamodule)
    return is_overridden("test_dataloader", module)


def load_module(cfg: DictConfig, ckpt_path: str) -> Any:
    from hydra.utils import get_class
    from lightning.pytorch import LightningModule

    from zoo.imports import check_extra

    check_extra(str(cfg.task.module._target_), str(cfg.task.name))
    cls = get_class(cfg.task.module._target_)
    if not issubclass(cls, LightningModule):
        raise ZooError(f"task.module._target_={cfg.task.module._target_} is not a LightningModule; a checkpoint "
                       "loads into the task's LightningModule class")
    try:
        module = cls.load_from_checkpoint(ckpt_path, map_location="cpu", weights_only=True)
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        raise ZooError(f"checkpoint {ckpt_path} does not load into {cls.__name__} ({type(e).__name__}: {first}); "
                       "it was edited or written by another version of the task") from None
    return module.eval()


def build_checked_data(cfg: DictConfig, module: Any) -> Any:
    """The task's data for a trained module: the data must describe the same classes/labels the model knows."""
    if cfg.task.get("data") is None:
        return None
    datamodule = instantiate(cfg.task.data)
    check_data_fits(datamodule, module)
    return datamodule


def check_data_fits(datamodule: Any, module: Any) -> None:
    """One line when a trained module (or a resumed checkpoint's hparams) and the data disagree on what the data
    derives: classes, labels, vocabulary. A renamed class folder would otherwise relabel the model in silence."""
    if hasattr(datamodule, "check_model"):
        datamodule.check_model(module)
    elif hasattr(datamodule, "model_kwargs"):
        for key, value in datamodule.model_kwargs().items():
            if key in module.hparams and module.hparams[key] != value:
                raise ZooError(f"the checkpoint's {key} ({_short(module.hparams[key])}) does not match the data's "
                               f"({_short(value)}); use data with the same {key}")


def _short(v: Any) -> str:
    s = str(v)
    return s if len(s) < 80 else s[:77] + "..."
