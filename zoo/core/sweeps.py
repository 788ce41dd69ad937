"""Finishing a stopped sweep (`-m a=1,2,3`): the same command with `hydra.sweep.dir=<its folder>` keeps the trials
that finished, continues the one that was stopped from its last.ckpt, and runs the ones never started.

Hydra numbers a sweep's trials in the same order each time, so trial N of the same command is trial N's folder again.
A trial folder whose checkpoint records other values (another sweep's trial) is refused, never trained over.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from zoo.core.overrides import carried_overrides, override_key
from zoo.core.presets import recorded_overrides
from zoo.errors import ZooError


def continue_trial(cfg: Any, overrides: list[str]) -> dict | None:
    """For a trial of a continued sweep: its metrics when it finished already (nothing to do), else None, with
    `cfg.ckpt_path` set to its last.ckpt when it was stopped part-way (it goes on from there)."""
    run_dir = Path(cfg.run_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    if cfg.get("ckpt_path") or not last.is_file():
        return None
    from zoo.core.checkpoint import load_checkpoint

    recorded = carried_overrides(recorded_overrides(load_checkpoint(last).get("zoo", {})))
    if sorted(recorded) != sorted(carried_overrides(overrides)):
        raise ZooError(f"{run_dir} holds a trial with other values ({' '.join(recorded)}), not this sweep's "
                       f"({' '.join(carried_overrides(overrides))}); finish a sweep with its own command, or leave "
                       "hydra.sweep.dir out for a new sweep")
    metrics = run_dir / "metrics.json"
    if metrics.is_file():
        print(f"zoo: {run_dir} finished already; kept as it is", file=sys.stderr, flush=True)
        return {k: float(v) for k, v in json.loads(metrics.read_text()).items()}
    cfg.ckpt_path = str(last)
    return None


def finish_hint(sweep_dir: str) -> str:
    """The command that finishes the whole sweep: this one, in the same sweep folder."""
    args = [a for a in sys.argv[1:] if override_key(a) != "hydra.sweep.dir"]
    command = "python -m zoo " + shlex.join([*args, f"hydra.sweep.dir={sweep_dir}"])
    return (f"finish the whole sweep (finished trials are kept, a stopped one continues from its last.ckpt, the rest "
            f"run) with `{command}`")


def same_sweep(sweep_dir: Path, overrides: list[str]) -> bool:
    """Whether `sweep_dir` holds a sweep of these very overrides (its multirun.yaml, which Hydra writes first)."""
    from omegaconf import OmegaConf

    record = sweep_dir / "multirun.yaml"
    if not record.is_file():
        return False
    try:
        recorded = OmegaConf.select(OmegaConf.load(record), "hydra.overrides.task") or []
    except Exception:  # noqa: BLE001 - an unreadable record is no proof of the same sweep
        return False
    mine = [o for o in overrides if not override_key(o).startswith("hydra.")]
    return sorted(str(o) for o in recorded) == sorted(mine)
