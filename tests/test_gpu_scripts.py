"""scripts/gpu/: the shell scripts parse, the wheel check finds what a GPU machine without network would miss, and the
preflight knows every package the zoo imports (so a missing one is named in seconds, not found mid-run)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from zoo.testing import ROOT

GPU = ROOT / "scripts" / "gpu"
FIRST_PARTY = {"zoo", "vision", "nlp", "rl", "speech", "gan", "hydra_plugins"}


def load(name: str):  # noqa: ANN201
    spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", sorted(p.name for p in GPU.glob("*.sh")))
def test_shell_scripts_parse(script):
    subprocess.run(["bash", "-n", str(GPU / script)], check=True)


def fake_wheel(folder: Path, name: str, version: str, requires: list[str], tag: str = "py3-none-any") -> None:
    dist = f"{name.replace('-', '_')}-{version}"
    with zipfile.ZipFile(folder / f"{dist}-{tag}.whl", "w") as z:
        meta = [f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}"] + [f"Requires-Dist: {r}" for r in requires]
        z.writestr(f"{dist}.dist-info/METADATA", "\n".join(meta) + "\n")


def test_wheel_check_names_missing_dependencies_and_wrong_tags(tmp_path):
    wheels = load("wheels")
    fake_wheel(tmp_path, "soundfile", "0.14.0", ["cffi>=1.0", "numpy", "pywin32; sys_platform == 'win32'"])
    fake_wheel(tmp_path, "gymnasium", "1.4.0", ["farama-notifications>=0.0.1", "zzz-not-anywhere"])
    fake_wheel(tmp_path, "flashlight-text", "0.0.7", [], tag="cp311-cp311-manylinux_2_17_x86_64")
    problems = "\n".join(wheels.check(tmp_path))
    assert "soundfile-0.14.0-py3-none-any.whl needs cffi>=1.0: neither carried nor preinstalled" in problems
    assert "numpy" not in problems and "pywin32" not in problems  # in the GPU image; not for Linux
    assert "needs zzz-not-anywhere" in problems and "no wheel for hydra-core" in problems
    assert "flashlight_text-0.0.7-cp311-cp311-manylinux_2_17_x86_64.whl does not install on CPython 3.12" in problems
    assert wheels.installs_on_target("cffi-2.1.1-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl")
    assert not wheels.installs_on_target("cffi-2.1.1-cp312-cp312-macosx_11_0_arm64.whl")


def top_level_imports(folder: Path) -> set[str]:
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_preflight_knows_every_third_party_import():
    preflight = load("preflight")
    used = set().union(*(top_level_imports(ROOT / d) for d in FIRST_PARTY))
    third_party = used - set(sys.stdlib_module_names) - FIRST_PARTY - {"__future__"}
    # the deploy, search and cluster extras: verbs the GPU scripts do not run
    extras = {"onnx", "onnxruntime", "onnxscript", "starlette", "uvicorn", "multipart", "sqlalchemy", "submitit"}
    unknown = third_party - set(preflight.REQUIRED) - set(preflight.OPTIONAL) - extras
    assert not unknown, f"add to scripts/gpu/preflight.py (and a wheel if the GPU image lacks it): {sorted(unknown)}"


def test_carried_wheels_are_what_the_gpu_image_lacks():
    wheels = load("wheels")
    carried = {wheels.canonicalize_name(n) for n in wheels.CARRIED}
    assert not carried & wheels.PREINSTALLED  # carry one only for another version
    assert {"hydra-core", "omegaconf", "antlr4-python3-runtime", "soundfile", "cffi", "pycparser"} <= carried
