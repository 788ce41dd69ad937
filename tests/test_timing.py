"""`zoo train`'s time line: where a run's time went (zoo/measure/timing.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from zoo.measure import timing
from zoo.testing import ROOT, zoo_env

LINE = re.compile(r"zoo: time: ([\d.]+) s = start-up ([\d.]+) \+ data ([\d.]+) \+ fit ([\d.]+) "
                  r"\(validation ([\d.]+), checkpoints ([\d.]+)\)(?: \+ test ([\d.]+))?(?: \+ other ([\d.]+))?$")


def parse(line: str) -> dict[str, float]:
    m = LINE.fullmatch(line.strip())
    assert m, line
    keys = ("total", "start-up", "data", "fit", "validation", "checkpoints", "test", "other")
    return {k: float(v) for k, v in zip(keys, m.groups()) if v is not None}


def assert_adds_up(p: dict[str, float]) -> None:
    """The top-level parts sum to the total (each printed to 0.1 s; `other` only from 0.1 s)."""
    top = sum(p.get(k, 0.0) for k in ("start-up", "data", "fit", "test", "other"))
    assert abs(top - p["total"]) <= 0.05 * 6 + 0.1, p
    assert p["validation"] + p["checkpoints"] <= p["fit"] + 0.1, p


def test_process_age_reads_proc(tmp_path):
    ticks = os.sysconf("SC_CLK_TCK")
    stat, uptime = tmp_path / "stat", tmp_path / "uptime"
    stat.write_text("4242 (python -m zoo) S " + " ".join(["0"] * 18) + f" {30 * ticks} 0 0\n")
    uptime.write_text("100.50 7.0\n")
    assert timing.process_age(str(stat), str(uptime)) == pytest.approx(70.5)
    assert timing.process_age(str(tmp_path / "none"), str(uptime)) is None
    assert 0 < timing.process_age() < 24 * 3600  # this process, on Linux


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def step(self, batch: tuple, stage: str) -> torch.Tensor:
        loss = self.net(batch[0]).pow(2).mean()
        self.log(f"{stage}/loss", loss)
        return loss

    def training_step(self, batch: tuple, i: int) -> torch.Tensor:
        return self.step(batch, "train")

    def validation_step(self, batch: tuple, i: int) -> None:
        self.step(batch, "val")

    def test_step(self, batch: tuple, i: int) -> None:
        self.step(batch, "test")

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def test_the_parts_of_a_fit_and_test_are_timed_and_add_up(tmp_path, capsys):
    split = timing.TimeSplit()
    loader = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=8)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=str(tmp_path),
                         callbacks=[split, ModelCheckpoint(dirpath=tmp_path, monitor="val/loss")])
    module = Tiny()
    trainer.fit(module, loader, loader)
    trainer.test(module, loader, ckpt_path="best")
    line = timing.report_time(trainer.callbacks)
    assert capsys.readouterr().out.strip().splitlines()[-1] == line
    p = parse(line)
    assert_adds_up(p)
    exact = split.parts()
    assert exact["validation"] > 0 and exact["checkpoints"] > 0 and exact["test"] > 0 and exact["other"] < 1.0
    assert timing.TimeSplit().began >= split.test_end  # the next run in this process starts its clock here
    assert timing.report_time([]) is None


@pytest.mark.slow
def test_zoo_train_prints_where_its_time_went(tmp_path):
    ext = tmp_path / "ext"
    shutil.copytree(Path(__file__).parent / "toy_task", ext)
    env = zoo_env(tmp_path, ZOO_CONFIG_PATH=str(ext / "configs"), PYTHONPATH=f"{ROOT}:{ext}", OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "zoo", "train", "task=toy/blobs", "trainer.max_epochs=2",
                           "trainer.enable_progress_bar=false"], cwd=tmp_path, env=env, text=True, timeout=300,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.returncode == 0, proc.stdout[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("zoo: time:")]
    p = parse(line)
    assert_adds_up(p)
    assert p["start-up"] > 0.5 and "test" in p  # imports and Hydra take a while; the toy task has test data
    assert proc.stdout.strip().splitlines()[-1] == line  # the run's last line, under its summary
