"""Every hook of the toy task in one file: predict, deploy (export + serve), bench, models."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from zoo.kit.deploy import BadRequest, Examples, Graph, compare, json_body

FORMATS = ("onnx", "torchscript")
EXPORTER = "torchscript"
TOLERANCE = 1e-4
UNIT, BATCH_KEY, LOSS_KEY = "points", "task.data.batch_size", "train/loss"


def list_models() -> list[str]:
    return ["mlp"]


def predict(module: Any, cfg: Any, input: Any) -> Iterator[dict]:
    """`input=1,2,3,4;0,0,0,0`: one point per `;`. A point that is not four numbers is the user's to fix: one line
    (a ZooError), as every task's predict says what input it takes."""
    from zoo.errors import ZooError

    for point in str(input or "").split(";"):
        try:
            values = [float(v) for v in point.split(",")]
        except ValueError:
            values = []
        if len(values) != 4:
            raise ZooError(f"input: {point!r} is not a point of 4 numbers; give input=1,2,3,4 (several: ';' between)")
        p = module(torch.tensor([values])).softmax(-1)[0]
        yield {"input": point, "label": int(p.argmax()), "prob": round(float(p.max()), 4)}


def export_graph(module: Any) -> Graph:
    return Graph(module.net, ["x"], ["logits"], {"x": {0: "batch"}, "logits": {0: "batch"}})


def example_batches(module: Any, cfg: Any, n: int) -> list[Examples]:
    from toy.module import Blobs

    x, y = Blobs().val_set.tensors
    return [Examples((x[:n],), y[:n])]


def metadata(module: Any, cfg: Any) -> dict:
    return {"preprocess": {"x": "4 floats"}, "postprocess": {"logits": "argmax is the class"}}


def extra_files(module: Any) -> dict[str, bytes]:
    return {}


def parity(ref: list[np.ndarray], out: list[np.ndarray]) -> dict:
    return compare(ref, out, TOLERANCE, float(np.mean(ref[0].argmax(-1) == out[0].argmax(-1))))


def score(outputs: list[list[np.ndarray]], targets: list[Any]) -> tuple[str, float]:
    pred = np.concatenate([o[0].argmax(-1) for o in outputs])
    return "acc", float(np.mean(pred == np.concatenate([np.asarray(t) for t in targets])))


def units(module: Any, batch: Any) -> float:
    return float(batch[0].shape[0])


class Handler:
    """POST /predict {"x": [4 floats]} -> {"label": 0|1}."""

    content_types = ("application/json",)
    pad: dict[str, float] = {}

    def __init__(self, meta: dict, folder: Any = None, module: Any = None) -> None:
        pass

    def decode(self, body: bytes, content_type: str) -> dict[str, np.ndarray]:
        x = json_body(body).get("x")
        if not isinstance(x, list) or len(x) != 4:
            raise BadRequest(422, 'send {"x": [4 numbers]}')
        return {"x": np.asarray([x], dtype=np.float32)}

    def encode(self, outputs: list[np.ndarray], item: dict) -> dict:
        return {"label": int(np.argmax(outputs[0][0]))}
