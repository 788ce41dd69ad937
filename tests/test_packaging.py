"""Every third-party package the zoo's code imports is declared in pyproject.toml (a transitive install that
happens to be there today is not a dependency), and the majors that moved under us are bounded."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from zoo.testing import ROOT

PACKAGES = ("zoo", "vision", "nlp", "rl", "speech", "gan")


def _declared() -> dict[str, str]:
    """Core dependencies and the optional extras (engines that verbs import lazily, like onnxruntime)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + [d for extra in project.get("optional-dependencies", {}).values() for d in extra]
    out = {}
    for d in deps:
        name = re.split(r"[\[<>=!~; ]", d, maxsplit=1)[0]
        out[name.lower().replace("_", "-")] = d
    return out


def _imported_top_level() -> set[str]:
    names = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names |= {a.name.split(".")[0] for a in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.split(".")[0])
    return names - set(PACKAGES) - set(sys.stdlib_module_names) - {"__future__"}


def test_every_import_is_a_declared_dependency():
    declared = _declared()
    dists = packages_distributions()
    missing = {}
    for name in sorted(_imported_top_level()):
        owners = [d.lower().replace("_", "-") for d in dists.get(name, [])]
        if not any(o in declared for o in owners):
            missing[name] = owners
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_moving_majors_are_bounded():
    declared = _declared()
    for name in ("torch", "torchvision", "torchaudio", "transformers", "datasets", "lightning", "hydra-core"):
        assert "<" in declared[name] or "==" in declared[name], declared[name]
