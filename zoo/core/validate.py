"""Value checks before any work starts: types against the config's defaults, optimizer settings, batch sizes."""

from __future__ import annotations

from typing import Any

from zoo.errors import ZooError


def _expected(default: Any) -> tuple[tuple[type, ...], str] | None:
    """The types a value may take given the config's default (None: anything goes)."""
    if isinstance(default, bool):
        return (bool,), "true or false"
    if isinstance(default, int):
        return (int,), "an integer"
    if isinstance(default, float):
        return (int, float), "a number"
    return None  # strings ("auto" | 2), nulls, lists and mappings take many shapes


def check_types(parsed: list, base: Any, groups: tuple[str, ...]) -> None:
    """Each value override must have the type of the value it replaces in `base` (the config composed with the
    same group choices: task, preset, trainer...). Sweep values are checked one by one."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from omegaconf import OmegaConf

    for o in parsed:
        key = o.get_key_element().lstrip("+~")
        if o.is_delete() or "/" in key or "." not in key and key in groups:
            continue  # deletions and config groups (task=..., hydra/launcher=...)
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(base, parent, throw_on_resolution_failure=False) if parent else base
        if node is None or not hasattr(node, "_get_node") or leaf not in node or OmegaConf.is_interpolation(node, leaf):
            continue
        default = node[leaf]
        rule = _expected(default)
        if rule is None:
            continue
        value = o.value()
        if isinstance(value, IntervalSweep):  # Hydra reads interval bounds as floats: 16.0 fits an integer key
            values = [int(v) if isinstance(default, int) and float(v).is_integer() else v
                      for v in (value.start, value.end)]
        else:
            values = value.list if isinstance(value, ChoiceSweep) else \
                [value.start, value.step] if isinstance(value, RangeSweep) else [value]
        for v in values:
            if v is None or isinstance(v, rule[0]) and not (rule[0] != (bool,) and isinstance(v, bool)):
                continue
            if isinstance(v, str) and rule[0] == (int,) and not key.startswith("trainer."):
                continue  # a task's integer option may also take a name (a column, "auto"); trainer's never do
            shown = str(default).lower() if isinstance(default, bool) else default
            ranged = isinstance(value, (IntervalSweep, RangeSweep))
            what = f"{key}: {v!r} in {o.input_line.partition('=')[2]}" if ranged else f"{key}={v!r}"
            raise ZooError(f"{what} is not {rule[1]} (the default is {shown}); e.g. {key}={shown}")


def check_optimizers(cfg: Any) -> None:
    """Build every torch optimizer partial of the task on a dummy parameter: torch's own checks (negative lr,
    betas outside [0, 1), unknown keyword) then fail here, naming the config key."""
    import torch
    from omegaconf import DictConfig

    from zoo.base import instantiate

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, DictConfig):
            return
        target = str(node.get("_target_", ""))
        if target.startswith("torch.optim.") and "lr_scheduler" not in target and node.get("_partial_"):
            try:
                instantiate(node)([torch.nn.Parameter(torch.zeros(1))])
            except (ValueError, TypeError) as e:
                raise ZooError(f"{path}: {str(e).strip().splitlines()[0]}; fix the value on the command line "
                               f"(see `python -m zoo train --cfg job`)") from None
            return
        for k in node.keys():
            walk(node._get_node(k), f"{path}.{k}")  # the raw node: no interpolation is resolved on the way

    task = cfg.get("task")
    if isinstance(task, DictConfig) and isinstance(task.get("module"), DictConfig):
        walk(task.module, "task.module")


def check_batch_sizes(cfg: Any) -> None:
    from omegaconf import OmegaConf

    for key in ("task.data.batch_size", "task.module.batch_size"):
        v = OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
        if isinstance(v, int) and not isinstance(v, bool) and v < 1:
            raise ZooError(f"{key}={v} must be at least 1")
