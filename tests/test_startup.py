"""What a run imports before its first step: packages no task of the run uses stay out (each check in a fresh
process, since an import cannot be undone)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from zoo.testing import ROOT

PROBE = ("import sys; from zoo.core.config import check_overrides; check_overrides(sys.argv[1:]); "
         "import lightning, torchmetrics; print(sorted(m for m in ('transformers', 'tokenizers') if m in sys.modules))")


@pytest.mark.parametrize("task", ["vision/resnet", "gan/dcgan"])
def test_torchmetrics_leaves_transformers_out(task):
    """Lightning imports torchmetrics, which imports transformers whenever it is installed (for BERTScore); the
    zoo's default `hydra.callbacks.lean_imports` leaves it out of that import (an nlp module imports it itself)."""
    proc = subprocess.run([sys.executable, "-c", PROBE, f"task={task}"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout


def test_a_task_can_leave_out_more():
    from zoo.core.config import check_overrides

    assert list(check_overrides(["task=vision/resnet"]).hydra.callbacks.lean_imports.absent) == ["transformers"]
    ppo = check_overrides(["task=rl/ppo"]).hydra.callbacks.lean_imports.absent
    assert {"transformers", "scipy"} <= set(ppo)
