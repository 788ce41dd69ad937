"""Sampling to files / one grid, per class for conditional models; bad class requests are one line."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from zoo.errors import ZooError
from zoo.gan.module import DCGAN
from zoo.gan.predict import predict, resolve_classes

NAMES = [str(i) for i in range(10)]


def model(conditional: bool) -> DCGAN:
    return DCGAN(arch="dcgan_small", nz=8, width=8, conditional=conditional, num_classes=10, class_names=NAMES).eval()


def run(m, **opts):
    with torch.inference_mode():  # as `zoo predict` calls it
        return list(predict(m, OmegaConf.create({"predict": opts}), None))


def test_files_unconditional(tmp_path):
    rows = run(model(False), num=5, out=str(tmp_path / "s"))
    assert len(rows) == 5 and all(Image.open(r["path"]).size == (32, 32) for r in rows)
    assert Image.open(rows[0]["path"]).mode == "L"


def test_grid_per_class(tmp_path):
    rows = run(model(True), num=3, classes=[2, "7"], grid=True, out=str(tmp_path / "g.png"))
    assert rows == [{"grid": str(tmp_path / "g.png"), "images": 6, "classes": [2, 7]}]
    w, h = Image.open(tmp_path / "g.png").size
    assert (w, h) == (3 * 34 + 2, 2 * 34 + 2)  # one row per class, 2 px padding


def test_files_per_class(tmp_path):
    rows = run(model(True), num=2, out=str(tmp_path / "s"))
    assert len(rows) == 20 and {r["class"] for r in rows} == set(NAMES)
    assert (tmp_path / "s" / "9").is_dir()


def test_same_seed_same_images(tmp_path):
    m = model(False)
    a = run(m, num=2, out=str(tmp_path / "a"), seed=3)
    b = run(m, num=2, out=str(tmp_path / "b"), seed=3)
    assert Image.open(a[1]["path"]).tobytes() == Image.open(b[1]["path"]).tobytes()


@pytest.mark.parametrize("asked", [10, -1, "cat", [1, 12]])
def test_unknown_class(asked):
    with pytest.raises(ZooError, match="is not one of this model's 10 classes"):
        resolve_classes(asked, NAMES, 10)


def test_classes_for_unconditional_model(tmp_path):
    with pytest.raises(ZooError, match="unconditional"):
        run(model(False), classes=[1], out=str(tmp_path))
