"""The contract between the zoo and a task: what a task offers the verbs, and the one rule that finds it.

A task is a Hydra file `configs/task/<domain>/<name>.yaml` whose `task.module._target_` (and `task.data._target_`)
build a LightningModule and its data. Everything else is optional and found by convention in the task's package
(`task.package`, else the top-level package of `task.module._target_`):

- predict: `<package>.predict:predict`, `predict(module, cfg, input) -> Iterable[dict]` (`zoo predict`)
- deploy: `<package>.deploy`, a module satisfying `DeployHooks` (`zoo export`, `zoo serve`)
- bench: `<package>.bench`, a module satisfying `BenchHooks` (`zoo bench`)
- models: `<package>.models:list_models`, `list_models() -> list[str]`, the names `arch=` takes (`zoo list <task>`)
- pretrained: `<package>.pretrained`, the task's pretrained-weight loader (the module calls it; listed for discovery)

`task.hooks.<hook>: "module[:attr]"` in the task's config names another place for one hook. A missing hook is None;
the verb that needs it says so in one line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

from zoo.errors import ZooError
from zoo.imports import check_extra

# hook -> (module under the package, attribute or None for the module itself)
CONVENTION: dict[str, tuple[str, str | None]] = {
    "predict": ("predict", "predict"),
    "deploy": ("deploy", None),
    "bench": ("bench", None),
    "models": ("models", "list_models"),
    "pretrained": ("pretrained", None),
}


class DeployHooks(Protocol):
    """What `zoo export` and `zoo serve` need from a task (see vision/deploy.py for a complete example)."""

    FORMATS: tuple[str, ...]  # of onnx, torchscript, exported_program (and the task's NATIVE ones)
    EXPORTER: str             # torch.onnx exporter: dynamo | torchscript
    TOLERANCE: float          # max abs difference on the outputs, fp32

    def export_graph(self, module: Any) -> Any: ...  # zoo.kit.deploy.Graph
    def example_batches(self, module: Any, cfg: Any, n: int) -> list: ...  # [zoo.kit.deploy.Examples]
    def metadata(self, module: Any, cfg: Any) -> dict: ...  # pre/post-processing for model.json
    def extra_files(self, module: Any) -> dict[str, bytes]: ...
    def parity(self, ref: list, out: list) -> dict: ...
    def score(self, outputs: list, targets: list) -> tuple[str, float]: ...

    # Handler(meta, folder, module): content_types, decode(body, type[, budget]) -> arrays (charging the request's
    # zoo.kit.deploy.Budget for its items, tokens, pixels, seconds), encode(outputs, item); optional calibrate(infer),
    # called once when an export is served
    Handler: type


class BenchHooks(Protocol):
    """What `zoo bench` needs from a task: the unit of throughput and how many of it a batch holds."""

    UNIT: str       # "images", "tokens", "env-steps", ...
    BATCH_KEY: str  # the config key `bench.batch_size` sets
    LOSS_KEY: str   # the metric logged as the training loss

    def units(self, module: Any, batch: Any) -> float: ...


@dataclass(frozen=True)
class TaskHooks:
    """A task's hooks, each None when the task does not offer it."""

    task: str
    package: str
    predict: Callable[[Any, Any, Any], Iterable[dict]] | None = None
    deploy: DeployHooks | ModuleType | None = None
    bench: BenchHooks | ModuleType | None = None
    models: Callable[[], list[str]] | None = None
    pretrained: ModuleType | None = None

    def need(self, hook: str, verb: str) -> Any:
        """The hook, or one line saying where the task would have to provide it."""
        found = getattr(self, hook)
        if found is None:
            where, attr = CONVENTION[hook]
            spec = f"{self.package}.{where}" + (f":{attr}" if attr else "")
            raise ZooError(f"task {self.task} has no {hook} hook, which `zoo {verb}` needs: add {spec} "
                           f"(zoo/kit/hooks.py says what it provides), or name one with +task.hooks.{hook}=<module>")
        return found


def package_of(task: Any) -> str:
    """The task's package: `task.package`, else the package of the module's `_target_`: `zoo.<domain>` for the
    zoo's own tasks, the top-level package for a task of the user's (tests/toy_task)."""
    package = _get(task, "package")
    if package:
        return str(package)
    target = str(_get(_get(task, "module") or {}, "_target_") or "")
    if not target:
        raise ZooError(f"task {_get(task, 'name')} has neither task.package nor task.module._target_")
    parts = target.split(".")
    return ".".join(parts[:2]) if parts[0] == "zoo" and len(parts) > 2 else parts[0]


def find_hooks(task: Any = None, *, package: str | None = None, name: str | None = None,
               named: dict[str, str] | None = None) -> TaskHooks:
    """The hooks of a task config (`cfg.task`), or of a package and the hooks it names (what an export folder's
    model.json records)."""
    if task is not None:
        package, name = package_of(task), str(_get(task, "name"))
        named = dict(_get(task, "hooks") or {})
    if package is None:
        raise ValueError("find_hooks needs a task config or a package")
    check_extra(package, name or package)  # a domain without its extra: one line, not a hook's ImportError
    named = named or {}
    found = {hook: _load(package, hook, named.get(hook)) for hook in CONVENTION}
    return TaskHooks(task=name or package, package=package, **found)


def _load(package: str, hook: str, spec: str | None) -> Any:
    where, attr = CONVENTION[hook]
    if spec:
        module_name, _, attr = str(spec).partition(":")
        attr = attr or None
    else:
        module_name = f"{package}.{where}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name) and not spec:
            return None  # the convention's module is absent: the task does not offer this hook
        raise  # a hook that fails to import is a bug: its traceback says where
    if attr is None:
        return module
    if not hasattr(module, attr):
        if spec:
            raise ZooError(f"task.hooks.{hook}={spec}: {module_name} has no {attr}")
        return None
    return getattr(module, attr)


def _get(node: Any, key: str) -> Any:
    if node is None:
        return None
    if isinstance(node, dict):
        return node.get(key)
    return node.get(key) if hasattr(node, "get") else getattr(node, key, None)
