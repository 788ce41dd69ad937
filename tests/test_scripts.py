"""scripts/: every script answers `--help` without doing anything else, says in its docstring (or header comment) the
command behind its numbers, and is linked from a page under docs/ (the results page whose numbers it produced).

A script is a `.py` with a `__main__` block or a `.sh` with a shebang; scripts/evidence/common.py and scripts/gpu/lib.sh
are libraries the scripts import or source. All `--help` calls run at once, a few at a time, in one test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def scripts() -> list[Path]:
    found = []
    for path in sorted((ROOT / "scripts").rglob("*")):
        if path.suffix == ".py" and 'if __name__ == "__main__":' in path.read_text():
            found.append(path)
        elif path.suffix == ".sh" and path.read_text().startswith("#!"):
            found.append(path)
    return found


def command(path: Path) -> list[str]:
    return [sys.executable, str(path)] if path.suffix == ".py" else ["bash", str(path)]


def test_there_are_scripts_to_check():
    names = {p.name for p in scripts()}
    assert {"bench_rl.py", "gpu_bench.sh", "bench_vision_overhead.py"} <= names and "common.py" not in names


def test_every_script_answers_help_and_does_nothing_else(tmp_path):
    """Each in its own empty folder, with the zoo's output root pointed into it: `--help` must print usage and exit 0,
    leave its folder empty and start no run (no training, no corpus, no GPU check)."""
    env = dict(os.environ, ZOO_OUTPUT_ROOT=str(tmp_path / "outputs"), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    pending, running, done = list(scripts()), [], {}
    while pending or running:
        while pending and len(running) < 4:  # a few at a time: the heavy ones import torch before argparse
            path = pending.pop(0)
            cwd = tmp_path / path.name
            cwd.mkdir()
            running.append((path, time.monotonic(), subprocess.Popen(
                command(path) + ["--help"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)))
        for item in list(running):
            path, started, proc = item
            if proc.poll() is None and time.monotonic() - started < 120:
                continue
            if proc.poll() is None:
                proc.kill()
            done[path] = (proc.wait(), proc.communicate()[0])
            running.remove(item)
        time.sleep(0.05)
    failed = {p.name: out[-500:] for p, (code, out) in done.items() if code != 0}
    assert not failed, failed
    silent = [p.name for p, (_, out) in done.items() if not re.search(r"usage|python |scripts/", out)]
    assert not silent, f"--help printed no usage: {silent}"
    touched = [p.name for p in done if any((tmp_path / p.name).iterdir())]
    assert not touched and not (tmp_path / "outputs").exists(), f"--help wrote files: {touched}"


@pytest.mark.parametrize("path", scripts(), ids=lambda p: p.name)
def test_every_script_says_how_its_numbers_were_made_and_is_linked_from_docs(path: Path):
    text = path.read_text()
    if path.suffix == ".py":
        doc = re.match(r'\s*(?:#[^\n]*\n)*\s*"""(.*?)"""', text, re.S)
        head = doc.group(1) if doc else ""
    else:
        head = "\n".join(line for line in text.splitlines()[1:40] if line.startswith("#"))
    rel = path.relative_to(ROOT).as_posix()
    assert head, f"{rel} has no docstring or header comment"
    assert rel in head or path.name in head, f"{rel}: its docstring names no command that runs it"
    pages = [*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]
    assert any(rel in page.read_text() for page in pages), f"{rel} is linked from no page under docs/"
