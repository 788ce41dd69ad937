"""What each verb does once the config is composed: build data, module, trainer; fit, test, predict."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from zoo.config import import_attr, instantiate, plain
from zoo.ddp import CHILD_CONFIG_ENV, DIST_ENV, is_lightning_child, launcher_rank, release_process_group, \
    restore_dist_env
from zoo.errors import ZooError

log = logging.getLogger("zoo")

__all__ = ["CHILD_CONFIG_ENV", "predict", "test", "train"]


def build_data_and_module(cfg: DictConfig) -> tuple[Any, Any]:
    datamodule = instantiate(cfg.task.data) if cfg.task.get("data") is not None else None
    extra = datamodule.model_kwargs() if hasattr(datamodule, "model_kwargs") else {}
    module = instantiate(cfg.task.module, _convert_="all", **extra)
    return datamodule, module


def build_callbacks_and_loggers(cfg: DictConfig, overrides: list[str]) -> tuple[list, list]:
    from zoo.checkpoint import ZooMetadata
    from zoo.callbacks import DeadRankWatch

    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values() if c is not None]
    callbacks += [ZooMetadata(cfg.task.name, overrides, plain(cfg)), DeadRankWatch(cfg.run_dir)]
    loggers = [instantiate(c) for c in (cfg.get("logger") or {}).values() if c is not None]
    return callbacks, loggers


def start(cfg: DictConfig) -> None:
    """What every verb does first: the seed, then the process-wide switches (threads, matmul precision), before any
    model is built."""
    import lightning.pytorch as pl

    from zoo.trainer import apply_global_switches

    pl.seed_everything(int(cfg.seed), workers=True, verbose=False)
    apply_global_switches(cfg.trainer)


def save_run_config(cfg: DictConfig, overrides: list[str], resume: str | None = None) -> Path:
    """The resolved config at the run-dir root: what DDP children load (with the checkpoint rank 0 resumes from),
    and what reproduces the run."""
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "config.yaml"
    tmp = path.with_suffix(".yaml.tmp")
    saved = {"config": plain(cfg), "overrides": list(overrides), "resume": resume}
    tmp.write_text(OmegaConf.to_yaml(OmegaConf.create(saved)))
    os.replace(tmp, path)
    return path


def has_test_data(datamodule: Any, module: Any) -> bool:
    from lightning.pytorch.utilities.model_helpers import is_overridden

    if datamodule is not None:
        return is_overridden("test_dataloader", datamodule)
    return is_overridden("test_dataloader", module)


def train(cfg: DictConfig, overrides: list[str], resume: str | None) -> dict:
    """Fit, then test the best checkpoint; the run's one writer (global rank 0) also saves the resolved config that
    Lightning's DDP children load."""
    if is_lightning_child() or launcher_rank() != 0:
        return _train(cfg, overrides, resume)
    before = {k: os.environ[k] for k in DIST_ENV if k in os.environ}
    os.environ[CHILD_CONFIG_ENV] = str(save_run_config(cfg, overrides, resume))
    try:
        return _train(cfg, overrides, resume)
    finally:
        release_process_group()
        restore_dist_env(before)


def _train(cfg: DictConfig, overrides: list[str], resume: str | None) -> dict:
    from zoo.ddp import peer_failure
    from zoo.trainer import build_trainer, prepare_module

    start(cfg)
    datamodule, module = build_data_and_module(cfg)
    callbacks, loggers = build_callbacks_and_loggers(cfg, overrides)
    trainer = build_trainer(cfg, callbacks, loggers)
    fit_module = prepare_module(module, cfg.trainer)
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        trainer.fit(fit_module, datamodule=datamodule, ckpt_path=resume, weights_only=True)
    except MisconfigurationException as e:  # Lightning's word for a setting it refuses, e.g. max_epochs below a resume
        first = " ".join(str(e).split())
        raise ZooError(f"{first[:300]} (trainer settings: `python -m zoo train --cfg job`)") from None
    except RuntimeError as e:
        message = peer_failure(e, trainer)
        if message is None:
            raise
        raise ZooError(message) from None
    if trainer.interrupted:
        raise ZooError(f"training interrupted; continue it with `python -m zoo train ckpt_path={cfg.run_dir}`")
    # the last evaluation's val/* (what a sweeper optimises), taken before trainer.test clears callback_metrics
    metrics = {k: v for k, v in _scalars(trainer.callback_metrics).items() if k.startswith("val/")}
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.test_after_fit and has_test_data(datamodule, module):
        results = trainer.test(fit_module, datamodule=datamodule, ckpt_path=best or None, weights_only=True)
        metrics.update(results[0] if results else {})
    if trainer.is_global_zero:
        log_hparams(loggers, cfg, metrics)
        summarize(cfg, best, metrics)
    return metrics


def _scalars(metrics: dict) -> dict:
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


def flatten(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


def log_hparams(loggers: list, cfg: DictConfig, metrics: dict) -> None:
    """Fill TensorBoard's HParams tab: the flattened resolved config against the final metrics."""
    from lightning.pytorch.loggers import TensorBoardLogger

    params = {k: v for k, v in flatten(plain(cfg)).items() if not k.startswith("hydra.")}
    final = {f"final/{k}": float(v) for k, v in _scalars(metrics).items()}
    for lg in loggers:
        if isinstance(lg, TensorBoardLogger):
            lg.log_hyperparams(params, metrics=final)
            lg.finalize("success")


def summarize(cfg: DictConfig, best: str, metrics: dict) -> None:
    run_dir = Path(cfg.run_dir)
    root = Path(os.environ.get("ZOO_OUTPUT_ROOT", "outputs"))
    lines = [
        "",
        f"zoo: finished {cfg.task.name}",
        f"  run dir:         {run_dir}",
        f"  best checkpoint: {best or '(none saved)'}",
    ]
    for k, v in sorted(_scalars(metrics).items()):
        lines.append(f"  {k:<16} {v:.4f}")
    lines.append(f"  watch:           tensorboard --logdir {root}")
    print("\n".join(lines), flush=True)


def test(cfg: DictConfig, ckpt_path: str) -> dict:
    from lightning.pytorch.callbacks import ModelCheckpoint

    from zoo.trainer import build_trainer, prepare_module

    start(cfg)
    module = load_module(cfg, ckpt_path)
    datamodule = build_checked_data(cfg, module)
    if not has_test_data(datamodule, module):
        raise ZooError(f"task {cfg.task.name} has no test data to evaluate {ckpt_path} on")
    callbacks, loggers = build_callbacks_and_loggers(cfg, [])
    callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
    trainer = build_trainer(cfg, callbacks, loggers)
    results = trainer.test(prepare_module(module, cfg.trainer), datamodule=datamodule)
    metrics = results[0] if results else {}
    if trainer.is_global_zero:
        print(json.dumps({"checkpoint": str(ckpt_path), **_scalars(metrics)}), flush=True)
    return metrics


def load_module(cfg: DictConfig, ckpt_path: str) -> Any:
    from hydra.utils import get_class

    cls = get_class(cfg.task.module._target_)
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
    if hasattr(datamodule, "check_model"):
        datamodule.check_model(module)
    elif hasattr(datamodule, "model_kwargs"):
        for key, value in datamodule.model_kwargs().items():
            if key in module.hparams and module.hparams[key] != value:
                raise ZooError(f"the checkpoint's {key} ({_short(module.hparams[key])}) does not match the data's "
                               f"({_short(value)}); evaluate it on data with the same {key}")
    return datamodule


def _short(v: Any) -> str:
    s = str(v)
    return s if len(s) < 80 else s[:77] + "..."


def predict(cfg: DictConfig, ckpt_path: str) -> None:
    """One JSON line per input. The task's predict function drives the module itself (no Trainer: it reads files,
    text or an environment), so of the trainer switches only the process-wide ones and channels_last apply here;
    torch.compile would hand it a wrapper without the module's own methods."""
    import torch

    from zoo.trainer import prepare_module

    start(cfg)
    module = load_module(cfg, ckpt_path)
    if cfg.trainer.get("channels_last"):
        module = prepare_module(module, {"channels_last": True})
    fn = import_attr(cfg.task.predict)
    with torch.inference_mode():
        for row in fn(module, cfg, cfg.get("input")):
            print(json.dumps(row), flush=True)
