"""The contract between the zoo and its tasks: one lookup for a task's hooks, one place for each default."""

from __future__ import annotations

import inspect

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from zoo.core.config import options
from zoo.kit.hooks import find_hooks
from zoo.testing import compose

TASKS = options("task")


@pytest.mark.parametrize("task", TASKS)
def test_every_task_offers_every_hook_by_the_one_rule(task):
    hooks = find_hooks(compose([f"task={task}"]).task)
    assert hooks.package == "zoo." + task.split("/")[0]
    assert callable(hooks.predict) and callable(hooks.models) and hooks.models()
    assert hooks.deploy is not None and hooks.deploy.FORMATS and hasattr(hooks.deploy, "Handler")
    assert hooks.bench is not None and callable(hooks.bench.units) and hooks.bench.UNIT
    assert hooks.pretrained is not None


def test_a_missing_hook_is_one_line_naming_where_it_goes(tmp_path, monkeypatch):
    (tmp_path / "bare_task").mkdir()
    (tmp_path / "bare_task" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    hooks = find_hooks({"name": "bare/task", "module": {"_target_": "bare_task.module.M"}})
    assert hooks.deploy is None and hooks.predict is None
    from zoo.errors import ZooError

    with pytest.raises(ZooError, match=r"task bare/task has no deploy hook, which `zoo export` needs: add "
                                       r"bare_task\.deploy"):
        hooks.need("deploy", "export")


def _yaml_vs_signature(task: str) -> list[str]:
    cfg = compose([f"task={task}"])
    raw = OmegaConf.to_container(cfg.task.module, resolve=False)
    params = inspect.signature(get_class(raw["_target_"]).__init__).parameters
    drift = []
    for key, value in raw.items():
        p = params.get(key)
        if p is None or p.default is inspect.Parameter.empty or isinstance(value, dict):
            continue
        if isinstance(value, str) and "${" in value:
            continue  # derived by interpolation: the YAML owns it
        default = list(p.default) if isinstance(p.default, tuple) else p.default
        if default != value:
            drift.append(f"{task} {key}: yaml {value!r} vs python {p.default!r}")
    return drift


@pytest.mark.parametrize("task", TASKS)
def test_module_defaults_in_python_match_the_task_yaml(task):
    """A module built in Python (load_from_checkpoint of an old run, a notebook) must get what the command line
    gets: where both the YAML and the signature give a default, they agree."""
    assert _yaml_vs_signature(task) == []
