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
