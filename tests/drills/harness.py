"""The drills' harness: run one hostile case through the real CLI and check the properties every case must keep.

A row gives the state before (files of the user's, a trained run copied in, a moved run, a bad file), the commands
(a verb and its overrides), and a stimulus (a signal at start-up or mid-work). Every command of every row is held to
the same properties (`check_properties`): its exit code is 0, 2, 130 or 143; no traceback on the console; a failing
command prints exactly one `zoo: error:` or `zoo: stopped` line; every file that existed before keeps its checksum
unless the row names it as the zoo's to change; no temp file (`*.tmp`, `.export*`) is left. A row's own `check`
then compares what it printed with what a clean run gives.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

from PIL import Image

from zoo.testing import ROOT, zoo_env

TESTS = ROOT / "tests"
TOY_TASK = TESTS / "toy_task"
EXIT_CODES = {0, 2, 130, 143}


@dataclass
class Step:
    """One command of a row: `zoo <args>`, the exit code it must give, the one line it must print when it fails
    (a regex), and a signal sent `signal_after` seconds after it starts (None: no signal)."""

    args: list[str]
    rc: int = 0
    line: str | None = None
    signal: str | None = None
    signal_after: float = 0.0
    signal_when: str | None = None  # send the signal once a console line matches this (then `signal_after` more)
    stdin: str | None = None
    before: Callable[[Path], object] | None = None  # a change to the state just before this command (a user's file)
    during: Callable[[Path], object] | None = None  # once `signal_when` matched, before the signal (requests)


@dataclass
class Drill:
    name: str
    steps: list[Step]
    setup: Callable[[Path], None] | None = None  # the state before, made in the row's folder
    may_change: list[str] = field(default_factory=list)  # globs (relative) of files the zoo may rewrite
    check: Callable[[Path, list[str]], None] | None = None  # the row's own verdict on the consoles
    promise: str = ""  # what the row promises (docs/drills.md)


def checksums(folder: Path) -> dict[str, str]:
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(folder))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def env_for(where: Path) -> dict:
    """The toy task (tests/toy_task) on the config path, tests/ on PYTHONPATH (signal_after)."""
    return zoo_env(where, ZOO_CONFIG_PATH=str(TOY_TASK / "configs"), PYTHONPATH=f"{ROOT}:{TOY_TASK}:{TESTS}",
                   OMP_NUM_THREADS="1")


def run_step(where: Path, step: Step, timeout: float = 240) -> tuple[int, str]:
    """Run one command in `where`; its console (stdout and stderr together) and exit code."""
    proc = subprocess.Popen([sys.executable, "-m", "zoo", *step.args], cwd=where, env=env_for(where), text=True,
                            stdin=subprocess.PIPE if step.stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = ""
    if step.signal:
        if step.signal_when:
            seen = _read_until(proc, step.signal_when, timeout)
        try:
            if step.during:
                step.during(where)
            time.sleep(step.signal_after)
        finally:  # a failing `during` still stops the process
            proc.send_signal(getattr(signal, step.signal))
    out, _ = proc.communicate(step.stdin, timeout=timeout)
    return proc.returncode, seen + out


def _read_until(proc: subprocess.Popen, pattern: str, timeout: float) -> str:
    """The console up to the first line matching `pattern` (the whole of it if the process ends first)."""
    assert proc.stdout is not None
    lines, end = [], time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(pattern, line):
            break
    return "".join(lines)


def leftovers(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.name.endswith(".tmp") or p.name.startswith(".export") or ".old-" in p.name)


def check_properties(where: Path, step: Step, rc: int, out: str, before: dict[str, str], may_change: list[str]) -> None:
    tail = out[-4000:]
    assert rc in EXIT_CODES, f"exit {rc} for zoo {' '.join(step.args)}:\n{tail}"
    assert rc == step.rc, f"exit {rc}, not {step.rc}, for zoo {' '.join(step.args)}:\n{tail}"
    assert "Traceback" not in out, f"a traceback on the console:\n{tail}"
    ends = [line for line in out.splitlines() if line.startswith(("zoo: error:", "zoo: stopped"))]
    if rc != 0:
        assert len(ends) == 1, f"{len(ends)} error/stop lines, not one:\n{tail}"
        if step.line:
            assert re.search(step.line, ends[0]), f"{ends[0]!r} does not match {step.line!r}"
    else:
        assert not ends, f"exit 0 with an error line:\n{tail}"
    after = checksums(where)
    lost = [k for k, v in before.items() if after.get(k) != v and not any(fnmatch(k, g) for g in may_change)]
    assert not lost, f"files that existed before, changed or gone: {lost[:5]}\n{tail}"
    assert not leftovers(where), f"temp files left: {leftovers(where)[:5]}"


def play(drill: Drill, where: Path) -> list[str]:
    """Set the row up in `where`, run its steps, check each; the consoles."""
    if drill.setup:
        drill.setup(where)
    consoles = []
    for step in drill.steps:
        if step.before:
            step.before(where)
        before = checksums(where)
        rc, out = run_step(where, step)
        check_properties(where, step, rc, out, before, drill.may_change)
        consoles.append(out)
    if drill.check:
        drill.check(where, consoles)
    return consoles


def copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def user_files(folder: Path) -> None:
    """What a user keeps in a folder: a note, a sub-folder with a picture, a file named like a zoo file."""
    (folder / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "notes.txt").write_text("precious\n")
    (folder / "sub" / "picture.bin").write_bytes(os.urandom(256))
    (folder / "model.json").write_text("{}\n")


# ------------------------------------------------------------------ shared by every row file
TOY = ["task=toy/blobs", "trainer.enable_progress_bar=false"]
VISION = ["task=vision/resnet", "task.data.dataset=imagefolder", "trainer=debug", "trainer.max_epochs=1",
          "trainer.enable_progress_bar=false", "task.data.image_size=16", "task.module.arch=resnet10t",
          "task.module.pretrained=false", "task.data.num_workers=0"]
SIGTERM_AT_STEP_3 = ["+callbacks.sig._target_=signal_after.SignalAfter", "+callbacks.sig.step=3",
                     "+callbacks.sig.name=SIGTERM"]
SIGTERM_IN_TEST = ["+callbacks.sig._target_=signal_after.SignalAfter", "+callbacks.sig.step=1",
                   "+callbacks.sig.name=SIGTERM", "+callbacks.sig.stage=test"]
RUN_FILES = ["run/checkpoints/*", "run/*.yaml", "run/*.json", "run/cli.log", "run/.hydra/*", "run/tensorboard/*",
             "run/.zoo.lock"]


def image_folder(root: Path, classes: tuple[str, ...], per_class: int = 4) -> None:
    for split in ("train", "val"):
        for k, name in enumerate(classes):
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                Image.new("RGB", (20, 20), color=(40 + 150 * k, i * 40, 90)).save(root / split / name / f"{i}.png")


def verb(drill: Drill) -> str:
    """The verb of a row's commands: train unless its first overrides say otherwise."""
    first = drill.steps[0].args
    if first[0] in ("serve", "reproduce", "bench"):
        return first[0]
    if any(a.startswith("export.") for a in first):
        return "export"
    if "input=" in " ".join(first) or any(a.startswith("input=") for a in first):
        return "predict"
    if drill.name.startswith("test-"):
        return "test"
    return "train"


def play_with_assets(drill: Drill, assets: dict[str, Path], where: Path) -> list[str]:
    setup = drill.setup
    drill.setup = (lambda w: setup(w, assets)) if setup else None
    try:
        return play(drill, where)
    finally:
        drill.setup = setup


def play_row(drill: Drill, assets: dict[str, Path], where: Path) -> list[str]:
    """Prefix each command with the row's verb, then play it with the shared assets."""
    name = verb(drill)
    for step in drill.steps:
        step.args = [name, *step.args] if step.args[:1] != [name] else step.args
    return play_with_assets(drill, assets, where)
