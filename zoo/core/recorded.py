"""A run's recorded config against today's: the values to pin when its own overrides are not enough (`zoo
reproduce`), or no longer compose (`zoo test`/`predict`/`export` on a checkpoint whose preset was renamed since)."""

from __future__ import annotations

import sys
from typing import Any

from zoo.core.overrides import carried_overrides
from zoo.errors import ZooError

# Where a run lives (its log and checkpoint folders), never a value to pin: a copied run's record names the original's
# folders, and pinning them trained the re-run into the original, over its checkpoints.
LOCATION_KEYS = ("save_dir", "dirpath", "default_root_dir", "log_dir", "output_dir", "weights_save_path")


def is_location(key: str) -> bool:
    """A key naming a folder the run writes into (`logger.tensorboard.save_dir`, `callbacks.*.dirpath`)."""
    return key.split(".")[0] in ("run_dir", "hydra") or key.rpartition(".")[2] in LOCATION_KEYS


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def pinned_values(recorded: dict[str, Any], now: dict[str, Any], asked: set[str],
                  not_pinned: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """`key=<recorded value>` for every value today's config would set differently; notes for recorded keys that no
    longer exist (they cannot be set) and new keys (their defaults apply). Keys under a `not_pinned` top-level node,
    and those the user sets (`asked`), are left alone."""
    skip = lambda k: k.split(".")[0] in not_pinned or k in asked  # noqa: E731
    pins = [f"{k}={hydra_literal(v)}" for k, v in recorded.items() if k in now and now[k] != v and not skip(k)]
    notes = []
    if pins:
        notes.append(f"config: {len(pins)} value(s) that today's defaults would change, pinned to the recorded ones: "
                     + ", ".join(pins[:6]) + (" ..." if len(pins) > 6 else ""))
    gone = [k for k in recorded if k not in now and not skip(k)]
    if gone:
        notes.append(f"config: recorded option(s) that no longer exist, so cannot be set: {', '.join(gone[:6])}")
    new = [k for k in now if k not in recorded and not skip(k)]
    if new:
        notes.append(f"config: option(s) added since the run, at their defaults: {', '.join(new[:6])}")
    return pins, notes


def hydra_literal(value: Any) -> str:
    """A recorded plain value in Hydra's override grammar."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_literal(v)}" for k, v in value.items()) + "}"
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def checkpoint_overrides(ckpt: dict, task: str, user: list[str], tail: list[str]) -> list[str]:
    """The checked overrides that rebuild a checkpoint's task config to evaluate or export it: `task=<task>`, the
    training overrides it carries (less the trainer's: device settings are the evaluation's own), the user's, `tail`.

    When its own overrides no longer compose while the user's do (a preset renamed or removed since the run), the
    task config the checkpoint recorded is pinned value by value instead, with one line saying so: a trained model
    must stay testable whatever happened to the preset it was trained with."""
    from omegaconf import OmegaConf

    from zoo.base import plain
    from zoo.core.config import check_overrides, compose

    zoo = ckpt.get("zoo") or {}
    carried = [o for o in carried_overrides(zoo.get("overrides", [])) if not o.startswith(("trainer", "task="))]
    overrides = [f"task={task}", *carried, *user, *tail]
    try:
        check_overrides(overrides, sweeps=False)
        return overrides
    except ZooError as e:
        recorded = (zoo.get("config") or {}).get("task")
        if not carried or not isinstance(recorded, dict):
            raise
        fresh = [f"task={task}", *user, *tail]
        check_overrides(fresh, sweeps=False)  # a mistake in the user's own overrides is theirs to read
        reason = str(e)
    composed = compose(fresh)
    now = flatten(plain(composed)["task"], "task.")
    # The keys inside a node that follows another (`task.module.env: ${task.env}`) follow it again: only its source
    # is pinned (Hydra cannot set a key inside an interpolation).
    raw = OmegaConf.to_container(composed.task, resolve=False)
    own = flatten(raw if isinstance(raw, dict) else {}, "task.")
    asked = {o.partition("=")[0].lstrip("+~") for o in user}
    pins, _ = pinned_values(flatten(recorded, "task."), {k: v for k, v in now.items() if k in own}, asked)
    added = [f"++{k}={hydra_literal(v)}" for k, v in flatten(recorded, "task.").items()
             if k not in now and k not in asked and not is_location(k)]
    print(f"zoo: note: the checkpoint's training overrides no longer compose ({reason.split(':')[0]}); rebuilding "
          f"its task config from the one it recorded ({len(pins) + len(added)} value(s) pinned)", file=sys.stderr,
          flush=True)
    overrides = [f"task={task}", *pins, *added, *user, *tail]
    check_overrides(overrides, sweeps=False)
    return overrides
