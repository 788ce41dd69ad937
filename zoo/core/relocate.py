"""A resumed run owns its checkpoints wherever its folder now is.

Lightning's ModelCheckpoint drops its best scores when the folder it recorded differs from today's ("dirpath has
changed ... won't be reloaded"): a run copied or moved elsewhere then took its first evaluation after the resume as
the best, however worse. Before the callbacks load their state, the recorded paths are moved to the run's folder
(the same file names), entries whose file is gone are dropped, and the files the state names become this process's
to replace (zoo.core.owned.adopt).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from zoo.core import owned

log = logging.getLogger("zoo")

PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


def relocate_states(trainer: Any, checkpoint: dict) -> None:
    """Rewrite, in `checkpoint["callbacks"]`, each ModelCheckpoint state of this trainer to its current folder."""
    states = checkpoint.get("callbacks") or {}
    for cb in getattr(trainer, "checkpoint_callbacks", []):
        state = states.get(cb.state_key)
        if isinstance(state, dict) and cb.dirpath:
            moved_from = relocate(state, str(cb.dirpath), cb.mode)
            if moved_from:
                log.info("resumed in %s (recorded in %s): its best checkpoints and their scores come along",
                         cb.dirpath, moved_from)


def relocate(state: dict, dirpath: str, mode: str) -> str | None:
    """`state` (a ModelCheckpoint's) with its files in `dirpath`; returns the folder it recorded, when another."""
    was = str(state.get("dirpath") or dirpath)

    def here(path: Any) -> Any:
        if not path or not isinstance(path, str) or os.path.dirname(path) != was:
            return path
        return os.path.join(dirpath, os.path.basename(path))

    best_k = {here(k): v for k, v in (state.get("best_k_models") or {}).items()}
    best_k = {k: v for k, v in best_k.items() if os.path.isfile(k)}
    for key in PATH_KEYS:
        if key in state:
            state[key] = here(state[key])
    if best_k != state.get("best_k_models"):
        _rescore(state, best_k, mode)
    for path in [*best_k, *(state.get(k) for k in PATH_KEYS)]:
        if path and os.path.dirname(str(path)) == dirpath and os.path.isfile(path):
            owned.adopt(path)  # the run's own: Lightning's top-k may replace it
    state["dirpath"] = dirpath
    return was if was != dirpath else None


def _rescore(state: dict, best_k: dict, mode: str) -> None:
    """best/kth from the entries whose files are still there (none: as a new run starts)."""
    import torch

    state["best_k_models"] = best_k
    if not best_k:
        state.update(best_model_path="", best_model_score=None, kth_best_model_path="",
                     kth_value=torch.tensor(torch.inf if mode == "min" else -torch.inf))
        return
    order = sorted(best_k, key=lambda k: float(best_k[k]), reverse=mode == "max")
    state.update(best_model_path=order[0], best_model_score=best_k[order[0]], kth_best_model_path=order[-1],
                 kth_value=best_k[order[-1]])
