"""`zoo predict` for vision: top-k labels and probabilities for an image file or every image in a folder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from zoo.errors import ZooError, one_line
from zoo.kit.images import IMAGE_EXTENSIONS, is_image_file
from zoo.vision.data import eval_transform, load_image

# The predict.* keys this task reads (every other predict.* key is refused, not dropped).
PREDICT_KEYS = ("top_k", "batch_size")


def image_files(target: str | None) -> list[Path]:
    if not target:
        raise ZooError("predict needs input=<image file or folder>")
    path = Path(target).expanduser()
    if path.is_file():
        return [path]
    if path.exists() and not path.is_dir():  # /dev/zero, a FIFO, a socket: reading one never ends or means nothing
        raise ZooError(f"input {path} is not a regular file (a device, pipe or socket); pass an image file or a "
                       "folder of images")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if is_image_file(p))
        if files:
            return files
        raise ZooError(f"no images ({', '.join(IMAGE_EXTENSIONS[:4])}, ...) in {path}")
    raise ZooError(f"input not found: {path}; pass an image file or a folder of images")


def predict(model: Any, cfg: Any, input: str | None) -> Iterator[dict]:
    hp = model.hparams
    mode = "L" if hp.in_chans == 1 else "RGB"
    transform = eval_transform(hp.image_size, hp.mean, hp.std)
    k = min(positive(cfg.predict, "top_k", 5), hp.num_classes)
    batch_size = positive(cfg.predict, "batch_size", 32)
    files = image_files(input)
    for start in range(0, len(files), batch_size):
        chunk, images = [], []
        for p in files[start:start + batch_size]:
            try:
                images.append(transform(load_image(p, mode)))
                chunk.append(p)
            except ZooError as e:  # in a folder, a bad file gets its own line and the others go on
                if Path(str(input)).expanduser().is_file():
                    raise
                yield {"file": str(p), "error": one_line(e)}
        if not images:
            continue
        x = torch.stack(images)
        probs = model(x.to(model.device)).softmax(-1)
        top = probs.topk(k, dim=-1)
        for path, p, i in zip(chunk, top.values.tolist(), top.indices.tolist()):
            yield {"file": str(path),
                   "top_k": [{"label": model.class_names[c], "prob": round(q, 4)} for q, c in zip(p, i)]}


def positive(opts: Any, key: str, default: int) -> int:
    """predict.<key> as a whole number of at least 1, or one line."""
    value = opts.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ZooError(f"predict.{key}={value} must be a whole number of at least 1 (default {default})")
    return value
