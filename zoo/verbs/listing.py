"""`python -m zoo list [task]`: tasks, presets, searches, launchers; a task's model names."""

from __future__ import annotations

from zoo.errors import ZooError


def main(rest: list[str]) -> None:
    from zoo.core.config import options
    from zoo.core.presets import RECOMMENDED

    if len(rest) > 1:  # `zoo list vision/resnet extra`: the extra word was ignored in silence
        raise ZooError(f"zoo list takes at most one task, not {' '.join(rest)}; run `python -m zoo list <task>` once "
                       "per task")
    if rest:
        return _list_task(rest[0])
    tasks, presets = options("task"), options("experiment")
    width = max(map(len, [*tasks, *presets])) + 2
    print("tasks (task=...):")
    for name in tasks:
        print(f"  {name:<{width}} {_described('task', name)}")
    print("experiment presets (experiment=...; * marks the recommended one of each family, docs/usage.md):")
    for name in presets:
        mark = "*" if name in RECOMMENDED.values() else " "
        print(f"{mark} {name:<{width}} {_described('experiment', name)}")
    unmarked = sorted({name.split("_")[0] for name in presets} - set(RECOMMENDED))
    if unmarked:  # a family whose measured recipe is its default task, not a preset
        print(f"  ({', '.join(unmarked)}: the default task is the recommended recipe; no preset was measured above it)")
    print("trainer presets (trainer=...): " + ", ".join(options("trainer")))
    print("searches (-m hparams_search=...): " + ", ".join(options("hparams_search")))
    print("launchers (hydra/launcher=...): " + ", ".join(n for n in options("hydra/launcher")))
    print("`python -m zoo list <task>` shows a task's model names")


def _described(group: str, name: str) -> str:
    """The file's one-line description, or BROKEN and where, for a file that is not valid YAML."""
    from zoo.core.config import config_file, describe, yaml_problem

    problem = yaml_problem(config_file(group, name))
    return f"BROKEN: {problem}" if problem else describe(group, name)


def _list_task(task: str) -> None:
    from omegaconf import OmegaConf

    from zoo.core.config import config_file, options, yaml_problem
    from zoo.kit.hooks import find_hooks

    if task not in options("task"):
        raise ZooError(f"unknown task '{task}': available: {', '.join(options('task'))}")
    problem = yaml_problem(config_file("task", task))
    if problem:
        raise ZooError(f"config file {problem}; fix the YAML there")
    cfg = OmegaConf.load(config_file("task", task))
    models = find_hooks(cfg.task).models
    if models is None:
        print(f"{task}: no model list")
        return
    print(f"models for {task} (task.module.arch=... or the task's model option):")
    for name in models():
        print(f"  {name}")
