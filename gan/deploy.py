"""Export and serving hooks for gan/dcgan (found by zoo/kit/hooks.py; called by `zoo export` and `zoo serve`).

Exported graph: the sampling generator (the EMA copy when ema_decay > 0), in eval mode: latent z (B, nz) float32
(+ labels (B,) int64 for conditional models) -> images (B, C, H, W) in [-1, 1].
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import torch

from zoo.kit.deploy import Budget, Examples, Graph, compare

FORMATS = ("onnx", "torchscript", "exported_program")
EXPORTER = "dynamo"
TOLERANCE = 1e-4  # on pixels in [-1, 1]


class _Generator(torch.nn.Module):
    def __init__(self, module: Any) -> None:
        super().__init__()
        self.generator = module.sampler()

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        return self.generator(z, labels)


def export_graph(module: Any) -> Graph:
    names = ["z", "labels"] if module.conditional else ["z"]
    return Graph(_Generator(module), names, ["images"], {n: {0: "batch"} for n in [*names, "images"]})


def example_batches(module: Any, cfg: Any, n: int) -> list[Examples]:
    """A generator's real inputs are latents: the module's own fixed noise (and labels), then seeded noise."""
    gen = torch.Generator().manual_seed(0)
    z = torch.cat([module.fixed_z, torch.randn(max(0, n - len(module.fixed_z)), module.hparams.nz, generator=gen)])[:n]
    if not module.conditional:
        return [Examples((z.contiguous(),))]
    labels = torch.arange(len(z)) % module.hparams.num_classes
    return [Examples((z.contiguous(), labels))]


def metadata(module: Any, cfg: Any) -> dict:
    hp = module.hparams
    return {
        "preprocess": {"z": f"standard normal noise (B, {hp.nz}) float32",
                       "labels": "class indices (B,) int64" if module.conditional else None},
        "postprocess": {"images": "(B, C, H, W) in [-1, 1]; to 8-bit pixels: round((x + 1) * 127.5)"},
        "nz": hp.nz, "channels": hp.channels, "image_size": hp.image_size, "conditional": module.conditional,
        "class_names": list(hp.class_names or []) if module.conditional else [],
        "generator": "EMA" if hp.ema_decay > 0 else "last",
    }


def extra_files(module: Any) -> dict[str, bytes]:
    return {}


def to_uint8(images: np.ndarray) -> np.ndarray:
    return np.round((np.clip(images, -1, 1) + 1) * 127.5).astype(np.uint8)


def parity(ref: list[np.ndarray], out: list[np.ndarray]) -> dict:
    """Agreement: the share of 8-bit pixels that come out identical."""
    return compare(ref, out, TOLERANCE, float(np.mean(to_uint8(ref[0]) == to_uint8(out[0]))))


def score(outputs: list[list[np.ndarray]], targets: list[Any]) -> None:
    return None


# ---------------------------------------------------------------------------------------------- serving
class Handler:
    """POST /predict with JSON {"seed": 0, "count": 4, "label": 3 | "name"} -> base64 PNG images."""

    content_types = ("application/json",)
    pad: dict[str, float] = {}
    max_count = 64

    def __init__(self, meta: dict, folder: Any = None, module: Any = None) -> None:
        self.nz, self.conditional, self.names = int(meta["nz"]), bool(meta["conditional"]), meta["class_names"]

    def decode(self, body: bytes, content_type: str, budget: Budget | None = None) -> dict[str, np.ndarray]:
        from zoo.kit.deploy import BadRequest, json_body

        req = json_body(body)
        count, seed = req.get("count", 1), req.get("seed", 0)
        if not isinstance(count, int) or not 1 <= count <= self.max_count or not isinstance(seed, int):
            raise BadRequest(422, f'"count" must be an integer 1..{self.max_count} and "seed" an integer')
        (budget or Budget()).items(count, "images to generate")
        z = np.random.default_rng(seed).standard_normal((count, self.nz)).astype(np.float32)
        if not self.conditional:
            return {"z": z}
        label = req.get("label", 0)
        if isinstance(label, str) and label in self.names:
            label = self.names.index(label)
        if not isinstance(label, int) or not 0 <= label < len(self.names):
            raise BadRequest(422, f'"label" must be a class index 0..{len(self.names) - 1} or one of {self.names}')
        return {"z": z, "labels": np.full(count, label, dtype=np.int64)}

    def encode(self, outputs: list[np.ndarray], item: dict) -> dict:
        from PIL import Image

        pngs = []
        for img in to_uint8(outputs[0]):
            buf = io.BytesIO()
            Image.fromarray(img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0)).save(buf, format="PNG")
            pngs.append(base64.b64encode(buf.getvalue()).decode())
        return {"images_png_base64": pngs}
