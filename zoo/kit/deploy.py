"""Types a task's deploy hooks use: the exportable graph, example batches, parity, and bad requests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zoo.errors import ZooError


@dataclass
class Graph:
    """What gets exported: `module(*inputs)` returns a tensor or a tuple matching `outputs`."""

    module: Any
    inputs: list[str]
    outputs: list[str]
    dynamic: dict[str, dict[int, str]] = field(default_factory=dict)


@dataclass
class Examples:
    """One batch of real inputs (in `Graph.inputs` order) and, where the data has them, its targets."""

    inputs: tuple
    targets: Any = None


def compare(ref: list[np.ndarray], out: list[np.ndarray], tolerance: float, agreement: float) -> dict:
    """The shared part of every task's parity: max abs difference over the float outputs against a tolerance."""
    diffs = [float(np.max(np.abs(r.astype(np.float64) - o.astype(np.float64)))) if r.size else 0.0
             for r, o in zip(ref, out) if np.issubdtype(r.dtype, np.floating)]
    diff = max(diffs, default=0.0)
    return {"max_abs_diff": diff, "agreement": round(float(agreement), 6), "tolerance": tolerance,
            "ok": bool(diff <= tolerance)}


class BadRequest(ZooError):
    """A request the client can fix: answered with `status` and {"error": message}; the server keeps serving."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def json_body(body: bytes) -> dict:
    try:
        req = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(400, f"the body is not valid JSON ({e.__class__.__name__}); send a JSON object") from None
    if not isinstance(req, dict):
        raise BadRequest(422, "send a JSON object, e.g. {\"texts\": [...]}")
    return req
