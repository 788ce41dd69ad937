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
    """frames: (T, H, W, C) uint8, as gymnasium's rgb_array renders them."""
    if (w := _writer(module)) is None:
        return
    video = frames.detach().cpu().permute(0, 3, 1, 2).unsqueeze(0)  # (1, T, C, H, W)
    try:
        w.add_video(tag, video, _step(module, step), fps=fps)
    except ImportError:  # moviepy missing: a video is a nicety, not worth failing a run
        pass


def log_figure(module: Any, tag: str, figure: Any, step: int | None = None) -> None:
    """A matplotlib figure (closed after logging)."""
    if (w := _writer(module)) is not None:
        w.add_figure(tag, figure, _step(module, step), close=True)
