"""vision/resnet end to end through `python -m zoo` in a subprocess: train -> test -> predict, resume, DDP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from zoo.testing import TINY, run_dirs

pytestmark = pytest.mark.slow
FAST = [*TINY, "task.data.image_size=16", "task.module.arch=resnet10t"]


def _events(run_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _hparams(run_dir: Path) -> dict[str, bytes]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    found = {}
    for f in (run_dir / "tensorboard").glob("events.*"):
        for event in EventFileLoader(str(f)).Load():
            for v in event.summary.value:
                if v.metadata.plugin_data.plugin_name == "hparams":
                    found[v.tag] = v.metadata.plugin_data.content
    return found


def test_train_then_test_and_predict(run_zoo, tmp_path):
    out = run_zoo("train", *FAST, check=True).stdout
    (run,) = run_dirs(tmp_path, "vision/resnet")
    assert "zoo: finished vision/resnet" in out and "test/acc" in out and f"tensorboard --logdir" in out
    assert (run / "config.yaml").is_file() and (run / ".hydra" / "overrides.yaml").is_file()
    best = list((run / "checkpoints").glob("best-*.ckpt"))
    assert len(best) == 1 and (run / "checkpoints" / "last.ckpt").is_file()
    ckpt = torch.load(best[0], weights_only=True)  # plain containers only
    assert ckpt["zoo"]["task"] == "vision/resnet" and ckpt["hyper_parameters"]["pretrained"] is False
    assert ckpt["hyper_parameters"]["class_names"] == [str(i) for i in range(10)]

    tags = _events(run).Tags()
    assert {"train/loss_step", "val/acc", "test/acc"} <= set(tags["scalars"])
    assert "val/predicted_true" in tags["images"]
    assert "test/confusion_matrix" in tags["images"]
    hparams = _hparams(run)
    assert b"task.module.arch" in hparams["_hparams_/session_start_info"]  # the flattened config
    assert b"final/test/acc" in hparams["_hparams_/experiment"]  # against the final metrics

    result = run_zoo("test", f"ckpt_path={best[0]}", "trainer.limit_test_batches=2", check=True).stdout
    metrics = json.loads([line for line in result.splitlines() if line.startswith("{")][-1])
    assert 0.0 <= metrics["test/acc"] <= 1.0

    from PIL import Image

    (tmp_path / "imgs").mkdir()
    for i in range(3):
        Image.new("L", (20, 20), color=40 * i).save(tmp_path / "imgs" / f"{i}.png")
    pred = run_zoo("predict", f"ckpt_path={best[0]}", f"input={tmp_path / 'imgs'}", "predict.top_k=3", check=True)
    rows = [json.loads(line) for line in pred.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3 and all(len(r["top_k"]) == 3 for r in rows)
    assert abs(sum(p["prob"] for p in rows[0]["top_k"])) <= 1.0001


def test_resume_continues_the_same_run(run_zoo, tmp_path):
    run_zoo("train", *FAST, check=True)
    (run,) = run_dirs(tmp_path, "vision/resnet")
    first = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    out = run_zoo("train", f"ckpt_path={run}", "trainer.max_epochs=2", check=True).stdout
    assert run_dirs(tmp_path, "vision/resnet") == [run]  # same run directory
    second = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    epochs = lambda c: c["loops"]["fit_loop"]["epoch_progress"]["total"]["processed"]  # noqa: E731
    assert first["global_step"] == 3 and second["global_step"] == 6 and epochs(second) == epochs(first) + 1
    assert second["lr_schedulers"][0]["last_epoch"] == 6  # scheduler continued, not restarted
    assert "Restoring states from the checkpoint" in out
    assert len(list((run / "tensorboard").glob("events.*"))) >= 2  # same TensorBoard folder
    # `ckpt_path=last` finds the same run again
    run_zoo("train", "ckpt_path=last", "trainer.max_epochs=3", check=True)
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 9


def test_resume_refuses_a_checkpoint_of_another_task(run_zoo, tmp_path):
    run_zoo("train", *FAST, check=True)
    (run,) = run_dirs(tmp_path, "vision/resnet")
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    ckpt["zoo"]["task"] = "gan/dcgan"
    torch.save(ckpt, tmp_path / "other.ckpt")
    proc = run_zoo("train", f"ckpt_path={tmp_path / 'other.ckpt'}")
    assert proc.returncode == 2 and "is from task gan/dcgan, not vision/resnet" in proc.stdout


def test_ddp_two_cpu_processes_share_config_and_run_dir(run_zoo, tmp_path):
    out = run_zoo("train", *FAST, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                  "trainer.max_epochs=1", "trainer.limit_train_batches=3", "trainer.limit_val_batches=2",
                  "trainer.limit_test_batches=2", "trainer.num_sanity_val_steps=0", check=True, timeout=600).stdout
    assert "MEMBER: 2/2" in out
    (run,) = run_dirs(tmp_path, "vision/resnet")
    assert out.count("zoo: finished vision/resnet") == 1
    assert len(list((run / "checkpoints").glob("best-*.ckpt"))) == 1
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["zoo"]["config"]["trainer"]["devices"] == 2


def test_multirun_with_ddp_runs_each_job_once(run_zoo, tmp_path):
    out = run_zoo("train", "-m", *FAST, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                  "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
                  "task.module.optimizer.lr=1e-3,3e-4", check=True, timeout=900).stdout
    sweeps = list((tmp_path / "outputs" / "multirun" / "vision" / "resnet").iterdir())
    assert len(sweeps) == 1
    jobs = sorted(p.name for p in sweeps[0].iterdir() if p.is_dir())
    assert jobs == ["0", "1"], jobs  # no nested sweeps started by the DDP children
    assert out.count("zoo: finished vision/resnet") == 2
    lrs = {torch.load(sweeps[0] / j / "checkpoints" / "last.ckpt", weights_only=True)["zoo"]["config"]["task"]
           ["module"]["optimizer"]["lr"] for j in jobs}
    assert lrs == {1e-3, 3e-4}
