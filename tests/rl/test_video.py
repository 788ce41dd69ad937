"""zoo.kit.tb.log_video writes a real, playable GIF into a TensorBoard event file (torch's add_video needs
moviepy.editor, which moviepy 2.x removed: it then printed a notice and wrote nothing)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from zoo.kit import tb


def moving_square(t: int, h: int, w: int) -> torch.Tensor:
    """(T, H, W, 3) uint8: a white square moving right on black, so every frame differs."""
    frames = torch.zeros(t, h, w, 3, dtype=torch.uint8)
    for i in range(t):
        frames[i, 4:12, i * 2:i * 2 + 8] = 255
    return frames


def read_images(logdir: Path, tag: str) -> list:
    acc = EventAccumulator(str(logdir), size_guidance={"images": 0})
    acc.Reload()
    assert tag in acc.Tags()["images"], acc.Tags()
    return acc.Images(tag)


def test_log_video_writes_an_animated_gif_to_the_event_file(tmp_path: Path) -> None:
    logger = TensorBoardLogger(str(tmp_path), name="", version="")
    module = SimpleNamespace(_trainer=SimpleNamespace(global_rank=0, loggers=[logger]), global_step=7)
    tb.log_video(module, "val/video", moving_square(10, 16, 40), fps=20)
    logger.experiment.flush()

    (event,) = read_images(tmp_path, "val/video")
    assert event.step == 7 and (event.height, event.width) == (16, 40)
    gif = Image.open(io.BytesIO(event.encoded_image_string))
    assert gif.format == "GIF" and gif.size == (40, 16) and gif.n_frames == 10
    assert gif.info["duration"] == 50 and gif.info["loop"] == 0
    gif.seek(3)
    frame = torch.from_numpy(np.array(gif.convert("RGB")))
    assert torch.equal(frame, moving_square(10, 16, 40)[3])  # lossless for few colours


def test_log_video_without_tensorboard_logger_or_off_rank_zero_does_nothing(tmp_path: Path) -> None:
    logger = TensorBoardLogger(str(tmp_path), name="", version="")
    for trainer in (SimpleNamespace(global_rank=1, loggers=[logger]), SimpleNamespace(global_rank=0, loggers=[]), None):
        tb.log_video(SimpleNamespace(_trainer=trainer, global_step=0), "val/video", moving_square(2, 16, 16))
    assert not list(tmp_path.rglob("events.out.tfevents*"))


def test_predict_refuses_a_video_name_it_cannot_write_before_playing_any_episode(tmp_path: Path, monkeypatch):
    """predict.out=<file>.ckpt played every episode, then died in an imageio traceback."""
    import pytest
    from omegaconf import OmegaConf

    import zoo.rl.predict as rl_predict
    from zoo.errors import ZooError

    monkeypatch.setattr(rl_predict, "run_episodes", lambda *a, **k: pytest.fail("episodes played"))
    model = SimpleNamespace(env_cfg={"id": "CartPole-v1", "kwargs": {}},
                            collector=SimpleNamespace(policy=lambda agent, deterministic: None), agent=None)
    (tmp_path / "clips").mkdir()
    for out, says in (("agent.ckpt", "as .gif or .mp4"), ("conf.yaml", "as .gif or .mp4"), ("clips.gif", None),
                      (str(tmp_path / "clips"), "as .gif or .mp4")):
        cfg = OmegaConf.create({"run_dir": str(tmp_path), "predict": {"out": out}})
        if says is None:
            continue
        with pytest.raises(ZooError, match=says):
            list(rl_predict.predict(model, cfg, None))
    (tmp_path / "dir.gif").mkdir()
    with pytest.raises(ZooError, match="is a folder"):
        rl_predict.check_video_path(str(tmp_path / "dir.gif"))


def test_a_video_is_written_whole_under_its_name_or_not_at_all(tmp_path: Path, monkeypatch):
    import pytest

    from zoo.rl.evaluate import save_video

    frames = moving_square(4, 16, 16).numpy()
    assert save_video(frames, str(tmp_path / "a.gif")) == str(tmp_path / "a.gif")
    assert Image.open(tmp_path / "a.gif").n_frames == 4
    import imageio.v2 as imageio

    monkeypatch.setattr(imageio, "mimsave", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        save_video(frames, str(tmp_path / "b.gif"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gif"]


def test_glfw_warnings_go_to_the_log_not_the_console(caplog, recwarn):
    import logging
    import warnings

    from zoo.rl.evaluate import quiet_gl

    with caplog.at_level(logging.DEBUG, logger="zoo.rl.evaluate"), quiet_gl():
        warnings.warn_explicit("(65550) b'X11: The DISPLAY environment variable is missing'", UserWarning,
                               "/site-packages/glfw/__init__.py", 917, module="glfw")
    assert not [w for w in recwarn if "DISPLAY" in str(w.message)]
    assert "DISPLAY environment variable" in caplog.text
