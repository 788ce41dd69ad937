"""Artifacts are untrusted data: the one check every path, module name and `_target_` read from an artifact passes.

A checkpoint, an export folder (its model.json) or a run folder (config.yaml, env.json, the overrides a checkpoint
records) may come from anyone. What the zoo reads out of one and acts on goes through here first:

- a `_target_` (a class or function Hydra would call) must be on the allow-list: the zoo's own packages (`TRUSTED`),
  less the few parts that load or write whatever they are given (`LOADERS`), or a `_target_` the user's own config
  tree names (the zoo's configs/ and the `ZOO_CONFIG_PATH` folders: the user chose those);
- a module to import (`task.package`, `task.hooks.*`, model.json's `package` and `deploy_hooks`) must be a hook
  module of such a package, or one the config tree names;
- a path must resolve (links followed) inside the artifact's own folder.

A name outside the allow-list is refused in one line that shows it, unless the user passes `trust_artifact=true` on
the command line (the artifact can never say so itself: its recorded copy of the switch is dropped). A path outside
the folder is refused whatever the switch says.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from zoo.core.overrides import override_key, unquote
from zoo.errors import ZooError

# The command-line switch that trusts an artifact's code names (never its paths), as transformers' trust_remote_code.
OPT_IN = "trust_artifact"

# What an artifact may name without the switch: these packages and everything under them. One table: a package the
# zoo gains (or a domain moved under zoo.) is one more entry.
# The domains are zoo.vision, ...: an artifact naming an old top-level `vision.` was renamed (zoo.core.aliases) before
# it gets here, so such a name is another distribution's and never trusted.
PACKAGES = ("zoo",)
TRUSTED = (*PACKAGES,
           "torch.optim",                   # optimisers and torch.optim.lr_scheduler
           "lightning.pytorch.callbacks")   # the Lightning callbacks the configs use
# Parts of the trusted packages that import, build or write whatever their arguments name: an artifact naming one
# could reach any code through it, so they are never trusted from an artifact.
# (zoo.testing's classes are callbacks that stop their own run at a step, which tests resume from: no loader.)
LOADERS = ("zoo.base", "zoo.cli", "zoo.__main__", "zoo.verbs", "zoo.kit.hooks", "zoo.core.owned")
# The modules a task's hooks live in, by convention, under its package (zoo/kit/hooks.py's CONVENTION).
HOOK_MODULES = ("predict", "deploy", "bench", "models", "pretrained")
# Resolvers that turn text into config nodes: a recorded value using one could hide a `_target_` from the check.
NODE_RESOLVERS = ("oc.create", "oc.decode")


def opted_in(args: Iterable[str] | None = None) -> bool:
    """Whether the user passed `trust_artifact=true` on this command line (`args`, else this process's own)."""
    args = sys.argv[1:] if args is None else args
    return any(override_key(a) == OPT_IN and unquote(a.partition("=")[2]).strip().lower() == "true" for a in args)


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def trusted_target(name: Any) -> bool:
    """A `_target_` the zoo instantiates without asking: one the config tree names; an optimiser, scheduler or
    Lightning callback; or a class of the zoo's own packages. Not a function of the zoo's: several write what their
    arguments say where they say (a lexicon, a video, a run file), so only those the config tree names are called."""
    if not isinstance(name, str) or not name:
        return False
    if name in tree()[0]:
        return True
    if not _under(name, TRUSTED) or _under(name, LOADERS):
        return False
    return not _under(name, PACKAGES) or _is_class(name)


def _is_class(name: str) -> bool:
    """Whether `name` (module.attr, in a trusted package: importing it runs only the zoo's code) is a class."""
    import importlib

    module, _, attr = name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), attr)
    except Exception:  # noqa: BLE001 - a name that does not resolve is no class (composing it then fails by itself)
        return False
    return isinstance(found, type)


def trusted_package(name: Any) -> bool:
    """A task package whose hook modules the zoo imports: one of its own, or one the config tree's tasks name."""
    if not isinstance(name, str) or not name:
        return False
    return _under(name, PACKAGES) and not _under(name, LOADERS) or name in tree()[2]


def trusted_module(spec: Any) -> bool:
    """A hook module (`module[:attr]`): one at its conventional place in a trusted package
    (`zoo.vision.deploy`), or one
    the config tree names (`task.hooks.deploy: toy.hooks`)."""
    if not isinstance(spec, str) or not spec:
        return False
    module = spec.partition(":")[0]
    package, _, last = module.rpartition(".")
    return last in HOOK_MODULES and trusted_package(package) or module in tree()[1]


def refusal(source: str, named: list[str]) -> str:
    shown = ", ".join(named[:3]) + (f" (+{len(named) - 3} more)" if len(named) > 3 else "")
    return (f"code outside the zoo's allow-list, named by {source}: {shown}; an artifact is data, so its code is not "
            f"run unless you trust where it came from and pass {OPT_IN}=true")


# ---------------------------------------------------------------------------------------------- overrides, configs
def untrusted_overrides(overrides: Iterable[str]) -> list[str]:
    """The overrides (read from an artifact) that name code outside the allow-list."""
    return [o for o in overrides if not _override_trusted(str(o))]


def check_overrides(overrides: Iterable[str], source: str, args: Iterable[str] | None = None) -> None:
    """One line when overrides read from an artifact name code outside the allow-list, unless the user opted in or
    typed that very override on this command line (`args`, else the process's own: a sweep continued with the
    command that started it names its own callback again)."""
    args = sys.argv[1:] if args is None else list(args)
    typed = {a.lstrip("+") for a in args}
    bad = [o for o in untrusted_overrides(overrides) if o.lstrip("+") not in typed]
    if bad and not opted_in(args):
        raise ZooError(refusal(source, bad))


def _override_trusted(o: str) -> bool:
    key, text = override_key(o), o.partition("=")[2]
    if any(r in text for r in NODE_RESOLVERS):
        return False
    value: Any = unquote(text.strip())
    if "{" in text or "[" in text:
        value = _parsed_value(o)
        if value is _UNPARSED:
            return "_target_" not in text
    return not list(_untrusted_values(key, value))


_UNPARSED = object()


def _parsed_value(o: str) -> Any:
    """The value of an override as Hydra reads it (dicts and lists included); `_UNPARSED` when it does not parse
    (composing it then fails on its own)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_override(o).value()
    except Exception:  # noqa: BLE001 - Hydra's grammar errors
        return _UNPARSED


def _untrusted_values(key: str, value: Any) -> Iterator[str]:
    """`key=value` for each code name under `key` (a dotted path) that the allow-list does not hold."""
    leaf = key.rpartition(".")[2]
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _untrusted_values(f"{key}.{k}" if key else str(k), v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _untrusted_values(key, v)
    elif leaf == "_target_" and not trusted_target(value):
        yield f"{key}={value}"
    elif key == "task.package" and value not in (None, "") and not trusted_package(value):
        yield f"{key}={value}"
    elif key.startswith("task.hooks.") and value not in (None, "") and not trusted_module(value):
        yield f"{key}={value}"


def check_config(config: Any, source: str, args: Iterable[str] | None = None) -> None:
    """One line when a recorded config (a run's config.yaml, a checkpoint's) names code outside the allow-list."""
    if not isinstance(config, dict):
        return
    bad = list(_untrusted_values("", config))
    if bad and not opted_in(args):
        raise ZooError(refusal(source, bad))


def check_module(spec: Any, source: str, args: Iterable[str] | None = None) -> None:
    """One line when a module name read from an artifact (model.json's package or hooks) is not on the allow-list."""
    if not trusted_module(spec) and not opted_in(args):
        raise ZooError(refusal(source, [str(spec)]))


# ---------------------------------------------------------------------------------------------- paths
def inside(folder: Path, name: Any, what: str, fix: str) -> Path:
    """`folder / name` when it resolves (links followed) inside `folder`; one line (`what` names the artifact's
    field, `fix` the way out) for anything else: an absolute path, `..`, a link that leads out, not a file name."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ZooError(f"{what} is {name!r}, not a file name inside {folder}; {fix}")
    base = Path(os.path.realpath(folder))
    found = Path(os.path.realpath(base / name))
    if found == base or not found.is_relative_to(base):
        raise ZooError(f"{what} names {name!r}, a path outside {folder}; an artifact's files lie inside its own "
                       f"folder, and nothing outside it is opened or removed: {fix}")
    return base / name


def links_out(folder: Path) -> list[str]:
    """The entries under `folder` that are links leading outside it (their targets are never read)."""
    base = Path(os.path.realpath(folder))
    out = []
    for p in sorted(base.rglob("*")):
        if p.is_symlink() and not Path(os.path.realpath(p)).is_relative_to(base):
            out.append(str(p.relative_to(base)))
    return out


# ---------------------------------------------------------------------------------------------- the user's tree
def tree() -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """What the user's own config tree names (the zoo's configs/ and the ZOO_CONFIG_PATH folders): its `_target_`s,
    its hook modules (`task.hooks.*`), and its task packages (`task.package`, the top-level package of each
    `task.module._target_`)."""
    from zoo.core.configdirs import config_dirs

    return _tree(tuple(str(d) for d in config_dirs()))


@functools.lru_cache(maxsize=4)
def _tree(dirs: tuple[str, ...]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    import yaml

    targets: set[str] = set()
    modules: set[str] = set()
    packages: set[str] = set()
    for root in dirs:
        for path in sorted(Path(root).rglob("*.yaml")):
            try:
                node = yaml.safe_load(path.read_text())
            except (OSError, ValueError, yaml.YAMLError):
                continue  # a broken file is the config check's to report
            _collect(node, (), targets, modules, packages)
    return frozenset(targets), frozenset(modules), frozenset(packages)


def _collect(node: Any, path: tuple[str, ...], targets: set[str], modules: set[str], packages: set[str]) -> None:
    if isinstance(node, list):
        for v in node:
            _collect(v, path, targets, modules, packages)
        return
    if not isinstance(node, dict):
        return
    for k, v in node.items():
        here = (*path, str(k))
        if k == "_target_" and isinstance(v, str):
            targets.add(v)
            if path[-2:] == ("task", "module") or path == ("module",):
                packages.add(v.split(".")[0])
        elif here[-2:] == ("task", "package") and isinstance(v, str):
            packages.add(v)
        elif here[-2:] == ("task", "hooks") and isinstance(v, dict):
            modules.update(str(s).partition(":")[0] for s in v.values() if s)
        else:
            _collect(v, here, targets, modules, packages)
