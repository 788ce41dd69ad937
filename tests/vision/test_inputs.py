"""Images that are not what they look like: a phone's portrait photo (EXIF orientation), an empty class folder, a
picture too large to decode, a device named as input; and predict options out of range."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from PIL import Image

from zoo.errors import ZooError


def portrait(path: Path) -> Image.Image:
    """A 30x20 picture stored as a phone stores a portrait photo: pixels sideways, EXIF Orientation=6 (rotate 90
    clockwise to view); returns the picture as it is meant to be seen."""
    seen = Image.new("RGB", (20, 30), (0, 0, 255))
    seen.paste((255, 0, 0), (0, 0, 20, 10))  # red on top
    stored = seen.transpose(Image.Transpose.ROTATE_90)  # what the camera wrote: 30 wide, the red at the left
    exif = Image.Exif()
    exif[0x0112] = 6
    stored.save(path, exif=exif, quality=95)
    return seen


def test_a_phone_photo_is_read_upright(tmp_path):
    from zoo.kit.images import open_image

    seen = portrait(tmp_path / "phone.jpg")
    got = open_image(tmp_path / "phone.jpg", "RGB")
    assert got.size == seen.size == (20, 30)
    top, bottom = np.asarray(got)[:8].mean((0, 1)), np.asarray(got)[-8:].mean((0, 1))
    assert top[0] > 200 and top[2] < 60 and bottom[2] > 200, (top, bottom)
    Image.new("RGB", (30, 20), (9, 8, 7)).save(tmp_path / "plain.jpg")
    assert open_image(tmp_path / "plain.jpg", "RGB").size == (30, 20)


def test_an_empty_class_folder_is_refused(tmp_path):
    from zoo.vision.data import _folder_classes

    for name in ("ants", "bees"):
        (tmp_path / "train" / name).mkdir(parents=True)
        Image.new("RGB", (8, 8)).save(tmp_path / "train" / name / "a.png")
    (tmp_path / "train" / "wasps").mkdir()
    (tmp_path / "train" / "wasps" / "notes.txt").write_text("not an image")
    with pytest.raises(ZooError, match=r"class folder\(s\) without images: wasps"):
        _folder_classes(tmp_path / "train", tmp_path)


def huge_png(path: Path, w: int = 20000, h: int = 20000) -> None:
    """A PNG whose header says w x h (the pixels are never needed: PIL's bound is checked on the header)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                     + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_a_picture_too_large_to_decode_is_one_line(tmp_path):
    from zoo.vision.data import load_image

    huge_png(tmp_path / "big.png")
    with pytest.raises(ZooError, match="too large to decode"):
        load_image(tmp_path / "big.png")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_a_device_or_fifo_as_input_is_not_a_regular_file(tmp_path):
    from zoo.vision.predict import image_files

    os.mkfifo(tmp_path / "fifo")
    for target in ("/dev/zero", str(tmp_path / "fifo")):
        with pytest.raises(ZooError, match="is not a regular file"):
            image_files(target)


@pytest.mark.parametrize("value", [-3, 0, "x", True])
def test_top_k_below_one_is_one_line(value):
    from zoo.vision.predict import positive

    with pytest.raises(ZooError, match=r"predict.top_k=.* must be a whole number of at least 1"):
        positive(OmegaConf.create({"top_k": value}), "top_k", 5)
    assert positive(OmegaConf.create({}), "top_k", 5) == 5


@pytest.mark.parametrize("override, line", [
    ("predict.topk=1", "reads no predict.topk, so it would be dropped; did you mean predict.top_k?"),
    ("+predict.banana=1", "reads no predict.banana"),
])
def test_a_predict_key_the_task_does_not_read_is_refused(override, line):
    from zoo.verbs.evaluate import check_predict_keys

    with pytest.raises(ZooError, match=line.replace("?", r"\?")):
        check_predict_keys("predict", "vision/resnet", [override])
    check_predict_keys("predict", "vision/resnet", ["predict.top_k=1", "predict.batch_size=4"])
    with pytest.raises(ZooError, match="options are for `zoo predict`"):
        check_predict_keys("test", "vision/resnet", ["predict.top_k=1"])


def test_every_task_declares_its_predict_keys():
    import importlib

    for package in ("vision", "nlp", "gan", "rl", "speech"):
        keys = importlib.import_module(f"zoo.{package}.predict").PREDICT_KEYS
        assert keys and all(isinstance(k, str) for k in keys), package
