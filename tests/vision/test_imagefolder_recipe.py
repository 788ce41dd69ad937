"""experiment=vision_imagefolder (cached augmented views, fitted head, then the whole network) end to end through
`python -m zoo`: SIGTERM in a cached epoch and resume, the kept phase said at the end, then test, predict and
export (flip TTA inside the exported graph). Tiny generated photos, a tiny random ResNet; no shared data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from zoo.testing import SIGTERM_AT, run_dirs

pytestmark = pytest.mark.slow
SMALL = ["experiment=vision_imagefolder", "task.module.arch=resnet10t", "task.module.pretrained=false",
         "task.data.image_size=16", "task.data.batch_size=4", "task.data.num_workers=0", "task.module.l2_folds=2",
         "task.module.tta=true", "trainer.enable_progress_bar=false", "logger=csv"]


def folder(root: Path) -> Path:
    """Two classes told apart by colour, 6 train / 3 val photos each: under 50 a class, so test = validation."""
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for split, n in (("train", 6), ("val", 3)):
        for c, base in (("red", (200, 40, 40)), ("blue", (40, 40, 200))):
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                colour = tuple(b + d for b, d in zip(base, torch.randint(-30, 30, (3,), generator=g).tolist()))
                Image.new("RGB", (20, 20), colour).save(root / split / c / f"{i}.png")
    return root


def test_sigterm_in_a_cached_epoch_resume_then_test_predict_export(run_zoo, tmp_path):
    data = folder(tmp_path / "photos")
    args = [*SMALL, f"task.data.root={data}"]
    stopped = run_zoo("train", *args, SIGTERM_AT, "+callbacks.sigterm.step=4")  # epoch 1 of 3 batches: cached
    assert stopped.returncode == 143, stopped.stdout[-3000:]
    assert "zoo: finetune=gradual: epochs 0-2 cache an augmented view of every training photo" in stopped.stdout
    assert "zoo: epoch 0: head fitted to 24 cached views of 12 training photos: L2 " in stopped.stdout
    (run,) = run_dirs(tmp_path, "vision/resnet")
    mid = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert mid["epoch"] == 1 and mid["vision_run"]["phases"][0][2] == "frozen"

    out = run_zoo("train", f"ckpt_path={run}", check=True).stdout
    assert run_dirs(tmp_path, "vision/resnet") == [run]
    # the resumed epoch 1 cached the photos it had left: the head is fitted to the views every photo has
    assert "zoo: epoch 1: head fitted to " in out and "zoo: epoch 2: head fitted to " in out
    kept = [line for line in out.splitlines() if line.startswith("zoo: kept checkpoint: epoch ")]
    assert len(kept) == 1, out[-3000:]
    assert "test/* is measured on the validation images" in out
    end = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert [p for _, _, p in end["vision_run"]["phases"]] == ["frozen"] * 3 + ["whole network"]
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    epoch = int(kept[0].split("epoch ")[1].split(",")[0])
    assert best.name.startswith(f"best-epoch{epoch:03d}")
    assert torch.load(best, weights_only=True)["vision_run"]["tta_flip"] is True

    result = run_zoo("test", f"ckpt_path={best}", check=True).stdout
    metrics = json.loads([line for line in result.splitlines() if line.startswith("{")][-1])
    assert 0.0 <= metrics["test/acc"] <= 1.0
    pred = run_zoo("predict", f"ckpt_path={best}", f"input={data / 'val' / 'red'}", check=True)
    rows = [json.loads(line) for line in pred.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 3
    exported = run_zoo("export", f"ckpt_path={run}", check=True).stdout
    assert "parity fp32" in exported
    import onnxruntime as ort

    session = ort.InferenceSession(str(run / "export" / "model.onnx"))
    x = torch.randn(2, 3, 16, 16)
    logits, mirrored = (session.run(None, {"images": t.numpy()})[0] for t in (x, x.flip(-1)))
    assert abs(logits - mirrored).max() < 1e-4  # flip TTA inside the graph: mirror images give the same logits
