"""Pictures for TensorBoard: captioned image grids and confusion matrices."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image, ImageDraw

GREEN, RED, GREY = (0, 120, 0), (200, 0, 0), (90, 90, 90)


def _fit(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> str:  # noqa: ANN001 - a PIL font
    """`text`, cut with an ellipsis to fit `width` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "…", font=font) > width:
        text = text[:-1]
    return text + "…"


def captioned_grid(images: torch.Tensor, labels: list[tuple[str, str]], nrow: int = 8,
                   tile: int = 112) -> torch.Tensor:
    """images (B, C, H, W) in [0, 1] and (predicted, true) names -> one (3, H', W') grid.

    Under each tile: the prediction (green when right, red and marked when wrong) and, below it, the true class.
    (PIL's built-in font has no check-mark glyphs: words, not symbols.)"""
    from PIL import ImageFont

    b = images.shape[0]
    cols, rows = min(nrow, b), (b + nrow - 1) // nrow
    font = ImageFont.load_default(size=12)
    line, pad = 15, 3
    cell_w, cell_h = tile + 2 * pad, tile + 2 * line + 2 * pad
    canvas = Image.new("RGB", (cols * cell_w, rows * cell_h), "white")
    draw = ImageDraw.Draw(canvas)
    for i in range(b):
        img = images[i].clamp(0, 1)
        img = img.expand(3, -1, -1) if img.shape[0] == 1 else img[:3]
        arr = (img.permute(1, 2, 0).cpu().numpy() * 255).astype(np.uint8)
        small = arr.shape[0] < tile // 2  # tiny inputs (digits, CIFAR) stay blocky rather than blurred
        pil = Image.fromarray(arr).resize((tile, tile), Image.NEAREST if small else Image.BILINEAR)
        x, y = (i % nrow) * cell_w + pad, (i // nrow) * cell_h + pad
        canvas.paste(pil, (x, y))
        pred, true = labels[i]
        ok = pred == true
        caption = _fit(draw, pred if ok else f"{pred} (wrong)", font, tile)
        draw.text((x, y + tile + 1), caption, fill=GREEN if ok else RED,
                  font=font)
        draw.text((x, y + tile + line), _fit(draw, f"true: {true}", font, tile), fill=GREY, font=font)
    return torch.from_numpy(np.array(canvas)).permute(2, 0, 1)


def confusion_figure(matrix: torch.Tensor, class_names: list[str]):  # noqa: ANN201 - a matplotlib Figure
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = matrix.cpu().numpy()
    n = len(class_names)
    size = max(4, min(16, 0.5 * n + 2.5))
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(m, cmap="Blues")
    total = m.sum()
    acc = f" (accuracy {m.trace() / total:.3f} on {int(total)} images)" if total else ""
    ax.set_title(f"confusion matrix{acc}", fontsize=10)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if n <= 30:
        font = 9 if n <= 15 else 7
        ax.set_xticks(range(n), class_names, rotation=45, ha="right", rotation_mode="anchor", fontsize=font)
        ax.set_yticks(range(n), class_names, fontsize=font)
        for i in range(n):
            for j in range(n):
                if m[i, j]:
                    ax.text(j, i, int(m[i, j]), ha="center", va="center", fontsize=font,
                            color="white" if m[i, j] > m.max() / 2 else "black")
    fig.tight_layout()
    return fig
