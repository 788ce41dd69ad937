"""The CLI through its real entry point: help, list, and one-line errors for bad input."""

from __future__ import annotations

import subprocess
import sys

import torch

from zoo.testing import ROOT


def test_help_is_fast_and_imports_no_torch():
    code = "import sys, zoo.cli; zoo.cli.main(['--help']); print('TORCH' if 'torch' in sys.modules else 'LIGHT')"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "usage: python -m zoo" in out and "reproduce <run dir|file.ckpt>" in out
    assert out.strip().endswith("LIGHT")


def test_list_shows_tasks_presets_and_models(run_zoo):
    out = run_zoo("list", check=True).stdout
    assert "vision/resnet" in out and "vision_cifar10" in out and "debug" in out
    assert "searches (-m hparams_search=...): gan, nlp, rl, speech, vision" in out and "zoo_slurm" in out
    out = run_zoo("list", "vision/resnet", check=True).stdout
    assert "resnet50" in out


def _one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stdout[-2000:]
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1, proc.stdout[-2000:]
    assert "Traceback" not in proc.stdout
    return errors[0]


def test_unknown_task_lists_what_exists(run_zoo):
    line = _one_line_error(run_zoo("train", "task=vision/resnt"))
    assert "unknown task 'vision/resnt'" in line and "vision/resnet" in line


def test_unknown_preset(run_zoo):
    line = _one_line_error(run_zoo("train", "experiment=nope"))
    assert "unknown experiment 'nope'" in line and "vision_cifar10" in line


def test_mistyped_override_key_suggests_the_right_one(run_zoo):
    line = _one_line_error(run_zoo("train", "trainer.max_epoch=3"))
    assert "unknown config key 'trainer.max_epoch'" in line and "did you mean trainer.max_epochs" in line


def test_mistyped_key_inside_a_sweep(run_zoo):
    line = _one_line_error(run_zoo("train", "-m", "task.module.optimizr.lr=1e-3,1e-4"))
    assert "task.module.optimizr" in line


def test_unknown_command(run_zoo):
    assert "unknown command 'trian'" in _one_line_error(run_zoo("trian"))


def test_missing_checkpoint(run_zoo, tmp_path):
    line = _one_line_error(run_zoo("test", f"ckpt_path={tmp_path / 'nope.ckpt'}"))
    assert "checkpoint not found" in line


def test_corrupt_checkpoint(run_zoo, tmp_path):
    """Random bytes, a truncated file and a pickle of arbitrary objects: each one line that says what it is
    (the folder's name holds "corrupt", so the assertions look past the path)."""
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"\x00not a checkpoint" * 10)
    for verb in ("test", "train"):
        line = _one_line_error(run_zoo(verb, f"ckpt_path={bad}"))
        assert "is not a zoo checkpoint (not a PyTorch file" in line and "Weights only" not in line
    good = tmp_path / "good.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1000)}}, good)
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(good.read_bytes()[:-200])  # the zip directory at the end is gone
    line = _one_line_error(run_zoo("test", f"ckpt_path={cut}"))
    assert "cut.ckpt is not a zoo checkpoint (not a PyTorch file" in line
    garbled = bytearray(good.read_bytes())
    garbled[200:260] = b"\xff" * 60  # inside the pickled record, the archive itself intact
    (tmp_path / "garbled.ckpt").write_bytes(bytes(garbled))
    assert "garbled.ckpt is corrupt (" in _one_line_error(run_zoo("test", f"ckpt_path={tmp_path / 'garbled.ckpt'}"))
    pickled = tmp_path / "pickled.ckpt"
    torch.save({"state_dict": {}, "obj": _Opaque()}, pickled)
    line = _one_line_error(run_zoo("test", f"ckpt_path={pickled}"))
    assert "was refused: loading it needs code execution (it references" in line and "weights_only=True" in line


class _Opaque:
    pass


def test_foreign_checkpoint(run_zoo, tmp_path):
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}, "epoch": 0}, foreign)
    assert "not written by zoo" in _one_line_error(run_zoo("test", f"ckpt_path={foreign}"))


def test_resume_last_without_runs(run_zoo):
    assert "no earlier run of vision/resnet" in _one_line_error(run_zoo("train", "ckpt_path=last"))


def test_cfg_job_prints_the_composed_config(run_zoo):
    out = run_zoo("train", "--cfg", "job", "task.module.arch=resnet34", check=True).stdout
    assert "arch: resnet34" in out and "max_epochs" in out


def test_bad_image_folder_paths(run_zoo, tmp_path):
    missing = tmp_path / "nowhere"
    line = _one_line_error(run_zoo("train", "task.data.dataset=imagefolder", f"task.data.root={missing}"))
    assert "image folder not found" in line
    for split in ("train", "val"):
        for cls in ("cat", "dog"):
            (tmp_path / "empty" / split / cls).mkdir(parents=True)
    line = _one_line_error(run_zoo("train", "task.data.dataset=imagefolder", f"task.data.root={tmp_path / 'empty'}",
                                   "task.module.pretrained=false"))
    assert "no images" in line
