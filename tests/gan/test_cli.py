"""End-to-end through `python -m zoo`: train (+ test stage with the floor), TensorBoard, checkpoint contents,
predict, resume, DDP on CPU, and bad input as one line."""

from __future__ import annotations

import re

import pytest
import torch

from zoo.testing import SIGTERM_AT, TINY, run_dirs

FAST = [*TINY, "task=gan/dcgan", "task.module.width=8", "task.module.eval_train_steps=3", "task.data.batch_size=16"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tiny real run shared by the tests below (3 batches, 1 epoch)."""
    import os

    from zoo.testing import make_runner

    tmp = tmp_path_factory.mktemp("gan_cli")
    os.environ["ZOO_CACHE"] = str(tmp_path_factory.getbasetemp() / "zoo-cache")
    run = make_runner(tmp)
    proc = run("train", *FAST, "logger=tensorboard", check=True)
    (run_dir,) = run_dirs(tmp, "gan/dcgan")
    return run, tmp, run_dir, proc.stdout


@pytest.mark.slow
def test_train_reports_fd_floor_and_writes_tensorboard(trained):
    _, _, run_dir, out = trained
    for key in ("test/fd ", "test/fd_floor", "test/fd_samples", "test/coverage_min"):
        assert key in out
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard")).Reload()
    assert {"train/loss_d", "train/loss_g", "train/d_real", "train/d_fake", "val/fd"} <= set(acc.Tags()["scalars"])
    assert "samples/fixed_noise" in acc.Tags()["images"]


@pytest.mark.slow
def test_checkpoint_holds_both_optimisers_ema_and_fixed_noise(trained):
    ckpt = torch.load(trained[2] / "checkpoints" / "last.ckpt", weights_only=True)
    assert len(ckpt["optimizer_states"]) == 2
    sd = ckpt["state_dict"]
    assert "fixed_z" in sd and "ema_updates" in sd and any(k.startswith("generator_ema.") for k in sd)
    assert int(sd["ema_updates"]) == 3  # one G step per batch


@pytest.mark.slow
def test_predict_from_checkpoint(trained):
    run, tmp, run_dir, _ = trained
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    proc = run("predict", f"ckpt_path={ckpt}", "predict.num=4", f"predict.out={tmp / 'samples'}", check=True)
    assert len([line for line in proc.stdout.splitlines() if line.startswith('{"path"')]) == 4
    assert len(list((tmp / "samples").glob("*.png"))) == 4
    bad = run("predict", f"ckpt_path={ckpt}", "predict.classes=[3]")
    assert bad.returncode == 2 and "zoo: error: predict.classes: this model is unconditional" in bad.stdout


@pytest.mark.slow
def test_resume_keeps_ema_and_fixed_noise(trained):
    run, _, run_dir, _ = trained
    before = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    run("train", f"ckpt_path={run_dir}", "trainer.max_epochs=2", "test_after_fit=false", check=True)
    after = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert int(after["ema_updates"]) == 6  # continued from 3, not restarted
    torch.testing.assert_close(after["fixed_z"], before["fixed_z"])


@pytest.mark.slow
def test_resume_after_mid_epoch_sigterm(run_zoo, tmp_path):
    """SIGTERM inside epoch 2 (after its first batch: 4 batches, 8 optimizer steps), then `train ckpt_path=<run dir>`
    finishes the 2 requested epochs of 3 batches: D and G optimisers, EMA and the loops all continue."""
    stopped = run_zoo("train", *FAST, "trainer.max_epochs=2", SIGTERM_AT, "+callbacks.sigterm.step=8")
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    (run_dir,) = run_dirs(tmp_path, "gan/dcgan")
    assert f"ckpt_path={run_dir}" in stopped.stdout
    mid = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    progress = mid["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert mid["global_step"] == 8 and progress["current"]["completed"] == 1 and not progress["is_last_batch"]
    assert int(mid["state_dict"]["ema_updates"]) == 4

    out = run_zoo("train", f"ckpt_path={run_dir}", check=True).stdout
    assert run_dirs(tmp_path, "gan/dcgan") == [run_dir] and "test/fd_floor" in out
    end = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert end["global_step"] == 12 and end["loops"]["fit_loop"]["epoch_progress"]["total"]["processed"] == 2
    assert int(end["state_dict"]["ema_updates"]) == 6  # one G step per batch, none repeated or lost
    # Adam's step counts continued from the mid-epoch state (a restarted optimiser would count 2)
    assert [int(next(iter(o["state"].values()))["step"]) for o in end["optimizer_states"]] == [6, 6]
    torch.testing.assert_close(end["state_dict"]["fixed_z"], mid["state_dict"]["fixed_z"])


@pytest.mark.slow
def test_bad_input_is_one_line(trained, tmp_path):
    run = trained[0]
    proc = run("train", *FAST, "task.data.name=folder", f"task.data.root={tmp_path / 'none'}", cwd=tmp_path)
    assert proc.returncode == 2 and "zoo: error: image folder" in proc.stdout and "Traceback" not in proc.stdout
    import timm

    net = timm.create_model("test_resnet", num_classes=5, in_chans=1)
    torch.save({"state_dict": {f"model.{k}": v for k, v in net.state_dict().items()},
                "hyper_parameters": {"arch": "test_resnet", "num_classes": 5}}, tmp_path / "cls.ckpt")
    proc = run("train", *FAST, f"task.module.eval_classifier={tmp_path / 'cls.ckpt'}", cwd=tmp_path)
    assert proc.returncode == 2 and "predicts 5 classes but the GAN data has 10" in proc.stdout


@pytest.mark.slow
def test_compile_with_the_gradient_penalty_is_one_line_before_lightning_starts(run_zoo, tmp_path):
    proc = run_zoo("train", *FAST, "task.module.loss=wgan_gp", "trainer.compile=true")
    assert proc.returncode == 2, proc.stdout[-2000:]
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1 and "no double backward" in errors[0], proc.stdout[-2000:]
    assert "GPU available" not in proc.stdout and "Traceback" not in proc.stdout
    assert not (tmp_path / "outputs" / "gan").exists()  # the refused run left no folder


@pytest.mark.slow
def test_ddp_cpu_two_ranks(tmp_path, run_zoo):
    proc = run_zoo("train", *FAST, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                   "trainer.limit_train_batches=2", "trainer.limit_val_batches=2", "trainer.limit_test_batches=1",
                   "trainer.max_epochs=1", "trainer.num_sanity_val_steps=0", "trainer.enable_progress_bar=false",
                   "logger=csv", timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "test/fd_floor" in proc.stdout
    # both ranks' samples count: one test batch of 16 real images per rank, as many generated
    assert re.search(r"test/fd_real_samples\s+32\.0000", proc.stdout)
    assert re.search(r"test/fd_samples\s+32\.0000", proc.stdout)
