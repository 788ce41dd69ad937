"""GAN data: digits, image folders (mixed sizes/modes converted, and said), and clear errors."""

from __future__ import annotations

import logging

import pytest
import torch
from PIL import Image

from zoo.errors import ZooError
from zoo.gan.data import GANDataModule


def test_digits_shapes_range_and_split():
    dm = GANDataModule(name="digits", image_size=64, batch_size=16)
    assert dm.model_kwargs() == {"channels": 1, "image_size": 64, "num_classes": 10,
                                 "class_names": [str(i) for i in range(10)]}
    dm.setup()
    assert len(dm.train_set) + len(dm.val_set) == 1797
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (16, 1, 64, 64) and x.min() >= -1 and x.max() <= 1 and x.min() < -0.9
    assert y.dtype == torch.long
    val, floor = dm.test_dataloader()
    assert len(val.dataset) == len(floor.dataset) == len(dm.val_set)  # the floor uses equal sample counts


def _img(path, size, mode):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, color=128 if mode == "L" else (200, 10, 10)).save(path)


def test_folder_mixed_sizes_and_modes_are_converted_and_reported(tmp_path, caplog):
    _img(tmp_path / "cats" / "a.png", (40, 50), "RGB")
    _img(tmp_path / "cats" / "b.png", (32, 32), "L")
    _img(tmp_path / "dogs" / "c.jpg", (100, 64), "RGB")
    _img(tmp_path / "dogs" / "d.png", (32, 32), "RGBA")
    with caplog.at_level(logging.WARNING, logger="zoo.gan.data"):
        dm = GANDataModule(name="folder", root=str(tmp_path), image_size=32, val_fraction=0.5, batch_size=4)
    assert "converting all to RGB 32x32" in caplog.text and "sizes" in caplog.text
    assert dm.model_kwargs()["class_names"] == ["cats", "dogs"] and dm.channels == 3
    dm.setup()
    xs = [dm.train_set[i][0] for i in range(len(dm.train_set))] + [dm.val_set[i][0] for i in range(len(dm.val_set))]
    assert all(x.shape == (3, 32, 32) for x in xs)


def test_flat_folder_is_unlabelled(tmp_path):
    for i in range(3):
        _img(tmp_path / f"{i}.png", (32, 32), "L")
    dm = GANDataModule(name="folder", root=str(tmp_path), val_fraction=0.34)
    assert dm.model_kwargs()["num_classes"] == 0 and dm.channels == 1
    dm.setup()
    assert dm.train_set[0][1] == -1


@pytest.mark.parametrize("kw, msg", [
    (dict(name="imagenet"), "unknown GAN dataset"),
    (dict(image_size=128), "image_size 128"),
    (dict(name="folder"), "needs task.data.root"),
    (dict(name="folder", root="/nonexistent/x"), "does not exist"),
])
def test_bad_data_options(kw, msg):
    with pytest.raises(ZooError, match=msg):
        GANDataModule(**kw)


def test_empty_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("no images here")
    with pytest.raises(ZooError, match="no images"):
        GANDataModule(name="folder", root=str(tmp_path))


def test_missing_torchvision_dataset_is_one_clear_line(tmp_path):
    dm = GANDataModule(name="mnist", data_dir=str(tmp_path), download=False)
    with pytest.raises(ZooError, match="cannot load mnist") as e:
        dm.prepare_data()
    assert "\n" not in str(e.value) and "task.data.name=digits" in str(e.value)


@pytest.mark.parametrize("channels", [None, 1])
def test_unreadable_images_are_all_named_before_training(tmp_path, channels):
    """A truncated PNG opens fine and fails only when decoded (mid-epoch, before the up-front check); a file
    that is no image fails at open. Both are named in one error when the data module is built."""
    import io

    for i in range(4):
        _img(tmp_path / ("cats" if i % 2 else "dogs") / f"{i}.png", (32, 32), "L")
    buf = io.BytesIO()
    Image.effect_noise((32, 32), 64).save(buf, "PNG")
    (tmp_path / "cats" / "truncated.png").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    (tmp_path / "dogs" / "notes.jpg").write_bytes(b"not an image")
    buf = io.BytesIO()  # a JPEG cut short passes verify() (headers only) and fails when decoded
    Image.effect_noise((64, 64), 64).convert("RGB").save(buf, "JPEG")
    (tmp_path / "dogs" / "cut.jpg").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(ZooError, match="3 unreadable image file") as e:
        GANDataModule(name="folder", root=str(tmp_path), channels=channels)
    assert all(n in str(e.value) for n in ("truncated.png", "notes.jpg", "cut.jpg")) and "\n" not in str(e.value)
