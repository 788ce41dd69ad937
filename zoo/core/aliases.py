"""The domains' old top-level names and their names under the zoo's own: `vision.module.ImageClassifier` ->
`zoo.vision.module.ImageClassifier`.

Artifacts written while the domains were top-level packages (`vision`, `nlp`, `rl`, `speech`, `gan`) name them in
their records: a checkpoint's config (`_target_`s, `task.package`, `task.hooks`) and the overrides it carries, a run
folder's config.yaml, an export's model.json (`package`, `deploy_hooks`). Each reader passes what it read through
the matching `rewrite_*` here before it checks or uses a name, so that an old artifact names the packages the zoo
installs today. One table, pure functions on plain containers: nothing is imported, nothing is written back.
"""

from __future__ import annotations

import re
from typing import Any

DOMAINS = ("vision", "nlp", "rl", "speech", "gan")
PACKAGE = "zoo"

# old module prefix -> new one; a name is renamed where it is the prefix itself or continues with "." or ":"
ALIASES: dict[str, str] = {domain: f"{PACKAGE}.{domain}" for domain in DOMAINS}

_HEAD = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?=$|[.:])")


def new_name(name: str) -> str:
    """A dotted name or hook spec under its new package: `nlp.module.X` -> `zoo.nlp.module.X`, `speech` ->
    `zoo.speech`, `gan.deploy:Handler` -> `zoo.gan.deploy:Handler`. Any other name comes back unchanged (torch.optim,
    zoo.kit, a task of the user's own, a module that only begins like a domain: `visionary.x`), so a name already
    renamed stays as it is."""
    m = _HEAD.match(name)
    if m is None or m.group(1) not in ALIASES:
        return name
    return ALIASES[m.group(1)] + name[m.end(1):]


def rewrite_targets(node: Any) -> Any:
    """A copy of a plain config tree (dicts, lists) with every `_target_` renamed; other values as they were."""
    if isinstance(node, dict):
        return {k: new_name(v) if k == "_target_" and isinstance(v, str) else rewrite_targets(v)
                for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return type(node)(rewrite_targets(v) for v in node)
    return node


def rewrite_config(config: dict) -> dict:
    """A run's composed config (a checkpoint's `zoo.config`, config.yaml's `config`): every `_target_`, and
    `task.package` and the `task.hooks` specs, renamed."""
    out = rewrite_targets(config)
    task = out.get("task")
    if isinstance(task, dict):
        if isinstance(task.get("package"), str):
            task["package"] = new_name(task["package"])
        if isinstance(task.get("hooks"), dict):
            task["hooks"] = {k: new_name(v) if isinstance(v, str) else v for k, v in task["hooks"].items()}
    return out


_NAMED_KEY = re.compile(r"^[+~]{0,2}(?:(?:.*\.)?_target_|task\.package|task\.hooks\.[A-Za-z_]+)$")


def rewrite_overrides(overrides: list[str]) -> list[str]:
    """Recorded command-line overrides whose value names a module (`task.module._target_=vision.module.X`,
    `+task.hooks.deploy=vision.deploy`, `+task.package=gan`), renamed; quotes kept; every other override as it was."""
    out = []
    for o in overrides:
        key, eq, value = o.partition("=")
        if eq and _NAMED_KEY.match(key):
            quote = value[0] if value[:1] in ("'", '"') and value[-1:] == value[:1] and len(value) > 1 else ""
            value = f"{quote}{new_name(value[len(quote):len(value) - len(quote)])}{quote}"
        out.append(f"{key}{eq}{value}")
    return out


def rewrite_checkpoint(ckpt: dict) -> dict:
    """A checkpoint as `torch.load` returned it: the zoo record's config and overrides and the module's
    hyper-parameters renamed (a shallow copy: the tensors are the same objects, never copied)."""
    out = dict(ckpt)
    zoo = out.get("zoo")
    if isinstance(zoo, dict):
        zoo = dict(zoo)
        if isinstance(zoo.get("config"), dict):
            zoo["config"] = rewrite_config(zoo["config"])
        if isinstance(zoo.get("overrides"), list):
            zoo["overrides"] = rewrite_overrides([str(o) for o in zoo["overrides"]])
        out["zoo"] = zoo
    for key in ("hyper_parameters", "datamodule_hyper_parameters"):
        if isinstance(out.get(key), dict):
            out[key] = rewrite_targets(out[key])
    return out


def rewrite_run_record(record: dict) -> dict:
    """A run folder's config.yaml, loaded: its config and overrides renamed."""
    out = dict(record)
    if isinstance(out.get("config"), dict):
        out["config"] = rewrite_config(out["config"])
    if isinstance(out.get("overrides"), list):
        out["overrides"] = rewrite_overrides([str(o) for o in out["overrides"]])
    return out


def rewrite_export(meta: dict) -> dict:
    """An export's model.json, loaded: `package` and `deploy_hooks` renamed. An export older than the `package`
    key names only its task (`vision/resnet`): its package is `export_package(meta)`."""
    out = dict(meta)
    for key in ("package", "deploy_hooks"):
        if isinstance(out.get(key), str):
            out[key] = new_name(out[key])
    return out


def export_package(meta: dict) -> str:
    """The package an export's hooks live in: model.json's `package`, else its task's domain, under today's name."""
    return new_name(str(meta.get("package") or str(meta.get("task", "")).split("/")[0]))
