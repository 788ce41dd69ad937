"""The one owner of the trust check (zoo/core/trust.py), held by a scan of the code as tests/test_owned.py holds the
owner of removal: a reader of an artifact that skips the check fails here, naming the file and line."""

from __future__ import annotations

import ast
from pathlib import Path

from zoo.testing import ROOT

PACKAGES = ("zoo", "vision", "nlp", "rl", "speech", "gan", "hydra_plugins")

# Where the code imports a module by a name it holds in a variable, and why that name is not an artifact's.
IMPORTS_BY_NAME = {
    "zoo/base.py": "import_attr itself",
    "zoo/cli.py": "the verb table, a constant",
    "zoo/kit/hooks.py": "a task's hooks: from the composed config, or model.json's names after trust.check_module",
    "zoo/verbs/export.py": "require(): the engines' fixed names",
    "zoo/core/validate.py": "the composed config's _target_s, whose recorded ones passed trust first",
    "zoo/measure/throughput.py": "a callback's option from the composed config",
    "vision/models/packaged.py": "pip-packaged weights, by a fixed table",
    "nlp/models/hub.py": "pip-packaged weights, by a fixed table",
    "speech/whisper_weights.py": "the pip-packaged Whisper weights, a constant",
}
# Where a record's `overrides` are read, and why that is not acting on them.
OVERRIDES_READERS = {
    "zoo/core/presets.py": "recorded_overrides: the one reader, which checks them",
    "zoo/verbs/reproduce.py": "its record's overrides, as recorded_overrides returned them",
    "zoo/core/aliases.py": "renames old names in a record; what it returns is read through recorded_overrides",
}


def sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text()
            for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def imports_by_name(files: dict[str, str]) -> list[str]:
    """Calls of importlib.import_module / import_attr / __import__ in files outside IMPORTS_BY_NAME."""
    found = []
    for name, text in files.items():
        if name in IMPORTS_BY_NAME or name == "zoo/core/trust.py":
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if called in ("import_module", "import_attr", "__import__"):
                    found.append(f"{name}:{node.lineno} {called}")
    return found


def overrides_reads(files: dict[str, str]) -> list[str]:
    """`x["overrides"]` or `x.get("overrides")` read outside the one reader (presets.recorded_overrides)."""
    found = []
    for name, text in files.items():
        if name in OVERRIDES_READERS:
            continue
        for node in ast.walk(ast.parse(text)):
            key = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                key = node.slice
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and node.args:
                key = node.args[0]
            if isinstance(key, ast.Constant) and key.value == "overrides":
                found.append(f"{name}:{node.lineno}")
    return found


def unchecked_artifact_readers(files: dict[str, str]) -> list[str]:
    """Functions that load model.json, or find a task's hooks by the package an export names, without calling
    zoo.core.trust in the same function."""
    found = []
    for name, text in files.items():
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = ast.unparse(fn)
            reads = ("json.loads" in body or "json.load(" in body) and ("model.json" in body or "MANIFEST" in body)
            hooks = any(isinstance(c, ast.Call) and getattr(c.func, "id", "") == "find_hooks"
                        and any(k.arg == "package" for k in c.keywords) for c in ast.walk(fn))
            if (reads or hooks) and "trust." not in body and not _vetted(fn, text):
                found.append(f"{name}:{fn.lineno} {fn.name}")
    return found


def _vetted(fn: ast.AST, text: str) -> bool:
    """A function whose model.json it reads is handed straight to a checked reader (its results are returned to
    one, or it only reads fields that name no path or module): marked in the code with `# trust: <why>`."""
    lines = text.splitlines()[fn.lineno - 1: fn.end_lineno]  # type: ignore[attr-defined]
    return any("# trust:" in line for line in lines)


def test_no_module_is_imported_by_a_name_outside_the_vetted_places():
    """A new `import_module(name)` could import a name read from an artifact: add it to IMPORTS_BY_NAME with the
    reason its name is not an artifact's, or pass the name through zoo.core.trust.check_module first."""
    assert not imports_by_name(sources())


def test_a_records_overrides_are_read_by_the_one_reader():
    """presets.recorded_overrides checks a record's overrides (trust.check_overrides) and drops a recorded opt-in;
    another reader would skip both."""
    assert not overrides_reads(sources())


def test_model_json_and_hooks_by_package_are_read_with_the_check():
    assert not unchecked_artifact_readers(sources())


def test_the_scans_find_what_they_look_for():
    """Each scan fails on code that reads an artifact without the check (so that a passing scan means something)."""
    hostile = {
        "zoo/verbs/new.py": (
            "import importlib, json\n"
            "def serve_it(folder):\n"
            "    meta = json.loads((folder / 'model.json').read_text())\n"
            "    return importlib.import_module(meta['deploy_hooks'])\n"
            "def hooks_of(meta):\n"
            "    return find_hooks(package=meta['package'])\n"
            "def resume(ckpt):\n"
            "    return ckpt['zoo']['overrides'] + ckpt['zoo'].get('overrides')\n"),
    }
    assert imports_by_name(hostile) == ["zoo/verbs/new.py:4 import_module"]
    assert overrides_reads(hostile) == ["zoo/verbs/new.py:8", "zoo/verbs/new.py:8"]
    assert unchecked_artifact_readers(hostile) == ["zoo/verbs/new.py:2 serve_it", "zoo/verbs/new.py:5 hooks_of"]
    checked = {"zoo/verbs/new.py": hostile["zoo/verbs/new.py"].replace(
        "    return find_hooks", "    trust.check_module(meta['package'], 'model.json')\n    return find_hooks")}
    assert unchecked_artifact_readers(checked) == ["zoo/verbs/new.py:2 serve_it"]


def test_the_allow_list_is_one_table():
    """TRUSTED is the one place a package joins the allow-list (the domains may move under zoo.): the checks read
    it, no other module spells the packages out for trust."""
    from zoo.core import trust

    assert set(trust.PACKAGES) <= set(trust.TRUSTED) and "torch.optim" in trust.TRUSTED
    text = (ROOT / "zoo" / "core" / "trust.py").read_text()
    assert text.count("PACKAGES = (") == 1 and '"vision"' not in text  # the domains are under zoo.
    assert Path(trust.__file__).resolve() == ROOT / "zoo" / "core" / "trust.py"
