"""Export and serving hooks for vision/resnet (found by zoo/kit/hooks.py; called by `zoo export` and `zoo serve`).

Exported graph: normalised images (B, C, H, W) float32 -> logits (B, num_classes), dynamic batch. Normalisation
stays outside the graph (model.json says how), so a consumer can feed tensors it already normalised. A run that chose
flip test-time augmentation exports it inside the graph (the mean of the logits of the images and their mirror
images), so the file gives what `zoo predict` gives.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch

from zoo.kit.deploy import Budget, Examples, Graph, compare

FORMATS = ("onnx", "torchscript", "exported_program")
EXPORTER = "dynamo"  # torch.onnx's dynamo exporter handles timm ResNets (max abs diff ~1e-7)
TOLERANCE = 1e-3     # on logits, fp32
# int8: static QDQ calibrated on validation images. Dynamic quantization made this ResNet-18 5.7x slower than fp32
# ONNX Runtime at batch 1 (ConvInteger); static ran 4x faster than fp32 (docs/deploy.md).
QUANTIZATION = "static"


class FlipAverage(torch.nn.Module):
    """The model with flip test-time augmentation, as the module's forward applies it where the run chose it."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return (self.model(images) + self.model(torch.flip(images, dims=[3]))) / 2


def export_graph(module: Any) -> Graph:
    model = FlipAverage(module.model) if getattr(module, "tta_flip", False) else module.model
    return Graph(model, ["images"], ["logits"], {"images": {0: "batch"}, "logits": {0: "batch"}})


def example_batches(module: Any, cfg: Any, n: int) -> list[Examples]:
    """Up to n images of the task's validation split, as the evaluation transform prepares them."""
    from zoo.core.build import build_checked_data

    data = build_checked_data(cfg, module)
    data.prepare_data()
    data.setup("validate")
    out, seen = [], 0
    for batch in data.val_dataloader():  # (images, labels[, sample indices])
        x, y = batch[0], batch[1]
        out.append(Examples((x[: n - seen].contiguous(),), y[: n - seen]))
        seen += len(out[-1].targets)
        if seen >= n:
            break
    return out


def metadata(module: Any, cfg: Any) -> dict:
    hp = module.hparams
    return {
        "preprocess": {
            "color_mode": "L" if hp.in_chans == 1 else "RGB", "channels": hp.in_chans, "image_size": hp.image_size,
            "resize": f"shorter side to {hp.image_size} (bilinear, antialiased), then centre crop {hp.image_size}",
            "scale": "pixels / 255, then (x - mean) / std per channel", "mean": list(hp.mean), "std": list(hp.std),
            "layout": "NCHW float32",
        },
        "postprocess": {"logits": "unnormalised class scores; softmax gives probabilities, argmax the class"},
        "class_names": list(module.class_names),
    }


def extra_files(module: Any) -> dict[str, bytes]:
    return {}


def parity(ref: list[np.ndarray], out: list[np.ndarray]) -> dict:
    return compare(ref, out, TOLERANCE, float(np.mean(ref[0].argmax(-1) == out[0].argmax(-1))))


def score(outputs: list[list[np.ndarray]], targets: list[Any]) -> tuple[str, float]:
    pred = np.concatenate([o[0].argmax(-1) for o in outputs])
    return "acc", float(np.mean(pred == np.concatenate([np.asarray(t) for t in targets])))


# ---------------------------------------------------------------------------------------------- serving
class Handler:
    """POST /predict with an image upload (the body, or a multipart file) -> top-k labels and probabilities."""

    content_types = ("image/", "application/octet-stream")
    pad: dict[str, float] = {}

    def __init__(self, meta: dict, folder: Any = None, module: Any = None) -> None:
        from zoo.vision.data import eval_transform

        pre = meta["preprocess"]
        self.mode = pre["color_mode"]
        self.transform = eval_transform(pre["image_size"], pre["mean"], pre["std"], resize=True)
        self.names = meta["class_names"]
        self.top_k = min(5, len(self.names))

    def decode(self, body: bytes, content_type: str, budget: Budget | None = None) -> dict[str, np.ndarray]:
        """One image (a multipart upload of several comes here once per file, with the request's budget)."""
        from PIL import Image, UnidentifiedImageError

        from zoo.kit.deploy import BadRequest
        from zoo.kit.images import convert

        budget = budget or Budget()
        budget.items(1, "images")
        try:
            with Image.open(io.BytesIO(body)) as im:
                budget.take("pixels", im.width * im.height, "pixels")  # the header's size, before decoding
                image = convert(im, self.mode)
        except (UnidentifiedImageError, OSError, ValueError) as e:
            raise BadRequest(400, f"cannot decode the image ({type(e).__name__}); send a PNG, JPEG or other "
                                  "image file as the request body") from None
        return {"images": self.transform(image).unsqueeze(0).numpy()}

    def encode(self, outputs: list[np.ndarray], item: dict) -> dict:
        logits = outputs[0][0].astype(np.float64)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        top = np.argsort(-p)[: self.top_k]
        return {"label": self.names[int(top[0])],
                "top_k": [{"label": self.names[int(i)], "prob": round(float(p[i]), 4)} for i in top]}
