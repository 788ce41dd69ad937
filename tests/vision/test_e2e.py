"""vision/resnet end to end through `python -m zoo` in a subprocess: train -> test -> predict, resume, DDP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from zoo.testing import ABORT_AT_EXIT, SIGTERM_AT, TINY, run_dirs

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
    assert "zoo: finished vision/resnet" in out and "test/acc" in out and "tensorboard --logdir" in out
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
    # the seed from a variable (a SLURM array's index): recorded as the number it gave, so the resume needs no
    # variable (Hydra's own record read `seed='7'`, text, and the resume then failed in the data split)
    run_zoo("train", *FAST, "seed='${oc.decode:${oc.env:ZOO_TEST_SEED}}'", env={"ZOO_TEST_SEED": "7"}, check=True)
    (run,) = run_dirs(tmp_path, "vision/resnet")
    first = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert "seed=7" in first["zoo"]["overrides"] and first["zoo"]["config"]["seed"] == 7
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
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stdout[-2000:]
    assert "is from task gan/dcgan" in errors[0] and "vision/resnet" in errors[0]


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
    """Each job's DDP child aborts in its shutdown after its run finished (as gloo's teardown can): a warning, and
    the sweep goes on. Job 0's watch, left running, once ended job 1 (rank 0 exit 1, job 1's child orphaned)."""
    out = run_zoo("train", "-m", *FAST, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                  "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1",
                  "task.module.optimizer.lr=1e-3,3e-4", ABORT_AT_EXIT, check=True, timeout=600).stdout
    sweeps = list((tmp_path / "outputs" / "multirun" / "vision" / "resnet").iterdir())
    assert len(sweeps) == 1
    jobs = sorted(p.name for p in sweeps[0].iterdir() if p.is_dir())
    assert jobs == ["0", "1"], jobs  # no nested sweeps started by the DDP children
    assert out.count("zoo: finished vision/resnet") == 2
    assert out.count("zoo: warning: DDP rank 1") == 2 and "killed by SIGABRT) after the run finished" in out
    lrs = {torch.load(sweeps[0] / j / "checkpoints" / "last.ckpt", weights_only=True)["zoo"]["config"]["task"]
           ["module"]["optimizer"]["lr"] for j in jobs}
    assert lrs == {1e-3, 3e-4}


def _backbone(ckpt: dict) -> dict:
    return {k: v for k, v in ckpt["state_dict"].items()
            if k.startswith("model.") and not k.startswith("model.fc.") and not k.endswith("num_batches_tracked")}


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def test_resume_after_mid_epoch_sigterm_with_gradual_unfreezing(run_zoo, tmp_path):
    """6 epochs of 3 batches, the backbone frozen until epoch 4; SIGTERM in epoch 3 after its first batch (step 10),
    then `train ckpt_path=<run dir> trainer.max_epochs=6` finishes all 18 steps: the backbone (weights and BatchNorm
    statistics) stays frozen through the rest of epoch 3 and opens in epoch 4."""
    args = [*FAST, "trainer.max_epochs=6", "task.data.batch_size=32", "task.module.finetune=gradual",
            "task.module.unfreeze_epoch=4", "callbacks.model_checkpoint.save_top_k=-1", "test_after_fit=false"]
    stopped = run_zoo("train", *args, SIGTERM_AT, "+callbacks.sigterm.step=10")
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    (run,) = run_dirs(tmp_path, "vision/resnet")
    assert f"ckpt_path={run}" in stopped.stdout
    mid = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    progress = mid["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert mid["global_step"] == 10 and mid["epoch"] == 3
    assert progress["current"]["completed"] == 1 and not progress["is_last_batch"]

    run_zoo("train", f"ckpt_path={run}", "trainer.max_epochs=6", check=True)
    assert run_dirs(tmp_path, "vision/resnet") == [run]
    end = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert end["global_step"] == 18  # as an uninterrupted run: 6 epochs x 3 batches, none repeated or lost
    assert end["loops"]["fit_loop"]["epoch_progress"]["total"]["processed"] == 6
    assert end["lr_schedulers"][0]["last_epoch"] == 18
    epoch_end = {int(p.name[len("best-epoch"):][:3]): torch.load(p, weights_only=True)
                 for p in (run / "checkpoints").glob("best-epoch*.ckpt")}
    assert sorted(epoch_end) == list(range(6))
    assert _same(_backbone(epoch_end[0]), _backbone(mid))  # frozen from the start to the SIGTERM
    assert _same(_backbone(mid), _backbone(epoch_end[3]))  # and through the rest of epoch 3 after the resume
    opened = _backbone(epoch_end[4])
    assert not any(torch.equal(opened[k], v) for k, v in _backbone(epoch_end[3]).items())  # all of it trains
