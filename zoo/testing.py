"""Test helpers for every domain: run the real CLI in a subprocess, compose configs in-process.

Imported by tests/conftest.py (fixture `run_zoo`) and by domain tests (`from zoo.testing import TINY, compose`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Short-run overrides every end-to-end test can start from (CPU, a few batches, one epoch).
TINY = ["trainer=debug", "trainer.max_epochs=1", "trainer.enable_progress_bar=false"]

# No test may touch the network: hub lookups go straight to the (empty) local cache.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def zoo_env(cwd: Path, **extra: str) -> dict:
    env = dict(os.environ)
    env.update({"ZOO_OUTPUT_ROOT": str(cwd / "outputs"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT),
                "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "2")})
    env.update(extra)
    return env


def make_runner(tmp_path: Path):
    """run("train", "task=...", ...) -> CompletedProcess with stdout+stderr in .stdout, run in tmp_path."""

    def run(*args: str, cwd: Path | None = None, timeout: float = 300, check: bool = False,
            env: dict | None = None) -> subprocess.CompletedProcess:
        where = cwd or tmp_path
        proc = subprocess.run([sys.executable, "-m", "zoo", *args], cwd=where, env=zoo_env(where, **(env or {})),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"zoo {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
        return proc

    return run


def compose(overrides: list[str] | None = None):
    """The composed train config, with a fixed run_dir (Hydra's run-dir interpolation needs a Hydra app)."""
    from zoo.config import compose as compose_config
    from zoo.config import register_resolvers

    register_resolvers()
    return compose_config(["run_dir=/tmp/zoo-test-run", *(overrides or [])])


def run_dirs(root: Path, task: str) -> list[Path]:
    base = root / "outputs" / task
    return sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(("test_", "predict_"))) \
        if base.is_dir() else []
