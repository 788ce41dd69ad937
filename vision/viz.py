"""Pictures for TensorBoard: captioned image grids and confusion matrices."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image, ImageDraw


def captioned_grid(images: torch.Tensor, captions: list[str], colours: list[tuple], nrow: int = 8,
                   tile: int = 80) -> torch.Tensor:
    """images (B, C, H, W) in [0, 1] -> one (3, H', W') grid, each tile with its caption underneath."""
    b = images.shape[0]
    cols, rows = min(nrow, b), (b + nrow - 1) // nrow
    cap_h = 14
    canvas = Image.new("RGB", (cols * tile, rows * (tile + cap_h)), "white")
    draw = ImageDraw.Draw(canvas)
    for i in range(b):
        img = images[i].clamp(0, 1)
        img = img.expand(3, -1, -1) if img.shape[0] == 1 else img[:3]
        arr = (img.permute(1, 2, 0).cpu().numpy() * 255).astype(np.uint8)
        pil = Image.fromarray(arr).resize((tile, tile), Image.NEAREST)
        x, y = (i % nrow) * tile, (i // nrow) * (tile + cap_h)
        canvas.paste(pil, (x, y))
        draw.text((x + 2, y + tile), captions[i][:14], fill=colours[i])
    return torch.from_numpy(np.array(canvas)).permute(2, 0, 1)


def confusion_figure(matrix: torch.Tensor, class_names: list[str]):  # noqa: ANN201 - a matplotlib Figure
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = matrix.cpu().numpy()
    n = len(class_names)
    size = max(4, min(16, 0.45 * n + 2))
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(m, cmap="Blues")
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if n <= 30:
        ax.set_xticks(range(n), class_names, rotation=90, fontsize=7)
        ax.set_yticks(range(n), class_names, fontsize=7)
        for i in range(n):
            for j in range(n):
                if m[i, j]:
                    ax.text(j, i, int(m[i, j]), ha="center", va="center", fontsize=6,
                            color="white" if m[i, j] > m.max() / 2 else "black")
    fig.tight_layout()
    return fig
