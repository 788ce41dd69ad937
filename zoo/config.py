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


SEARCH_SWEEPER = "zoo_optuna"  # hydra/sweeper=zoo_optuna (hydra_plugins/zoo_optuna_sweeper), what hparams_search picks


def _expose_own_plugins() -> None:
    """Hydra finds plugins in the `hydra_plugins` namespace package on sys.path. An editable install made before the
    checkout had hydra_plugins/ does not map it (nor does running from another folder without PYTHONPATH): then
    the checkout joins the end of sys.path, where it shadows nothing installed."""
    import sys

    root = Path(__file__).resolve().parent.parent
    if not (root / "hydra_plugins").is_dir() or str(root) in sys.path:
        return
    try:
        import hydra_plugins

        found = [str(Path(p).resolve()) for p in hydra_plugins.__path__]
    except ImportError:
        found = []
    if str(root / "hydra_plugins") not in found:
        sys.path.append(str(root))


_expose_own_plugins()


def external_job_id() -> str | None:
    """An id shared by every rank of a job that a launcher (torchrun, SLURM) started, and kept when the launcher
    restarts the job (torchrun's --max-restarts, SLURM's requeue), so that the restart finds its run; else None."""
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    if run and run != "none":  # --rdzv-id=<name> (or --standalone's uuid): the same on every node and restart
        return "torchrun-" + run
    slurm = _slurm_job_id()
    if slurm:
        return slurm
    if run == "none":  # torchrun's default --rdzv-id: nothing shared; rank 0's agent names the run
        return _torchrun_agent_id()
    return None


def _slurm_job_id() -> str | None:
    """`slurm-<job id>[.<step>]` for tasks that srun started (submitit does), or several tasks. An interactive shell
    (job name bash/interactive, Lightning's own test) runs many commands in one job: those get timestamps."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job or os.environ.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None
    step = os.environ.get("SLURM_STEP_ID", "")
    if step.isdigit() and int(step) < 0xFFFFFFF0:  # a real srun step (not the batch/extern/interactive steps)
        return f"slurm-{job}" + (f".{step}" if step != "0" else "")  # a second srun in one job: its own run
    return f"slurm-{job}" if int(os.environ.get("SLURM_NTASKS", "1")) > 1 else None


def _process_start(pid: int) -> datetime | None:
    """When process `pid` started (Linux /proc): stable for the process's life, unlike now()."""
    try:
        after_name = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        ticks = int(after_name[19])  # field 22, starttime in clock ticks since boot
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return datetime.fromtimestamp(boot + ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _torchrun_agent_id() -> str:
    """Rank 0 names the run after its torchrun agent (its parent: alive, same pid and start time, across restarts)
    and publishes the name in the agent's store; the other ranks, whose agents may be on other nodes, read it there.
    (Each rank naming the run after its own agent gave one run directory per node.)"""
    started = _process_start(os.getppid()) or datetime.now()
    own = f"torchrun-{started:%Y-%m-%d_%H-%M-%S}_{os.getppid()}"
    if os.environ.get("WORLD_SIZE") == os.environ.get("LOCAL_WORLD_SIZE"):
        return own  # one agent: every rank has the same parent
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_PORT" not in os.environ:
        raise ZooError("torchrun with several nodes and the default --rdzv-id: the ranks cannot agree on a run "
                       "directory; pass --rdzv-id=<run name> to every torchrun")
    from datetime import timedelta

    import torch.distributed as dist

    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=300), wait_for_workers=False)
    # The store outlives torchrun's restarts: the first rank 0's name stays, even if rank 0 moves to another agent.
    if os.environ.get("RANK") == "0":
        return store.compare_set("zoo/run_id", "", own).decode()
    return store.get("zoo/run_id").decode()  # waits for rank 0


_RUN_ID: str | None = None
_LAUNCHER_NAMED = False


def run_id() -> str:
    """`<date>_<time>_<pid>` once per process (stable across Hydra's repeated resolution), or the launcher's job id."""
    global _RUN_ID, _LAUNCHER_NAMED
    if _RUN_ID is None:
        job = external_job_id()
        _LAUNCHER_NAMED = job is not None
        _RUN_ID = job or f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{os.getpid() % 10000:04d}"
    return _RUN_ID


def launcher_named_run() -> bool:
    """Whether this process's run id is its launcher's job id (the same again when the launcher restarts the job)."""
    run_id()
    return _LAUNCHER_NAMED


def is_writer() -> bool:
    from zoo.ddp import launcher_rank

    return launcher_rank() == 0


def register_resolvers() -> None:
    """`${zoo_run_id:}` (cached, so that a submitit job re-composing the sweep's config gets the submitter's id
    through Hydra's cache copy) and `${zoo_writer:yes,no}`: `yes` in the run's one writer of shared files (global
    rank 0 as torchrun/SLURM number it), `no` in the other ranks (`.hydra/`, `cli.log`)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("zoo_run_id"):
        OmegaConf.register_new_resolver("zoo_run_id", lambda: run_id(), use_cache=True)
    if not OmegaConf.has_resolver("zoo_count"):  # trainer.devices -> a SLURM task count: 8 -> 8, "auto" -> 1
        OmegaConf.register_new_resolver("zoo_count", lambda value, default=1: int(value) if str(value).isdigit()
                                        else default)
    if not OmegaConf.has_resolver("zoo_writer"):
        OmegaConf.register_new_resolver("zoo_writer", lambda yes, no=None: yes if is_writer() else no)


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


def compose(overrides: list[str], config_name: str = "train", *, with_hydra: bool = False):  # noqa: ANN201
    """Compose the config tree once, outside a Hydra app (Hydra's global state is cleared before and after);
    `with_hydra` keeps the `hydra` node (which sweeper, its settings)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(CONFIG_DIR), version_base=None):
            return hydra_compose(config_name, overrides=overrides, return_hydra_config=with_hydra)
    finally:
        GlobalHydra.instance().clear()


def check_overrides(overrides: list[str], config_name: str = "train", sweeps: bool = True) -> None:
    """Compose once up front so that a bad override fails with one clear line instead of Hydra's report, and check
    the values' types and the optimizer settings before any work starts.

    Sweep overrides (`a=1,2`) are composed with their first value (an interval with its low end); their values'
    types are all checked. Continuous ranges (`interval(...)`) pass only to a search sweeper (hparams_search=...).
    `hparams_search=<name>` becomes `+hparams_search=<name>` in place when train.yaml's defaults do not list the
    group (Hydra's spelling for a group outside the defaults list); the caller hands the same list to Hydra.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from zoo import validate

    _append_search_group(overrides)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors
        raise ZooError(f"cannot parse overrides {overrides}: {_first_line(e)}; write them as key=value, and quote a "
                       "value holding commas, spaces or brackets: key='a, b' (search ranges: docs/search.md)") from None
    single = [_single_value(o, sweeps) for o in parsed]
    try:
        cfg = compose(single, config_name, with_hydra=True)
        groups = [t for t, o in zip(single, parsed) if "." not in o.get_key_element() and
                  o.get_key_element().lstrip("+~") in GROUPS or "/" in o.get_key_element()]
        base = cfg if groups == single else compose(groups, config_name, with_hydra=True)  # no value overrides
    except Exception as e:  # noqa: BLE001
        raise ZooError(explain(e, single)) from None
    continuous = [o for o in parsed if o.is_sweep_override() and not o.is_discrete_sweep()]
    if continuous and SEARCH_SWEEPER not in str(_select(cfg, "hydra.sweeper._target_")):
        o = continuous[0]
        raise ZooError(f"{o.input_line}: interval() is a continuous range that only a search sweeper can sample; "
                       f"list the values to try instead, e.g. {o.get_key_element()}=1e-4,1e-3,1e-2, or run a search: "
                       "-m hparams_search=<task> (docs/search.md)")
    validate.check_types(parsed, base)
    validate.check_batch_sizes(cfg)
    validate.check_optimizers(cfg)


def _select(cfg: Any, key: str) -> Any:
    """OmegaConf.select, None where an interpolation cannot resolve outside a Hydra app."""
    from omegaconf import OmegaConf

    return OmegaConf.select(cfg, key, throw_on_resolution_failure=False)


def _single_value(o: Any, sweeps: bool) -> str:
    """One override to compose with: a sweep's first value, an interval's low end."""
    from hydra.core.override_parser.types import IntervalSweep

    if not o.is_sweep_override():
        return o.input_line
    if not sweeps:
        raise ZooError(f"{o.input_line} reads as a sweep, but this command runs once; quote a value that holds "
                       f"commas: {o.get_key_element()}='{o.input_line.partition('=')[2]}'")
    value = o.value()
    if isinstance(value, IntervalSweep):
        low = int(value.start) if float(value.start).is_integer() else value.start
        return f"{o.get_key_element()}={low!r}"
    return f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"


def _append_search_group(overrides: list[str]) -> None:
    """`hparams_search=x` -> `+hparams_search=x` while train.yaml's defaults list has no `hparams_search` entry."""
    from omegaconf import OmegaConf

    for i, o in enumerate(overrides):
        if o.startswith("hparams_search="):
            defaults = OmegaConf.load(CONFIG_DIR / "train.yaml").get("defaults", [])
            listed = any(isinstance(d, dict) and "hparams_search" in d or
                         hasattr(d, "keys") and "hparams_search" in d.keys() for d in defaults)
            if not listed:
                overrides[i] = "+" + o


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
