"""`zoo predict` for GANs: write generated images from a checkpoint, as files or as one grid, per class if asked.

    python -m zoo predict ckpt_path=X predict.num=64 predict.out=samples/          # 64 PNG files
    python -m zoo predict ckpt_path=X predict.grid=true predict.out=grid.png      # one grid image
    python -m zoo predict ckpt_path=X predict.classes=[3,7] predict.num=16         # conditional: 16 per class

`input` is not used (a generator needs no input); options: num (per class for conditional models), out, grid,
nrow, classes (indices or names; default all for conditional models), seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from zoo.errors import ZooError

# The predict.* keys this task reads (every other predict.* key is refused, not dropped).
PREDICT_KEYS = ("num", "seed", "grid", "nrow", "classes", "out")


def resolve_classes(asked: Any, class_names: list[str], num_classes: int) -> list[int]:
    """Class indices from indices or names; ZooError for a class the model does not have."""
    if asked is None:
        return list(range(num_classes))
    items = [asked] if isinstance(asked, (str, int)) else list(asked)
    out = []
    for a in items:
        if isinstance(a, str) and a in class_names:
            out.append(class_names.index(a))
            continue
        try:
            idx = int(a)
        except (TypeError, ValueError):
            idx = -1
        if not 0 <= idx < num_classes:
            names = ", ".join(class_names[:12]) + (" ..." if len(class_names) > 12 else "")
            raise ZooError(f"class {a!r} is not one of this model's {num_classes} classes (0-{num_classes - 1}: "
                           f"{names}); pick one of those")
        out.append(idx)
    return out


def save_image(img: torch.Tensor, path: Path) -> None:
    """img (C, H, W) in [-1, 1] -> PNG (grey or RGB)."""
    from PIL import Image

    arr = ((img.float().clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).cpu()
    arr = arr[0].numpy() if arr.shape[0] == 1 else arr.permute(1, 2, 0).numpy()
    Image.fromarray(arr).save(path)


def generate(model: Any, num: int, classes: list[int] | None, seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """num images (unconditional) or num per class, in class order; (images (N, C, H, W), labels (N,) or None)."""
    gen = torch.Generator(device=model.device).manual_seed(seed)
    if classes is None:
        return model.sample(num, generator=gen), None
    labels = torch.tensor(classes, device=model.device).repeat_interleave(num)
    return model.sample(len(labels), labels=labels, generator=gen), labels


def predict(model: Any, cfg: Any, input: str | None) -> Iterator[dict]:
    opts = dict(cfg.get("predict") or {})
    num, seed = int(opts.get("num", 64)), int(opts.get("seed", 0))
    grid, nrow = bool(opts.get("grid", False)), opts.get("nrow")
    if num < 1:
        raise ZooError(f"predict.num={num} must be >= 1")
    hp = model.hparams
    conditional = bool(hp.conditional)
    if not conditional and opts.get("classes") is not None:
        raise ZooError("predict.classes: this model is unconditional (trained with conditional=false); drop it")
    classes = resolve_classes(opts.get("classes"), list(hp.class_names or []), hp.num_classes) if conditional else None
    images, labels = generate(model, num, classes, seed)
    out = Path(str(opts.get("out", "samples.png" if grid else "samples"))).expanduser()
    if grid:
        from torchvision.utils import make_grid

        out.parent.mkdir(parents=True, exist_ok=True)
        # conditional: one row per class
        save_image(make_grid(images, nrow=int(nrow or (num if classes else 8)), padding=2, pad_value=1.0), out)
        yield {"grid": str(out), "images": len(images), "classes": classes}
        return
    out.mkdir(parents=True, exist_ok=True)
    names = list(hp.class_names or [])
    for i, img in enumerate(images):
        if labels is None:
            path = out / f"sample_{i:05d}.png"
        else:
            c = int(labels[i])
            (out / names[c]).mkdir(exist_ok=True)
            path = out / names[c] / f"sample_{i:05d}.png"
        save_image(img, path)
        yield {"path": str(path), **({"class": names[int(labels[i])]} if labels is not None else {})}
