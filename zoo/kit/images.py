"""Image files shared by the image domains (vision, gan): which suffixes count, and a check of every file before
training starts, so that a folder with unreadable images fails once, up front, naming all of them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from zoo.errors import ZooError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")


def is_image_file(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_EXTENSIONS


def unreadable_images(paths: Iterable[Path]) -> list[Path]:
    """The files PIL cannot open or decode. Decoding, not verify(): verify() reads a JPEG's headers only, so a
    truncated photo passes it and would stop training mid-epoch. A JPEG is decoded at 1/8 scale (draft mode), which
    still reads the whole stream (960 photos of 224 px: 0.6 s, against 0.08 s for verify())."""
    from PIL import Image

    bad = []
    for p in paths:
        try:
            with Image.open(p) as im:
                im.draft("RGB", (max(1, im.width // 8), max(1, im.height // 8)))
                im.load()
        except Exception:  # noqa: BLE001 - truncated data, bad Huffman tables, ...: each one means unusable
            bad.append(Path(p))
    return bad


def check_images(paths: Iterable[Path], where: str) -> None:
    """Raise one ZooError naming the unreadable files (the first few and a count) under `where`."""
    bad = unreadable_images(paths)
    if bad:
        shown = ", ".join(str(p) for p in bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise ZooError(f"{len(bad)} unreadable image file(s) under {where} (not an image, truncated or damaged): "
                       f"{shown}; remove or replace them")


WIDE_GREY = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")  # PIL's 16/32-bit integer and float greyscale modes


EXIF_ORIENTATION = 0x0112  # the EXIF tag a camera or phone writes instead of rotating the pixels


def upright(im: Any) -> Any:
    """`im` the way it is meant to be seen: a photo whose EXIF Orientation says "rotated" (6: how a phone stores a
    portrait shot) has its pixels turned accordingly, as every viewer shows it; others come back unchanged."""
    from PIL import ImageOps

    try:
        orientation = im.getexif().get(EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 - a damaged EXIF block: the pixels as stored
        return im
    return ImageOps.exif_transpose(im) if orientation in range(2, 9) else im


def convert(im: Any, mode: str) -> Any:
    """`im.convert(mode)` upright (its EXIF orientation applied, `upright`) and at the image's real values. PIL clips
    16-bit (and 32-bit, float) greyscale to 0..255 on the way to "L"/"RGB", so a 16-bit PNG or TIFF became almost
    white; such an image is scaled to 8 bits first (16-bit: /257, as PIL itself reduces 48/64-bit colour; float:
    0..1). 16-bit colour PNGs PIL already reads as RGB(A)."""
    im = upright(im)
    if im.mode not in WIDE_GREY:
        return im.convert(mode)
    import numpy as np
    from PIL import Image

    a = np.asarray(im, dtype=np.float64)
    top = 1.0 if im.mode == "F" and a.size and a.max() <= 1.0 else 255.0 if a.size and a.max() <= 255 else 65535.0
    if a.size and a.max() > 65535:  # 32-bit values beyond 16 bits: the image's own range
        top = float(a.max())
    grey = np.clip(np.rint(a / top * 255.0), 0, 255).astype(np.uint8)
    return Image.fromarray(grey).convert(mode)


def open_image(path: str | Path, mode: str) -> Any:
    """The image file in `mode` (decoded now, the file closed), upright and at its real values (see `convert`)."""
    from PIL import Image

    with Image.open(path) as im:
        return convert(im, mode)
