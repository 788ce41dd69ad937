"""The drills of numbers that are not numbers, of inputs that are not what they look like, and of tracebacks where one
line is due (harness.py holds the properties every row keeps). NaN rows check that no metric and no best checkpoint
is reported and that every metrics file left parses as strict JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from harness import TOY, Drill, Step, copy_run, play_row


def rows() -> list[Drill]:
    return [
        # non-finite numbers
        Drill("train-nan-loss-stops-the-run",
              [Step([*TOY, "task.module.lr=1e30", "hydra.run.dir=run"], 2,
                    r"training loss is nan at step \d+ .*diverged.*learning rate")],
              check=lambda w, c: (no_result(w, c[0]), nothing_left(w / "run")),
              promise="a loss that turns NaN stops the run at that step (exit 2, one line naming the step and the "
                      "likely causes); no metric, no best checkpoint, nothing left of a run that saved none"),
        Drill("predict-a-checkpoint-with-nan-weights",
              [Step(["ckpt_path=run", "input=1,1,1,1"], 2, "holds non-finite weights")],
              setup=nan_weights, check=lambda w, c: no_result(w, c[0]),
              promise="predict of a diverged run's checkpoint is one line that says so, not a \"prob\": NaN"),
        Drill("export-a-checkpoint-with-nan-weights",
              [Step(["ckpt_path=run", "export.format=torchscript", "export.out=exp"], 2, "holds non-finite weights")],
              setup=nan_weights, check=lambda w, c: no_result(w, c[0]),
              promise="export of such a checkpoint names the weights, not the parity check"),
    ]


# ------------------------------------------------------------------------------------------ setups and checks
def nan_weights(where: Path, assets: dict) -> None:
    """The toy run with every checkpoint's first weight set to NaN (as a diverged run leaves them)."""
    import torch

    copy_run(assets["toy"], where / "run")
    for ckpt in (where / "run" / "checkpoints").glob("*.ckpt"):
        state = torch.load(ckpt, weights_only=True)
        first = next(k for k, v in state["state_dict"].items() if v.is_floating_point())
        state["state_dict"][first] = torch.full_like(state["state_dict"][first], float("nan"))
        torch.save(state, ckpt)


def nothing_left(run: Path) -> None:
    assert not run.exists(), sorted(str(p) for p in run.rglob("*"))


def strict(text: str) -> object:
    def bare(word: str) -> None:
        raise AssertionError(f"{word} in a JSON file")

    return json.loads(text, parse_constant=bare)


def no_result(where: Path, console: str) -> None:
    """No metric printed, no best checkpoint named, no NaN printed, every metrics file strict JSON."""
    assert "best checkpoint:" not in console and "zoo: finished" not in console, console[-1500:]
    printed = [line for line in console.splitlines() if line.startswith("{")]
    assert not re.search(r":\s*(NaN|Infinity)", console) and not printed, console[-1500:]
    for f in where.rglob("*.json"):
        strict(f.read_text())


@pytest.mark.parametrize("drill", rows(), ids=lambda d: d.name)
def test_drill(drill: Drill, assets, tmp_path):
    play_row(drill, assets, tmp_path)
