"""The one way domains write rich samples (images, audio, text, video, figures) to TensorBoard.

Each helper finds the TensorBoard logger among the module's loggers, runs on global rank 0 only, and does nothing
when there is no TensorBoard logger (CSV-only runs, tests, predict).
"""

from __future__ import annotations

from typing import Any

import torch


def _writer(module: Any):
    trainer = getattr(module, "_trainer", None)
    if trainer is None or trainer.global_rank != 0:
        return None
    from lightning.pytorch.loggers import TensorBoardLogger

    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            return logger.experiment
    return None


def _step(module: Any, step: int | None) -> int:
    return module.global_step if step is None else step


def log_image(module: Any, tag: str, image: torch.Tensor, step: int | None = None) -> None:
    """image: (C, H, W) float in [0, 1] or uint8."""
    if (w := _writer(module)) is not None:
        w.add_image(tag, image.detach().cpu(), _step(module, step), dataformats="CHW")


def log_images_grid(module: Any, tag: str, images: torch.Tensor, nrow: int = 8, step: int | None = None,
                    normalize: bool = True) -> None:
    """images: (B, C, H, W); min-max normalised per grid unless normalize=False (then expected in [0, 1])."""
    if (w := _writer(module)) is None:
        return
    from torchvision.utils import make_grid

    grid = make_grid(images.detach().float().cpu(), nrow=nrow, normalize=normalize, pad_value=1.0)
    w.add_image(tag, grid, _step(module, step), dataformats="CHW")


def log_text(module: Any, tag: str, text: str, step: int | None = None) -> None:
    """Markdown text (tables render in TensorBoard's Text tab)."""
    if (w := _writer(module)) is not None:
        w.add_text(tag, text, _step(module, step))


def log_audio(module: Any, tag: str, wave: torch.Tensor, sample_rate: int, step: int | None = None) -> None:
    """wave: (T,) or (1, T) float in [-1, 1]."""
    if (w := _writer(module)) is not None:
        w.add_audio(tag, wave.detach().float().cpu().reshape(1, -1).clamp(-1, 1), _step(module, step),
                    sample_rate=sample_rate)


def log_video(module: Any, tag: str, frames: torch.Tensor, fps: int = 30, step: int | None = None) -> None:
    """frames: (T, H, W, C) uint8 (C = 3, or 1 for grey), as gymnasium's rgb_array renders them.

    Written as an animated GIF in a TensorBoard image summary, which is what `SummaryWriter.add_video` writes, but
    encoded here with Pillow: add_video needs `moviepy.editor`, which moviepy 2.x removed, and then only prints a
    notice and writes nothing.
    """
    if (w := _writer(module)) is None:
        return
    from tensorboard.compat.proto.summary_pb2 import Summary

    video = frames.detach().cpu()
    if video.dtype != torch.uint8:  # floats in [0, 1], as add_video takes them
        video = (video.float() * 255).clamp(0, 255).to(torch.uint8)
    _, h, wd, c = video.shape
    image = Summary.Image(height=h, width=wd, colorspace=c, encoded_image_string=_gif(video.numpy(), fps))
    w._get_file_writer().add_summary(  # what add_video itself calls
        Summary(value=[Summary.Value(tag=tag, image=image)]), _step(module, step))


def _gif(frames: Any, fps: int) -> bytes:
    """(T, H, W, C) uint8 numpy frames -> the bytes of a looping GIF.

    RGB goes through a fixed 6x6x6 palette computed for the whole clip at once (0.2 s for 300 CartPole frames, where
    Pillow's adaptive per-frame quantisation took 2 s); black, white and grey levels of 51 are kept exactly."""
    import io

    import numpy as np
    from PIL import Image

    if frames.shape[-1] == 1:
        images = [Image.fromarray(f[..., 0]) for f in frames]
    else:
        q = (frames[..., :3].astype(np.uint16) * 6) >> 8  # 0..5 per channel
        index = (q[..., 0] * 36 + q[..., 1] * 6 + q[..., 2]).astype(np.uint8)  # (T, H, W)
        levels = range(0, 256, 51)
        palette = [v for r in levels for g in levels for b in levels for v in (r, g, b)]
        images = []
        for f in index:
            im = Image.fromarray(f)
            im.putpalette(palette)  # L -> P
            images.append(im)
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=max(1, round(1000 / fps)),
                   loop=0, optimize=False)  # optimize (a per-frame palette pass) tripled the time
    return buf.getvalue()


def log_figure(module: Any, tag: str, figure: Any, step: int | None = None) -> None:
    """A matplotlib figure (closed after logging)."""
    if (w := _writer(module)) is not None:
        w.add_figure(tag, figure, _step(module, step), close=True)
