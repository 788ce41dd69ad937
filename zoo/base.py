"""Base helpers every layer may use: plain containers from configs, import by name, instantiate, atomic text files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from zoo.errors import ZooError


def write_text_atomic(path: Path, text: str) -> Path:
    """Write through a sibling temp file and a rename, so a reader (or a run killed mid-write) never sees half a
    file; a process writing the same path concurrently replaces it whole."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


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
    """hydra.utils.instantiate, but a ZooError raised inside a constructor reaches the CLI as itself, and a
    TypeError/ValueError as one line naming the config node (Hydra wraps both in a multi-line
    InstantiationException)."""
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
        if isinstance(e.__cause__, (TypeError, ValueError)):  # a value of the wrong type or range for a constructor
            where = _full_key(config)
            raise ZooError(f"{where}: {e.__cause__}; check the values under {where} "
                           f"(`python -m zoo train --cfg job` shows them)") from None
        raise


def _full_key(config: Any) -> str:
    """The dotted config path of a node ("task.module"), or its _target_ when it is not part of a tree."""
    getter = getattr(config, "_get_full_key", None)
    key = getter(None) if getter is not None else ""
    target = config.get("_target_", "?") if hasattr(config, "get") else "?"
    return str(key) if key else str(target)
