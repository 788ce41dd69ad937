"""Image folders through the real CLI: unreadable files are all named, once, before training starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from zoo.testing import TINY, run_dirs


def image_folder(root: Path, per_class: int = 3) -> None:
    for split in ("train", "val"):
        for c, colour in (("cat", 40), ("dog", 200)):
            (root / split / c).mkdir(parents=True)
            for i in range(per_class):
                Image.new("RGB", (20, 20), color=(colour, i * 30, 0)).save(root / split / c / f"{i}.png")


def test_two_corrupt_images_fail_before_the_first_step_in_one_line(run_zoo, tmp_path):
    root = tmp_path / "images"
    image_folder(root)
    bad = [root / "train" / "dog" / "broken.jpg", root / "val" / "cat" / "empty.png"]
    bad[0].write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    bad[1].write_bytes(b"")
    proc = run_zoo("train", *TINY, "task.data.dataset=imagefolder", f"task.data.root={root}",
                   "task.data.num_workers=0", "task.module.arch=resnet10t", "task.module.pretrained=false",
                   "task.data.image_size=16")
    assert proc.returncode == 2, proc.stdout[-3000:]
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stdout, proc.stdout[-3000:]
    assert "2 unreadable image file(s)" in errors[0] and all(str(p) in errors[0] for p in bad), errors[0]
    assert not any((run / "checkpoints").exists() for run in run_dirs(tmp_path, "vision/resnet"))  # never trained


def test_the_check_can_be_switched_off_for_huge_folders(tmp_path):
    from zoo.vision.data import ImageDataModule

    root = tmp_path / "images"
    image_folder(root, per_class=1)
    (root / "train" / "cat" / "broken.png").write_bytes(b"not a png")
    dm = ImageDataModule(dataset="imagefolder", root=str(root), arch="resnet10t", num_workers=0, check_images=False)
    assert len(dm.train_set) == 3  # listed; it would fail when read, as before


def test_a_truncated_jpeg_is_named_before_training_though_its_header_verifies(tmp_path):
    """PIL's verify() passes a JPEG cut short (it reads headers); the check decodes, so the photo is named at the
    start instead of stopping an epoch half-way."""
    from zoo.errors import ZooError
    from zoo.vision.data import ImageDataModule

    root = tmp_path / "images"
    image_folder(root)
    photo = root / "train" / "dog" / "photo.jpg"
    Image.effect_noise((64, 64), 80).convert("RGB").save(photo, quality=95)
    whole = photo.read_bytes()
    photo.write_bytes(whole[: len(whole) // 2])
    with Image.open(photo) as im:
        im.verify()  # the header check alone lets it through
    with pytest.raises(ZooError, match=r"1 unreadable image file\(s\) under .*truncated or damaged.*photo\.jpg"):
        ImageDataModule(dataset="imagefolder", root=str(root), arch="resnet10t", num_workers=0, pretrained=False)
    photo.write_bytes(whole)
    assert len(ImageDataModule(dataset="imagefolder", root=str(root), arch="resnet10t", num_workers=0,
                               pretrained=False).train_set) == 7
