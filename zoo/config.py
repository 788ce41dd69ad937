"""Config composition helpers: where the configs live, the run-id resolver, listing, and override checking
that turns Hydra's multi-line errors into one line that names the fix."""

from __future__ import annotations

import difflib
import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from zoo.errors import ZooError

CONFIG_DIR = Path(os.environ.get("ZOO_CONFIG_DIR", Path(__file__).resolve().parent.parent / "configs"))
from zoo.validate import GROUPS  # noqa: E402 - one list of the config groups


def external_job_id() -> str | None:
    """An id shared by every rank of a job that a launcher (SLURM, torchrun) started, or None."""
    if os.environ.get("SLURM_JOB_ID") and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return "slurm-" + os.environ["SLURM_JOB_ID"]
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return "torchrun-" + run_id
    if run_id == "none":  # standalone torchrun: all local ranks share the agent process
        return f"torchrun-{datetime.now():%Y-%m-%d}-{os.getppid()}"
    return None


_RUN_ID: str | None = None


def run_id() -> str:
    """`<date>_<time>` once per process (stable across Hydra's repeated resolution), or the launcher's job id."""
    global _RUN_ID
    if _RUN_ID is None:
        _RUN_ID = external_job_id() or f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{os.getpid() % 10000:04d}"
    return _RUN_ID


def register_resolvers() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("zoo_run_id"):
        OmegaConf.register_new_resolver("zoo_run_id", lambda: run_id())


def options(group: str) -> list[str]:
    """Option names of a config group, with sub-folders (task -> ['gan/dcgan', 'vision/resnet', ...])."""
    root = CONFIG_DIR / group
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml")) if root.is_dir() else []


def describe(group: str, name: str) -> str:
    """The first comment line of a config file: its one-line description."""
    for line in (CONFIG_DIR / group / f"{name}.yaml").read_text().splitlines():
        if line.startswith("#") and "@package" not in line:
            return line.lstrip("# ").strip()
    return ""


def compose(overrides: list[str], config_name: str = "train"):  # noqa: ANN201 - a DictConfig
    """Compose the config tree once, outside a Hydra app (Hydra's global state is cleared before and after)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(CONFIG_DIR), version_base=None):
            return hydra_compose(config_name, overrides=overrides)
    finally:
        GlobalHydra.instance().clear()


def check_overrides(overrides: list[str], config_name: str = "train", sweeps: bool = True) -> None:
    """Compose once up front so that a bad override fails with one clear line instead of Hydra's report, and check
    the values' types and the optimizer settings before any work starts.

    Sweep overrides (`a=1,2`) are composed with their first value; their values' types are all checked.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    from zoo import validate

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors
        raise ZooError(f"cannot parse overrides {overrides}: {_first_line(e)}; write them as key=value, and quote a "
                       "value holding commas, spaces or brackets: key='a, b'") from None
    single = []
    for o in parsed:
        text = o.input_line
        if o.value_type == ValueType.INTERVAL_SWEEP:
            raise ZooError(f"{text}: interval() is a continuous range that only a search sweeper can sample; "
                           f"list the values to try instead, e.g. {o.get_key_element()}=1e-4,1e-3,1e-2")
        if o.is_sweep_override() and not sweeps:
            raise ZooError(f"{text} reads as a sweep, but this command runs once; quote a value that holds commas: "
                           f"{o.get_key_element()}='{text.partition('=')[2]}'")
        if o.is_sweep_override():
            first = next(iter(o.sweep_string_iterator()))
            text = f"{o.get_key_element()}={first}"
        single.append(text)
    try:
        cfg = compose(single, config_name)
        groups = [t for t, o in zip(single, parsed) if "." not in o.get_key_element() and
                  o.get_key_element().lstrip("+~") in GROUPS or "/" in o.get_key_element()]
        base = cfg if groups == single else compose(groups, config_name)  # no value overrides: the same config
    except Exception as e:  # noqa: BLE001
        raise ZooError(explain(e, single)) from None
    validate.check_types(parsed, base)
    validate.check_batch_sizes(cfg)
    validate.check_optimizers(cfg)


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or str(e.__cause__ or "").strip()
    return text.splitlines()[0] if text else type(e).__name__


def explain(e: BaseException, overrides: list[str]) -> str:
    """Hydra's composition error -> one actionable line."""
    text = f"{e}\n{e.__cause__ or ''}"
    m = re.search(r"Could not find '([^']+)'", text) or re.search(r"Could not load '([^']+)'", text)
    if m:
        path = m.group(1)
        group, _, name = path.partition("/")
        if group in GROUPS:
            avail = options(group)
            near = difflib.get_close_matches(name, avail, n=1)
            hint = f"did you mean {group}={near[0]}? " if near else ""
            return (f"unknown {group} '{name}': {hint}available: {', '.join(avail) or 'none'} "
                    f"(`python -m zoo list` shows them)")
    m = re.search(r"Could not override '([^']+)'", text) or re.search(r"Key '([^']+)' is not in struct", text)
    if m:
        key = m.group(1)
        return (f"unknown config key '{key}': check its spelling in `python -m zoo train --cfg job`"
                f"{_did_you_mean(key, overrides)}; use +{key}=... only to add a new key on purpose")
    m = re.search(r"Could not append to config. An item is already at '([^']+)'", text)
    if m:
        return f"'{m.group(1)}' already exists: set it with {m.group(1)}=... (no +)"
    return f"bad config or override ({_first_line(e)}); see `python -m zoo train --help`"


def _did_you_mean(key: str, overrides: list[str]) -> str:
    from omegaconf import OmegaConf

    parent, _, leaf = key.rpartition(".")
    rest = [o for o in overrides if not o.lstrip("+~").startswith(key + "=")]
    try:
        cfg = compose(rest)
        node = OmegaConf.select(cfg, parent) if parent else cfg
        keys = list(node.keys()) if hasattr(node, "keys") else []
    except Exception:  # noqa: BLE001 - only a hint
        return ""
    if leaf in [str(k) for k in keys]:
        return f" (it exists, but its value cannot be merged: set its sub-keys, e.g. +{key}.<name>=...)"
    near = difflib.get_close_matches(leaf, [str(k) for k in keys], n=1)
    return f" (did you mean {parent + '.' if parent else ''}{near[0]}?)" if near else ""


# ------------------------------------------------------------------------------ config -> objects
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
