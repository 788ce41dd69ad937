"""Base helpers every layer may use: plain containers from configs, import by name, instantiate."""

from __future__ import annotations

from typing import Any

from zoo.errors import ZooError


def plain(cfg: Any) -> dict:
    """A DictConfig -> plain, resolved containers (what checkpoints and hparams store)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def import_attr(spec: str) -> Any:
    """'package.module:function' -> the object."""
    import importlib

    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)


def instantiate(config: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate, but a ZooError raised inside a constructor reaches the CLI as itself
    (Hydra wraps it in a multi-line InstantiationException)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate as hydra_instantiate

    try:
        return hydra_instantiate(config, **kwargs)
    except InstantiationException as e:
        cause = e.__cause__
        while cause is not None and not isinstance(cause, ZooError):
            cause = cause.__cause__
        if cause is not None:
            raise cause from None
        raise
