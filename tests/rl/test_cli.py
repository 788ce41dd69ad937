"""rl/ppo end to end through `python -m zoo` (subprocesses; marked slow): discrete and continuous training,
test, predict, resume, DDP with 2 CPU processes, and the bad-input lines."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
import torch

from zoo.testing import SIGTERM_AT, run_dirs

pytestmark = pytest.mark.slow

# ~1k steps, 2 evaluations of 2 episodes, CSV logs only: seconds, not minutes.
SHORT = ["task=rl/ppo", "logger=csv", "callbacks.progress_bar=null", "trainer.enable_progress_bar=false",
         "task.env.num_envs=2", "task.module.num_steps=64", "task.module.total_timesteps=1024",
         "task.module.eval_every=4", "task.module.eval_episodes=2", "task.module.video=false"]


def metrics(run: Path) -> list[dict]:
    return list(csv.DictReader(open(run / "csv" / "metrics.csv")))


def env_steps(rows: list[dict]) -> list[float]:
    return [float(r["train/env_steps"]) for r in rows if r.get("train/env_steps")]


def with_(*overrides: str) -> list[str]:
    """SHORT with some of its keys replaced (Hydra refuses the same key twice)."""
    keys = {o.split("=")[0] for o in overrides}
    return [o for o in SHORT if o.split("=")[0] not in keys] + list(overrides)


def test_cartpole_train_test_predict_resume(run_zoo, tmp_path: Path) -> None:
    p = run_zoo("train", *with_("logger=both", "task.module.video=true"), "test_after_fit=false", check=True,
                env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert "val/return" in p.stdout
    # torchmetrics' optional integrations stay out of the whole run (zoo/imports.py, declared by the task)
    assert not re.findall(r"^import time:.*\| +(transformers|torchvision|scipy|matplotlib)$", p.stdout, re.M)
    assert re.search(r"^import time:.*\| +torchmetrics\.metric$", p.stdout, re.M)  # the check above saw them
    run = run_dirs(tmp_path, "rl/ppo")[0]
    # The evaluation episode is in the TensorBoard file as an animated GIF (add_video wrote nothing on moviepy 2).
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"images": 0})
    acc.Reload()
    (video,) = acc.Images("val/video")
    gif = Image.open(io.BytesIO(video.encoded_image_string))
    assert gif.format == "GIF" and gif.n_frames > 5 and gif.size == (300, 200)
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)  # plain containers only
    assert ckpt["rl"]["env_id"] == "CartPole-v1" and ckpt["rl"]["update"] == 8
    assert env_steps(metrics(run))[-1] == 1024

    t = run_zoo("test", f"ckpt_path={last}", check=True)
    assert '"test/return"' in t.stdout

    gif = tmp_path / "agent.gif"
    pr = run_zoo("predict", f"ckpt_path={last}", "predict.episodes=2", f"predict.out={gif}", check=True)
    assert pr.stdout.count('"episode"') == 2 and gif.stat().st_size > 1000

    # Resume the same run to 2048 steps: the global step count continues from 1024, same run dir.
    r = run_zoo("train", f"ckpt_path={run}", "task.module.total_timesteps=2048", check=True)
    steps = env_steps(metrics(run))
    # 2 envs x 64 steps per update, continuing at 1152 (Lightning's CSVLogger rewrites metrics.csv on resume,
    # so only the resumed part is in the file).
    assert steps == [128.0 * i for i in range(9, 17)]
    assert torch.load(last, weights_only=True)["rl"]["update"] == 16 and "finished rl/ppo" in r.stdout

    bad = run_zoo("train", f"ckpt_path={run}", "task.env.id=Acrobot-v1")
    assert bad.returncode == 2
    assert "zoo: error: checkpoint is for CartPole-v1" in bad.stdout and "Traceback" not in bad.stdout


def test_resume_after_mid_epoch_sigterm(run_zoo, tmp_path: Path) -> None:
    """The stopped run fine-tunes from another run's checkpoint, which is moved away before the resume: a resume
    needs only its own checkpoint, and its checkpoints still say what the run began from."""
    run_zoo("train", *with_("task.module.total_timesteps=256"), "test_after_fit=false", check=True)
    source = run_dirs(tmp_path, "rl/ppo")[0] / "checkpoints" / "last.ckpt"
    # 2 envs x 64 steps per update, 4 epochs x 4 minibatches = 16 optimizer steps per update, 4 updates per epoch:
    # the SIGTERM after optimizer step 80 lands after update 5, inside the second epoch.
    args = [*SHORT, "test_after_fit=false", SIGTERM_AT, "+callbacks.sigterm.step=80",
            f"task.module.pretrained={source}"]
    p = run_zoo("train", *args)
    assert p.returncode == 143, p.stdout[-3000:]
    assert f"zoo: weights from {source}" in p.stdout
    (run,) = [r for r in run_dirs(tmp_path, "rl/ppo") if r != source.parent.parent]
    source.rename(tmp_path / "moved.ckpt")
    last = run / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["rl"]["update"] == 5 and ckpt["global_step"] == 80
    assert ckpt["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 1  # mid-epoch, not at its end

    r = run_zoo("train", f"ckpt_path={run}", check=True)
    assert "finished rl/ppo" in r.stdout and "weights from" not in r.stdout
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["rl"]["update"] == 8 and ckpt["global_step"] == 8 * 16
    assert ckpt["pretrained_report"]["source"] == str(source) and ckpt["zoo"]["pretrained"] == str(source)
    # The resumed part continues the step count: updates 6, 7, 8 (2 envs x 64 steps each), to the requested 1024.
    assert env_steps(metrics(run)) == [768.0, 896.0, 1024.0]


def test_pendulum_continuous_with_normalisation(run_zoo, tmp_path: Path) -> None:
    run_zoo("train", *SHORT, "task.env.id=Pendulum-v1", "task.env.normalize_obs=true",
            "task.env.normalize_reward=true", check=True)
    run = run_dirs(tmp_path, "rl/ppo")[0]
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    norm = ckpt["rl"]["normalization"]
    assert ckpt["rl"]["spec"]["action"]["type"] == "box"
    assert norm["obs_rms"]["count"] > 1000 and norm["obs_rms"]["mean"].shape == (3,)
    assert "reward_rms" in norm
    # Reloaded for evaluation, the agent normalises with the saved statistics.
    from zoo.rl.module import PPO

    m = PPO.load_from_checkpoint(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert torch.equal(m.collector.obs_rms.mean, norm["obs_rms"]["mean"])


def test_ddp_two_cpu_processes(run_zoo, tmp_path: Path) -> None:
    # Each rank steps its own envs; env_steps is the global count; the module checks that the ranks' weights
    # agree at the end (raises otherwise), so a clean exit means the gradients were averaged.
    p = run_zoo("train", *SHORT, "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
                "task.env.normalize_obs=true", "test_after_fit=false", check=True, timeout=400)
    run = run_dirs(tmp_path, "rl/ppo")[0]
    steps = env_steps(metrics(run))
    assert steps == [256.0 * i for i in range(1, 5)], p.stdout[-2000:]


@pytest.mark.parametrize("override,message", [
    ("task.env.id=CartPol-v1", "zoo: error: unknown gymnasium environment 'CartPol-v1' (did you mean CartPole-v1"),
    ("task.module.num_minibatches=3", "zoo: error: num_envs * num_steps = 2 * 64 = 128 does not split into 3"),
])
def test_bad_input_is_one_line(run_zoo, override: str, message: str) -> None:
    p = run_zoo("train", *SHORT, override)
    assert p.returncode == 2 and message in p.stdout and "Traceback" not in p.stdout


HOPPER = ["experiment=rl_hopper", "logger=csv", "callbacks.progress_bar=null", "trainer.enable_progress_bar=false",
          "task.module.num_steps=64", "task.module.num_minibatches=2", "task.module.update_epochs=1",
          "task.module.total_timesteps=512", "task.module.eval_every=4", "task.module.eval_episodes=2",
          "task.module.video=false"]


def test_hopper_sigterm_resume_keeps_the_normaliser_then_test_and_export(run_zoo, tmp_path: Path) -> None:
    pytest.importorskip("mujoco")
    # 2 optimizer steps per update: the SIGTERM after step 10 lands after update 5 of 8.
    p = run_zoo("train", *HOPPER, "test_after_fit=false", SIGTERM_AT, "+callbacks.sigterm.step=10", timeout=600)
    assert p.returncode == 143, p.stdout[-3000:]
    run = run_dirs(tmp_path, "rl/ppo")[0]
    last = run / "checkpoints" / "last.ckpt"
    saved = torch.load(last, weights_only=True)["rl"]
    assert saved["update"] == 5 and 320 < float(saved["normalization"]["obs_rms"]["count"]) < 330
    r = run_zoo("train", f"ckpt_path={run}", check=True, timeout=600)
    norm = torch.load(last, weights_only=True)["rl"]["normalization"]
    # Restored, then updated by the 3 remaining rollouts: more observations than the resumed part alone saw.
    assert float(norm["obs_rms"]["count"]) > 512 and float(norm["reward_rms"]["count"]) > 512, r.stdout[-2000:]
    t = run_zoo("test", f"ckpt_path={last}", check=True)
    assert '"test/return"' in t.stdout
    e = run_zoo("export", f"ckpt_path={last}", check=True)
    assert "parity fp32" in e.stdout and "agreement 1.0000" in e.stdout, e.stdout[-2000:]
