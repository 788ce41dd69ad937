"""Config composition: where the configs live, the zoo's resolvers, listing, and override checking
that turns Hydra's multi-line errors into one line that names the fix."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

from zoo.core.configdirs import CONFIG_DIR, config_dirs  # noqa: F401 - CONFIG_DIR: read from here by the verbs
from zoo.core.naming import check_writable, is_writer, run_id
from zoo.core.presets import renamed_preset
from zoo.errors import ZooError

SEARCH_SWEEPER = "zoo_optuna"  # hydra/sweeper=zoo_optuna (hydra_plugins/zoo_optuna_sweeper), what hparams_search picks


def _expose_own_plugins() -> None:
    """Hydra finds plugins in the `hydra_plugins` namespace package on sys.path. An editable install made before the
    checkout had hydra_plugins/ does not map it (nor does running from another folder without PYTHONPATH): then
    the checkout joins the end of sys.path, where it shadows nothing installed."""
    import sys

    root = Path(__file__).resolve().parents[2]
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


def yaml_problem(path: Path) -> str | None:
    """`<file>:<line>: <what>` when a config file is not valid YAML (Hydra's own message names neither), else None."""
    import yaml

    try:
        yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        what = " ".join(str(getattr(e, "problem", None) or e).split())
        context, start = getattr(e, "context", None), getattr(e, "context_mark", None)
        if context and start is not None and mark is not None and start.line != mark.line:
            context += f" that starts at line {start.line + 1}"
        return f"{where}: {what}" + (f" ({context})" if context else "")
    except (OSError, UnicodeDecodeError) as e:
        return f"{path}: cannot be read ({e})"
    return None


def broken_config_files() -> list[str]:
    """Every config file of every tree that is not valid YAML, as `yaml_problem` says it."""
    found = []
    for root in config_dirs():
        if root.is_dir():
            found += [problem for f in sorted(root.rglob("*.yaml")) if (problem := yaml_problem(f))]
    return found


def config_file(group: str, name: str) -> Path:
    """The file that `<group>=<name>` picks (the first tree that has it)."""
    for root in config_dirs():
        if (root / group / f"{name}.yaml").is_file():
            return root / group / f"{name}.yaml"
    return CONFIG_DIR / group / f"{name}.yaml"


def options(group: str) -> list[str]:
    found: set[str] = set()
    for base in config_dirs():
        root = base / group
        if root.is_dir():
            found.update(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))
    return sorted(found)


def describe(group: str, name: str) -> str:
    """A config file's description: the first sentence of its opening comment (what `zoo list` shows). The sentence
    may run over several comment lines; a command example (`#   python ...`) or the first key ends the search, and a
    comment that never ends its sentence gets its full stop, so that no description stops mid-way (on ':')."""
    text = ""
    for line in config_file(group, name).read_text().splitlines():
        if "@package" in line:
            continue
        if not line.startswith("#") or line.startswith("#  ") or not line.strip("# "):
            break
        text = f"{text} {line.lstrip('# ').strip()}".strip()
        if (end := _sentence_end(text)) is not None:
            return text[:end]
    return text.rstrip(":;, ") + "." if text else ""


def _sentence_end(text: str) -> int | None:
    """Where the first sentence of `text` ends (after its full stop), or None while it goes on: a full stop at the
    end or before a space, not one of an abbreviation (`et al.`, `e.g.`) or inside brackets."""
    depth = 0
    for i, c in enumerate(text):
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(c, 0)
        if c != "." or depth > 0 or (i + 1 < len(text) and text[i + 1] != " "):
            continue
        word = text[:i].rsplit(" ", 1)[-1]
        if word not in ("al", "e.g", "i.e", "cf", "vs"):
            return i + 1
    return None


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


def check_overrides(overrides: list[str], config_name: str = "train", sweeps: bool = True) -> Any:
    """Compose once up front so that a bad override fails with one clear line instead of Hydra's report, and check
    the values' types and the optimizer settings before any work starts.

    Sweep overrides (`a=1,2`) are composed with their first value (an interval with its low end); their values'
    types are all checked. Continuous ranges (`interval(...)`) pass only to a search sweeper (hparams_search=...).
    `hparams_search=<name>` becomes `+hparams_search=<name>` in place when train.yaml's defaults do not list the
    group (Hydra's spelling for a group outside the defaults list); the caller hands the same list to Hydra.
    """
    from zoo.core import validate

    _append_search_group(overrides)
    parsed = _parsed(overrides)
    if sweeps and _expand_group_globs(overrides, parsed):
        parsed = _parsed(overrides)
    single = [_single_value(o, sweeps) for o in parsed]
    try:
        cfg = compose(single, config_name, with_hydra=True)
        groups = [t for t, o in zip(single, parsed) if is_group_choice(o.get_key_element())]
        base = cfg if groups == single else compose(groups, config_name, with_hydra=True)  # no value overrides
    except Exception as e:  # noqa: BLE001
        raise ZooError(explain(e, single)) from None
    if sweeps:
        _check_group_sweeps(parsed, single, config_name)
        _force_keys_of_swept_groups(overrides, parsed, single, config_name)
    continuous = [o for o in parsed if o.is_sweep_override() and not o.is_discrete_sweep()]
    if continuous and SEARCH_SWEEPER not in str(_select(cfg, "hydra.sweeper._target_")):
        o = continuous[0]
        raise ZooError(f"{o.input_line}: interval() is a continuous range that only a search sweeper can sample; "
                       f"list the values to try instead, e.g. {o.get_key_element()}=1e-4,1e-3,1e-2, or run a search: "
                       "-m hparams_search=<task> (docs/search.md)")
    validate.check_deletions(parsed, cfg)  # `~task`, `~seed`: before any check reads them
    validate.check_types(parsed, base, GROUPS)  # a seed that is no integer is said here, with what it resolved to
    validate.check_seed(cfg)  # ... and one out of numpy's range here
    validate.check_batch_sizes(cfg)
    validate.check_optimizers(cfg)
    # the trainer checks import Lightning: a task's lean start-up (zoo.imports) must be in place before they do
    lean = _select(cfg, "hydra.callbacks.lean_imports.absent")
    if lean:
        from zoo.imports import install

        install([str(n) for n in lean])
    validate.check_trainer(cfg, parsed)
    validate.check_targets(cfg)
    validate.check_sweep_choices(cfg, parsed)
    return cfg  # composed with the sweeps' first values and the `hydra` node


def _parsed(overrides: list[str]) -> list:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(overrides)
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors
        raise ZooError(f"cannot parse overrides {overrides}: {_first_line(e)}; write them as key=value, and quote a "
                       "value holding commas, spaces or brackets: key='a, b' (search ranges: docs/search.md)") from None


def _swept_groups(parsed: list) -> list[int]:
    return [i for i, o in enumerate(parsed) if o.is_sweep_override() and is_group_choice(o.get_key_element())]


def _expand_group_globs(overrides: list[str], parsed: list) -> bool:
    """`experiment='glob(rl_c*)'` -> `experiment=rl_acrobot,rl_cartpole` in place: Hydra enumerates a glob only inside
    its own app, and the names are the group's, which the zoo lists itself. A glob matching none is one line."""
    import fnmatch

    from hydra.core.override_parser.types import Glob

    changed = False
    for i, o in enumerate(parsed):
        if not isinstance(o.value(), Glob):
            continue
        key = o.get_key_element()
        group = key.lstrip("+~")
        g = o.value()
        names = [n for n in options(group) if any(fnmatch.fnmatch(n, p) for p in g.include)
                 and not any(fnmatch.fnmatch(n, p) for p in g.exclude)]
        if not names:
            raise ZooError(f"{o.input_line}: no {group} matches; available: {', '.join(options(group)) or 'none'}")
        overrides[i] = f"{key}={','.join(names)}"
        changed = True
    return changed


def _check_group_sweeps(parsed: list, single: list[str], config_name: str) -> None:
    """Every choice of a swept config group composes, each with the other overrides (a trial's config): a misspelt
    second choice was Hydra's multi-line error after the first trial, and a multirun.yaml left behind."""
    for i in _swept_groups(parsed):
        key = parsed[i].get_key_element()
        for value in list(parsed[i].sweep_string_iterator())[1:]:
            trial = [*single[:i], f"{key}={value}", *single[i + 1:]]
            try:
                compose(trial, config_name, with_hydra=True)
            except Exception as e:  # noqa: BLE001
                raise ZooError(f"{key}={value} (one of the sweep's choices): {explain(e, trial)}") from None


def _force_keys_of_swept_groups(overrides: list[str], parsed: list, single: list[str], config_name: str) -> None:
    """`-m experiment=rl_cartpole,rl_acrobot task.module.total_timesteps=1024`: Hydra composes a multirun's own
    config without the swept groups, where a key that only those groups bring is 'not in struct'. Such a key becomes
    `++key=value` in place (every choice has been composed with the plain override just before, so a misspelt key
    is still caught)."""
    from omegaconf import OmegaConf

    swept = _swept_groups(parsed)
    if not swept:
        return
    fixed = [t for i, (t, o) in enumerate(zip(single, parsed))
             if i not in swept and is_group_choice(o.get_key_element())]
    cfg = compose(fixed, config_name, with_hydra=True)
    for i, o in enumerate(parsed):
        key = o.get_key_element()
        if is_group_choice(key) or key.startswith(("+", "~")):
            continue
        if OmegaConf.select(cfg, key, default=_MISSING_KEY, throw_on_resolution_failure=False) is _MISSING_KEY:
            overrides[i] = f"++{overrides[i]}"


_MISSING_KEY = object()


def check_output_dir(cfg: Any, multirun: bool) -> None:
    """The folder Hydra is about to create (the run's, or the sweep's with -m) must be writable: Hydra's own failure
    there is a traceback per process, after its output folder was half made."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    folder = _select(cfg, key)
    if folder is not None and not str(folder).strip():
        raise ZooError(f"{key} is empty, which puts the run's files into the current folder among yours; name a "
                       f"folder ({key}=runs/first) or leave {key} out for the default")
    if folder:
        check_writable(Path(str(folder)), "the run folder" if not multirun else "the sweep folder",
                       f"set ZOO_OUTPUT_ROOT=<a writable folder> or {key}=<a writable folder>")


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
        start = value.start
        low = int(start) if start is not None and float(start).is_integer() else start
        return f"{o.get_key_element()}={low!r}"
    return f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"


def _append_search_group(overrides: list[str]) -> None:
    """`hparams_search=x` -> `+hparams_search=x` while train.yaml's defaults list has no `hparams_search` entry."""
    from omegaconf import DictConfig, OmegaConf

    for i, o in enumerate(overrides):
        if o.startswith("hparams_search="):
            loaded = OmegaConf.load(CONFIG_DIR / "train.yaml")
            defaults = loaded.get("defaults", []) if isinstance(loaded, DictConfig) else []
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
        if group in GROUPS and name not in options(group) and (renamed := renamed_preset(group, name)):
            return renamed
        if group in GROUPS:
            avail = options(group)
            near = difflib.get_close_matches(name, avail, n=1)
            hint = f"did you mean {group}={near[0]}? " if near else ""
            return (f"unknown {group} '{name}': {hint}available: {', '.join(avail) or 'none'} "
                    f"(`python -m zoo list` shows them)")
    m = re.search(r"Could not override '([^']+)'", text) or re.search(r"Key '([^']+)' is not in struct", text)
    if m:
        key = m.group(1)
        if key in MOVED:
            value = next((o.partition("=")[2] for o in overrides if o.lstrip("+~").startswith(key + "=")), "...")
            return f"{key} has moved: use {MOVED[key].format(value=value)}"
        return (f"unknown config key '{key}': check its spelling in `python -m zoo train --cfg job`"
                f"{_did_you_mean(key, overrides)}; use +{key}=... only to add a new key on purpose")
    m = re.search(r"Could not append to config. An item is already at '([^']+)'", text)
    if m:
        return f"'{m.group(1)}' already exists: set it with {m.group(1)}=... (no +)"
    broken = broken_config_files() if re.search(r"while (parsing|scanning)|could not find expected|mapping values "
                                                r"are not allowed|found character", text) else []
    if broken:
        more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
        return f"config file {broken[0]}{more}; fix the YAML there (`python -m zoo list` marks broken files)"
    return f"bad config or override ({_first_line(e)}); see `python -m zoo train --help`"


# Keys that moved elsewhere: the old spelling gets one line naming the new one instead of "unknown config key".
MOVED = {"task.module.compile_mode": "trainer.compile=true trainer.compile_mode={value} (torch.compile for every task)"}


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


GROUPS = ("task", "experiment", "trainer", "logger", "callbacks", "hydra", "hparams_search")


def is_group_choice(key: str) -> bool:
    """Whether an override's key picks a config group (`task=...`, `hydra/launcher=...`) rather than sets a value."""
    return "/" in key or key.lstrip("+~") in GROUPS
