"""Types a task's deploy hooks use: the exportable graph, example batches, parity, bad requests, and what one request
may cost (`Limits`, charged through a `Budget` before the work it pays for)."""

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


def pad_concat(arrays: list[np.ndarray], value: float) -> np.ndarray:
    """Concatenate along axis 0, padding every other axis to the longest with `value`."""
    shape = [max(a.shape[i] for a in arrays) for i in range(1, arrays[0].ndim)]
    out = []
    for a in arrays:
        pad = [(0, 0)] + [(0, s - d) for s, d in zip(shape, a.shape[1:])]
        out.append(np.pad(a, pad, constant_values=value) if any(p for _, p in pad) else a)
    return np.concatenate(out)


class BadRequest(ZooError):
    """A request the client can fix: answered with `status` and {"error": message}; the server keeps serving."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """What one request may take (`zoo serve`'s serve.max_items, max_tokens, max_pixels, max_audio_s): a request is
    split into batches of serve.max_batch_size, so these bound the memory and time one request holds."""

    items: int = 256            # examples: texts, images, clips, observations, generated images
    tokens: int = 32_768        # text tokens after truncation, over all texts
    pixels: int = 50_000_000    # image pixels, over all images (each one too, by Pillow when it opens it)
    audio_s: float = 600.0      # seconds of audio, over all clips

    KEYS = {"items": "serve.max_items", "tokens": "serve.max_tokens", "pixels": "serve.max_pixels",
            "audio_s": "serve.max_audio_s"}


class Budget:
    """One request's running total against its `Limits`. A handler charges each item (and its unit: tokens, pixels,
    seconds) before the work it costs, so a request past a bound is a 413 naming the bound and its key, before the
    rest of it is decoded or run."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.taken: dict[str, float] = {"items": 0, "tokens": 0, "pixels": 0, "audio_s": 0.0}

    def take(self, what: str, amount: float, unit: str) -> None:
        """Charge `amount` of `what` (a field of Limits; `unit` names it for the client, e.g. "texts")."""
        total = self.taken[what] + amount
        limit = getattr(self.limits, what)
        if total > limit:
            shown = f"{total:,.1f}" if isinstance(limit, float) else f"{int(total):,}"
            raise BadRequest(413, f"the request holds {shown} {unit}, over {Limits.KEYS[what]}={limit:,}; send "
                                  f"less per request (split it), or start the server with a larger {Limits.KEYS[what]}")
        self.taken[what] = total

    def items(self, n: int, unit: str = "items") -> None:
        self.take("items", n, unit)


def json_body(body: bytes) -> dict:
    try:
        req = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(400, f"the body is not valid JSON ({e.__class__.__name__}); send a JSON object") from None
    except RecursionError:  # the C parser recurses once per nesting level: a deep body would reach the 500 handler
        raise BadRequest(400, "the body nests JSON too deeply to parse; send a JSON object of flat lists") from None
    if not isinstance(req, dict):
        raise BadRequest(422, "send a JSON object, e.g. {\"texts\": [...]}")
    return req
