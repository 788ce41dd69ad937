"""Every third-party package the zoo's code imports is declared in pyproject.toml (a transitive install that
happens to be there today is not a dependency), in the right place: the core holds what zoo/ imports, each domain's
own packages are its extra (zoo.imports.DOMAIN_EXTRAS names their modules); a task whose extra is missing is one
line; the majors that moved under us are bounded."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions

import pytest

from zoo.imports import DISTRIBUTION, DOMAIN_EXTRAS, check_extra, domain_of
from zoo.testing import ROOT, TINY, zoo_env

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


def _imported_top_level(packages: tuple[str, ...] = PACKAGES) -> set[str]:
    names = set()
    for pkg in packages:
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


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _own_extras(requirement: str) -> set[str]:
    """`lightning-zoo[a,b]` -> {a, b}: the project's extras another extra expands."""
    m = re.fullmatch(rf"{DISTRIBUTION}\[([a-z,]+)\]", requirement)
    return set(m.group(1).split(",")) if m else set()


def _modules(requirements: list[str]) -> set[str]:
    """The top-level modules the installed distributions of these requirements provide."""
    wanted = {_name(r) for r in requirements if not _own_extras(r)}
    return {m for m, ds in packages_distributions().items() if not m.startswith("_")
            and any(d.lower().replace("_", "-") in wanted for d in ds)}


def _owners(module: str) -> set[str]:
    return {d.lower().replace("_", "-") for d in packages_distributions().get(module, [])}


def test_the_distribution_has_a_free_name_and_the_zoo_keeps_its_import_name():
    project = _project()
    assert project["name"] == DISTRIBUTION != "zoo"  # `zoo` on PyPI is an RPC framework
    assert project["scripts"]["zoo"] == "zoo.cli:main"


def test_the_core_holds_only_what_zoo_imports():
    """A package only a domain imports is that domain's extra: a vision-only install carried ~0.87 GB of others."""
    core = {_name(r) for r in _project()["dependencies"]}
    zoo_needs = {o for m in _imported_top_level(("zoo",)) for o in _owners(m)}
    assert core - zoo_needs == set(), f"in the core but imported by no zoo/ module: {sorted(core - zoo_needs)}"


@pytest.mark.parametrize("domain", sorted(DOMAIN_EXTRAS))
def test_each_domain_imports_only_the_core_and_its_extra(domain):
    extras = _project()["optional-dependencies"]
    allowed = {_name(r) for r in _project()["dependencies"] + extras[domain] + extras["deploy"]}
    if domain == "rl":
        allowed |= {_name(r) for r in extras["mujoco"]}
    foreign = {m: sorted(_owners(m)) for m in _imported_top_level((domain,)) if not _owners(m) & allowed}
    assert not foreign, f"{domain}/ imports packages outside the core and the {domain} extra: {foreign}"


def test_the_extras_table_names_the_modules_of_each_domain_extra():
    """zoo.imports.DOMAIN_EXTRAS (what a verb checks) and pyproject's extras (what pip installs) are one list."""
    extras = _project()["optional-dependencies"]
    for domain, modules in DOMAIN_EXTRAS.items():
        assert set(modules) == _modules(extras[domain]) - {"example", "licensing"}, domain


def test_all_holds_every_domain_and_dev_everything_the_suite_needs():
    extras = _project()["optional-dependencies"]
    assert set().union(*map(_own_extras, extras["all"])) == {*DOMAIN_EXTRAS, "mujoco"}
    assert set().union(*map(_own_extras, extras["dev"])) >= {"all", "deploy", "search", "cluster"}
    assert {"pytest", "ruff", "mypy", "import-linter"} <= {_name(r) for r in extras["dev"]}


@pytest.mark.parametrize(("name", "domain"), [
    ("nlp.module.TextClassifier", "nlp"), ("zoo.vision.module.ImageClassifier", "vision"), ("rl", "rl"),
    ("zoo.kit.optim.warmup_schedule", None), ("torch.optim.AdamW", None), ("toy.module.M", None),
    ("gan_of_mine.module.G", None), ("zoo", None)])
def test_domain_of_a_target(name, domain):
    assert domain_of(name) == domain


def test_a_task_of_no_domain_needs_no_extra():
    check_extra("toy.module.M", "toy/task")  # a task of the user's own: nothing to check


BLOCKED = """
import json, sys
from zoo.imports import _Absent
sys.meta_path.insert(0, _Absent(sys.argv[1].split(",")))  # as in an environment without these packages
from zoo.cli import main
from zoo.errors import ZooError
codes = {}
for args in json.loads(sys.argv[2]):
    try:
        main(args)
        codes[args[1]] = 0
    except SystemExit as e:
        codes[args[1]] = e.code
from zoo.kit.hooks import find_hooks
from zoo.core.build import load_module
from zoo.testing import compose
for what, call in [("serve", lambda: find_hooks(package="nlp", name="nlp/bert")),  # an export's model.json
                   ("load", lambda: load_module(compose(["task=nlp/bert"]), "any.ckpt"))]:  # test, predict, serve
    try:
        call()
    except ZooError as e:
        print(f"zoo: error: {e}", file=sys.stderr)
        codes[what] = 2
print(json.dumps(codes))
"""


@pytest.mark.slow
def test_a_task_whose_domain_extra_is_missing_is_one_line_naming_the_pip_command(tmp_path):
    """transformers and timm hidden as if not installed: nlp and speech (transformers), vision (timm) are refused
    in one line each, before any folder is made; rl, whose extra is complete, lists its task."""
    verbs = [["train", "task=nlp/bert", *TINY], ["train", "task=speech/ctc", *TINY],
             ["train", "task=vision/resnet", *TINY], ["list", "rl/ppo"]]
    p = subprocess.run([sys.executable, "-c", BLOCKED, "transformers,timm", json.dumps(verbs)], cwd=tmp_path,
                       env=zoo_env(tmp_path), capture_output=True, text=True,
                       timeout=300)
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    codes = json.loads(p.stdout.strip().splitlines()[-1])
    assert codes == {"task=nlp/bert": 2, "task=speech/ctc": 2, "task=vision/resnet": 2, "rl/ppo": 0,
                     "serve": 2, "load": 2}, p.stderr[-3000:]
    lines = [line for line in p.stderr.splitlines() if line.startswith("zoo: error:")]

    def refusal(task: str, domain: str, missing: str) -> str:
        return (f"zoo: error: task {task} needs the {domain} extra ({missing} not installed): pip install "
                f"'{DISTRIBUTION}[{domain}]' (in a checkout of the zoo: pip install -e '.[{domain}]')")

    nlp = refusal("nlp/bert", "nlp", "transformers")
    assert lines == [nlp, refusal("speech/ctc", "speech", "transformers"),
                     refusal("vision/resnet", "vision", "timm"), nlp, nlp], p.stderr[-3000:]
    assert not (tmp_path / "outputs").exists()
