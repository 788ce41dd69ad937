"""Value checks before any work starts: types against the config's defaults, optimizer settings, batch sizes."""

from __future__ import annotations

from collections.abc import Sequence
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


def _fits(value: Any, types: tuple[type, ...]) -> bool:
    return value is None or isinstance(value, types) and not (types != (bool,) and isinstance(value, bool))


def _resolved(base: Any, key: str, value: str) -> Any:
    """What an interpolated override resolves to in `base` (None where it can only resolve in the run: ${hydra:...})."""
    from omegaconf import OmegaConf

    probe = OmegaConf.create(OmegaConf.to_container(base, resolve=False))
    OmegaConf.update(probe, key, value, force_add=True)
    try:
        return OmegaConf.select(probe, key)
    except Exception as e:  # noqa: BLE001 - any resolver's failure (a missing variable, an unknown key or resolver)
        if "hydra" in value or "hydra" in str(e).lower():
            return None  # set once the run starts
        raise ZooError(f"{key}={value} does not resolve: {str(e).strip().splitlines()[0]}") from None


def check_types(parsed: list, base: Any, groups: tuple[str, ...]) -> None:
    """Each value override must have the type of the value it replaces in `base` (the config composed with the
    same group choices: task, preset, trainer...), and an interpolated one must resolve there. Sweep values are
    checked one by one."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from omegaconf import OmegaConf

    for o in parsed:
        key = o.get_key_element().lstrip("+~")
        if o.is_delete() or "/" in key or "." not in key and key in groups:
            continue  # deletions and config groups (task=..., hydra/launcher=...)
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(base, parent, throw_on_resolution_failure=False) if parent else base
        if node is None or not hasattr(node, "_get_node") or leaf not in node:
            continue
        default = None if OmegaConf.is_interpolation(node, leaf) else node[leaf]  # None: no type to hold it to
        rule = _expected(default)
        value = o.value()
        values: list[Any]
        if isinstance(value, IntervalSweep):  # Hydra reads interval bounds as floats: 16.0 fits an integer key
            values = [int(v) if isinstance(default, int) and v is not None and float(v).is_integer() else v
                      for v in (value.start, value.end)]
        else:
            values = list(value.list) if isinstance(value, ChoiceSweep) else \
                [value.start, value.step] if isinstance(value, RangeSweep) else [value]
        for given in values:
            # an interpolation is judged by what it resolves to (None where only the run can resolve it)
            interpolated = isinstance(given, str) and "${" in given
            v = _resolved(base, key, given) if interpolated else given
            if rule is None or _fits(v, rule[0]):
                continue
            if isinstance(v, str) and rule[0] == (int,) and key.startswith("task."):
                continue  # a task's integer option may also take a name (a column, "auto"); seed or trainer's never do
            if interpolated:
                fix = f"; text needs decoding: {key}='${{oc.decode:{given}}}'" if isinstance(v, str) else ""
                raise ZooError(f"{key}={given} gives {v!r}, not {rule[1]}{fix}")
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
            _check_target(path, target)
            try:
                instantiate(node)([torch.nn.Parameter(torch.zeros(1))])
            except (ValueError, TypeError) as e:
                raise ZooError(f"{path}: {str(e).strip().splitlines()[0]}; fix the value on the command line "
                               f"(see `python -m zoo train --cfg job`)") from None
            return
        for k in node.keys():
            walk(node._get_node(k), f"{path}.{str(k)}")  # the raw node: no interpolation is resolved on the way

    task = cfg.get("task")
    if isinstance(task, DictConfig) and isinstance(task.get("module"), DictConfig):
        walk(task.module, "task.module")


# Task options whose meaning bounds them, by their name wherever they sit under `task` (a vision or GAN size, a
# dropout): checked up front, so that a negative image size or a dropout of 2 is one line before any work, not a
# traceback from a transform or a layer after the run started.
AT_LEAST_ONE = ("batch_size", "image_size", "nz", "ngf", "ndf", "width", "max_length", "n_mels", "sample_rate",
                "num_envs", "num_steps", "num_minibatches", "update_epochs", "eval_episodes", "eval_batch_size")
PROBABILITY = ("dropout", "drop_rate", "drop_path_rate", "classifier_dropout", "head_dropout", "label_smoothing")


def check_batch_sizes(cfg: Any) -> None:
    """Sizes and counts at least 1, dropouts and smoothing in [0, 1), for every such option under `task`."""
    from omegaconf import OmegaConf

    from zoo.base import plain

    task = OmegaConf.select(cfg, "task", throw_on_resolution_failure=False)
    try:
        values = _leaves(plain(task), "task") if task is not None else []
    except Exception:  # noqa: BLE001 - an interpolation that does not resolve yet: its own check says so
        return
    for key, v in values:
        leaf = key.rpartition(".")[2]
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if number and leaf in AT_LEAST_ONE and v < 1:
            raise ZooError(f"{key}={v} must be at least 1")
        if number and leaf in PROBABILITY:
            check_probability(key, v)


def check_probability(key: str, v: float) -> None:
    """A dropout or a smoothing: in [0, 1)."""
    if not 0 <= v < 1:
        raise ZooError(f"{key}={v} is a probability: give a value in [0, 1)")


def _leaves(node: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        return [kv for k, v in node.items() for kv in _leaves(v, f"{prefix}.{k}")]
    return [(prefix, node)]


# Trainer values that only lightning.Trainer (or, for ema_decay, the zoo's weight average) checks, when it is built:
# after Hydra has made the run folder and the data and model are built. Checked here instead, before any of that,
# each refusal naming the key and its choices.
TRAINER_KEYS = ("precision", "accelerator", "devices", "max_time", "strategy", "ema_decay", "compile_mode",
                "compile_options", "gradient_clip_val")


def check_trainer(cfg: Any, parsed: Sequence[Any] = ()) -> None:
    """The composed `trainer` node, and every value of a sweep over one of TRAINER_KEYS (e.g. precision=16,17)."""
    from hydra.core.override_parser.types import ChoiceSweep
    from omegaconf import DictConfig, OmegaConf

    trainer = OmegaConf.select(cfg, "trainer", throw_on_resolution_failure=False)
    if not isinstance(trainer, DictConfig):
        return
    values = {k: [OmegaConf.select(trainer, k, throw_on_resolution_failure=False)] for k in TRAINER_KEYS}
    for o in parsed:
        key = o.get_key_element().lstrip("+~")
        if key.startswith("trainer.") and key[8:] in values and isinstance(o.value(), ChoiceSweep):
            values[key[8:]] = list(o.value().list)
    for precision in values["precision"]:
        check_precision(precision)
    for accelerator in values["accelerator"]:
        chosen = check_accelerator(accelerator)
        for devices in values["devices"]:
            check_devices(devices, chosen)
    for duration in values["max_time"]:
        check_max_time(duration)
    for strategy in values["strategy"]:
        check_strategy(strategy)
    for decay in values["ema_decay"]:
        check_ema_decay(decay)
    for clip in values["gradient_clip_val"]:
        check_gradient_clip(clip)
    from zoo.core.compile import check_compile_mode, check_compile_options

    for mode in values["compile_mode"]:
        check_compile_mode(mode)
        for options in values["compile_options"]:
            check_compile_options(options, mode)


def check_gradient_clip(value: Any) -> None:
    """Lightning takes a negative clip value and torch then scales every gradient by a negative factor: the run
    climbs its loss instead of descending it, without a word."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise ZooError(f"trainer.gradient_clip_val={value}: give a norm (or value) of 0 or more, or null for no "
                       "clipping")


def check_ema_decay(value: Any) -> None:
    if value is None or isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1:
        return  # 0 and null: off
    raise ZooError(f"trainer.ema_decay={value!r} must be a number in [0, 1), e.g. 0.999 (the share of the average "
                   "kept at each step); null: no weight average")


def check_precision(value: Any) -> None:
    from typing import get_args

    from lightning.fabric.plugins.precision.precision import _PRECISION_INPUT

    allowed = ["auto"] + [str(a) for t in get_args(_PRECISION_INPUT) for a in get_args(t)]
    if value is not None and str(value) not in allowed:
        raise ZooError(f"trainer.precision={value} is not a precision Lightning knows; use one of "
                       f"{', '.join(dict.fromkeys(allowed))}")


def check_accelerator(value: Any) -> str:
    """The accelerator name that `value` selects here (`auto` resolved); refused when this machine has none."""
    from lightning.fabric.utilities.device_parser import _select_auto_accelerator
    from lightning.pytorch.accelerators import AcceleratorRegistry

    if not isinstance(value, str):  # null (Lightning's default, auto) or an Accelerator mapping
        return _select_auto_accelerator()
    names = sorted(AcceleratorRegistry.available_accelerators())
    if value not in ("auto", "gpu", *names):
        raise ZooError(f"trainer.accelerator={value} is not an accelerator Lightning knows; use auto, gpu, "
                       f"{', '.join(names)}")
    auto = _select_auto_accelerator()
    if value == "auto":
        return auto
    name = value
    if value == "gpu":  # Lightning's own choice of GPU backend
        name = "mps" if AcceleratorRegistry["mps"]["accelerator"].is_available() else "cuda"
    if not AcceleratorRegistry[name]["accelerator"].is_available():
        what = "no GPU is visible to torch (torch.cuda.is_available() is False)" if value in ("gpu", "cuda") else \
            f"no {value} device is available here"
        why = " (a GPU run needs a CUDA build of torch and a visible device)" if value in ("gpu", "cuda") else ""
        raise ZooError(f"trainer.accelerator={value}: {what}; trainer.accelerator=auto would pick {auto} on this "
                       f"machine: use auto or {auto}{why}")
    return name


def check_devices(value: Any, accelerator: str) -> None:
    from lightning.pytorch.accelerators import AcceleratorRegistry

    if value in (None, "auto") or accelerator not in AcceleratorRegistry:
        return
    how = "a count >= 1" + (", a list of device ids or -1 (all)" if accelerator != "cpu" else "")
    if str(value).strip() == "0":
        raise ZooError(f"trainer.devices=0 runs on no device; use {how}, or auto")
    try:
        AcceleratorRegistry[accelerator]["accelerator"].parse_devices(value)
    except Exception as e:  # noqa: BLE001 - Lightning's parsers raise TypeError, ValueError or its own exception
        first = " ".join(str(e).split())[:160]
        raise ZooError(f"trainer.devices={value} does not fit accelerator {accelerator} ({first}); use {how}, "
                       "or auto") from None


def check_max_time(value: Any) -> None:
    import re
    from datetime import timedelta

    if value is None:
        return
    if isinstance(value, str) and re.fullmatch(r"\d+:\d\d:\d\d:\d\d", value.strip()):
        return
    if hasattr(value, "items"):
        try:
            timedelta(**{str(k): v for k, v in value.items()})
            return
        except TypeError:
            pass
    raise ZooError(f"trainer.max_time={value} is not a duration; write days:hours:minutes:seconds, e.g. "
                   "trainer.max_time=00:12:00:00 (12 hours), or a mapping: trainer.max_time='{hours: 12}'")


def check_strategy(value: Any) -> None:
    from lightning.pytorch.strategies import StrategyRegistry

    if not isinstance(value, str) or value == "auto" or value in StrategyRegistry:
        return
    names = [n for n in StrategyRegistry.available_strategies() if "find_unused" not in n]
    raise ZooError(f"trainer.strategy={value} is not a strategy Lightning knows; use auto, {', '.join(names)} "
                   "(or a {_target_: ...} mapping)")


def check_sweep_choices(cfg: Any, parsed: list) -> None:
    """Every value of a discrete sweep (`a,b`, `choice(a,b)`) over a task option, tried up front (check_choices)."""
    from hydra.core.override_parser.types import ChoiceSweep

    for o in parsed:
        if isinstance(o.value(), ChoiceSweep):
            check_choices(cfg, o.get_key_element().lstrip("+~"), list(o.value().list))
            check_sweep_values(cfg, o.get_key_element().lstrip("+~"), list(o.value().list))


def check_sweep_values(cfg: Any, key: str, values: list) -> None:
    """The optimizer and batch-size checks for every value of a sweep, not only the first one the config was
    composed with: `lr=1e-3,-1` trained trial 0, then died in trial 1 with a traceback and a folder left behind."""
    import copy

    from omegaconf import OmegaConf, open_dict

    from zoo.errors import one_line

    if not key.startswith("task."):
        return
    for value in values[1:]:
        trial = copy.deepcopy(cfg)
        with open_dict(trial):
            OmegaConf.update(trial, key, value, merge=False)
        try:
            check_batch_sizes(trial)
            check_optimizers(trial)
        except ZooError as e:
            raise ZooError(f"{key}={value} (one of the values to try): {one_line(e)}") from None


def check_choices(cfg: Any, key: str, values: list) -> None:
    """A sweep's or search's choices for a task's module or data option, each built as a run would build it (data,
    then module, pretrained weights off): a value the task refuses (`finetune=half`) fails here, in one line, before
    any run starts, instead of failing every trial that draws it. Numbers and booleans are type-checked already."""
    import copy

    from omegaconf import OmegaConf, open_dict

    from zoo.base import instantiate
    from zoo.errors import one_line

    if not key.startswith(("task.module.", "task.data.")) or not any(isinstance(v, str) for v in values):
        return
    for value in values:
        trial = copy.deepcopy(cfg)
        with open_dict(trial):
            OmegaConf.update(trial, key, value, merge=False)
            if "pretrained" in trial.task.module:
                trial.task.module.pretrained = False
        try:
            data = instantiate(trial.task.data) if trial.task.get("data") is not None else None
            extra = data.model_kwargs() if data is not None and hasattr(data, "model_kwargs") else {}
            instantiate(trial.task.module, _convert_="all", **extra)
        except Exception as e:  # noqa: BLE001 - a task refuses a value with a ZooError, a TypeError, a ValueError...
            why = one_line(e) if isinstance(e, ZooError) else f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
            raise ZooError(f"{key}={value} (one of the values to try) is refused by the task: {why}; drop it from "
                           "the choices") from None


def check_targets(cfg: Any) -> None:
    """Every `_target_` under the task (its module and data classes, and the optimizer, scheduler and model parts
    inside them) imports, before Hydra makes the run's folder: a `_target_` that names a missing class failed inside
    the run (four Hydra lines or tracebacks, exit 1, the folder left behind)."""
    from omegaconf import DictConfig, OmegaConf

    def walk(node: Any, key: str) -> None:
        if not isinstance(node, DictConfig):
            return
        raw = node._get_node("_target_")._value() if "_target_" in node else None  # type: ignore[union-attr]
        if isinstance(raw, str) and "${" not in raw:
            _check_target(key, raw)
        for k in node.keys():
            walk(node._get_node(k), f"{key}.{k!s}")

    from zoo.imports import check_extra

    target = OmegaConf.select(cfg, "task.module._target_", throw_on_resolution_failure=False)
    check_extra(str(target or ""), str(OmegaConf.select(cfg, "task.name", default="")))  # one line, not an import error
    for key in ("task.module", "task.data"):
        walk(OmegaConf.select(cfg, key, throw_on_resolution_failure=False), key)


def _check_target(key: str, target: str) -> None:
    import difflib
    import importlib

    module, _, name = target.rpartition(".")
    try:
        found = importlib.import_module(module) if module else None
    except ModuleNotFoundError as e:
        missing = "" if e.name and module.startswith(e.name) else f" (it imports {e.name}, which is not installed)"
        raise ZooError(f"{key}._target_={target}: module {module} cannot be imported{missing}: {e}; check the "
                       "name, and that its package is on PYTHONPATH (a task of your own: PYTHONPATH=<its folder>)"
                       ) from None
    if found is None or not hasattr(found, name):
        have = sorted(n for n, v in vars(found).items() if not n.startswith("_") and callable(v)) \
            if found is not None else []
        near = [h for h in have if h.lower() == name.lower()] or difflib.get_close_matches(name, have, n=3)
        raise ZooError(f"{key}._target_={target}: {module or 'no module'} has no {name!r}"
                       + (f"; did you mean {', '.join(near)}?" if near else
                          f"; it has {', '.join(have[:8]) or 'nothing callable'}"))


# numpy's and Lightning's seed range (seed_everything passes the seed to numpy): anything else was a traceback
SEED_RANGE = (0, 2**32 - 1)


def check_seed(cfg: Any) -> None:
    from omegaconf import OmegaConf

    seed = OmegaConf.select(cfg, "seed", throw_on_resolution_failure=False)
    if seed is None:
        return  # a deleted seed is check_deletions' to say
    low, high = SEED_RANGE
    if isinstance(seed, bool) or not isinstance(seed, int) or not low <= seed <= high:
        raise ZooError(f"seed={seed} must be a whole number from {low} to {high} (numpy's range); e.g. seed=42")


# What every verb reads from the composed config, whether or not an interpolation names it.
REQUIRED = ("task", "seed", "trainer", "run_dir")


def check_deletions(parsed: list, cfg: Any) -> None:
    """`~key` removes a key; one the zoo needs (`~task`, `~seed`) or one that other values interpolate (`${seed}` in
    task.data.seed) left the run to fail mid-way with an interpolation traceback: one line instead."""
    import re

    from omegaconf import OmegaConf

    deleted = [o.get_key_element().lstrip("~") for o in parsed if o.is_delete()]
    if not deleted:
        return
    plain = OmegaConf.to_container(cfg, resolve=False)
    refs = [(key, ref) for key, value in _leaves(plain, "") if isinstance(value, str)
            for ref in re.findall(r"\$\{([\w.]+)\}", value)]
    for key in deleted:
        readers = [k.lstrip(".") for k, ref in refs if ref == key or ref.startswith(key + ".")]
        if key in REQUIRED or readers:
            why = "every run reads it" if key in REQUIRED else f"{readers[0]} reads it"
            raise ZooError(f"~{key} deletes a key the zoo needs ({why}); set it to another value instead: "
                           f"{key}=<value>")
