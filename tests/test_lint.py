"""The linters the project declares (pyproject.toml): ruff, mypy, the import-linter contracts, no import cycles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from zoo.testing import ROOT

BIN = Path(sys.executable).parent


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_is_clean():
    proc = _run(sys.executable, "-m", "ruff", "check", ".", "--output-format", "concise")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_mypy_is_clean():
    """The type checker over zoo/ ([tool.mypy] in pyproject.toml: the files, the libraries it reads types from). Its
    cache (.cache/mypy) makes a second run take seconds; the first one analyses torch and Lightning (about a minute)."""
    proc = _run(sys.executable, "-m", "mypy")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout


def test_import_contracts_are_kept():
    """zoo/ in layers (cli > verbs > kit > core > measure > base > errors), domains never import a verb or the CLI,
    the zoo imports no domain, no domain imports another."""
    proc = _run(str(BIN / "lint-imports"), "--no-cache")
    assert proc.returncode == 0 and "BROKEN" not in proc.stdout, proc.stdout[-4000:] + proc.stderr[-2000:]


def _cycles(graph, modules: set[str]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), over imports at any depth of a file."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v) & modules:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(modules):
        if m not in index:
            visit(m)
    return out


def test_the_zoo_import_graph_has_no_cycle():
    import grimp

    graph = grimp.build_graph("zoo", cache_dir=None)
    # the zoo's own layers; the domains (zoo.vision, ... since they moved under zoo.) are checked by their contracts
    domains = tuple(f"zoo.{d}" for d in ("vision", "nlp", "rl", "speech", "gan"))
    modules = {m for m in graph.modules if m.startswith("zoo") and not m.startswith(domains)}
    # a package's __init__ importing its own submodule (re-export) is not a cycle between files
    assert [c for c in _cycles(graph, modules) if not any(m + "." in " ".join(c) for m in c)] == []
