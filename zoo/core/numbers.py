"""Numbers that are not numbers: NaN and infinity never pass as a result.

Python's json writes NaN and Infinity as bare words that no strict JSON reader (jq, JavaScript, Go) accepts, so every
metrics file and JSON line the zoo writes goes through `strict_json`: a non-finite value is written as null (the
metric has no value), never as a number.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite_or_none(value: Any) -> Any:
    """`value` with every non-finite float inside it (dicts, lists, tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def strict_json(value: Any, **kwargs: Any) -> str:
    """json.dumps that writes non-finite floats as null and refuses any it missed (allow_nan=False)."""
    return json.dumps(finite_or_none(value), allow_nan=False, **kwargs)


def non_finite(metrics: dict[str, float]) -> list[str]:
    """The keys of `metrics` whose value is NaN or infinite."""
    return [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]


def non_finite_tensors(state: dict[str, Any]) -> list[str]:
    """The names of the floating-point tensors in `state` (a state_dict) holding NaN or infinity. An attention mask
    may hold -inf on purpose (a key naming a mask); NaN is never a weight."""
    import torch

    bad = []
    for name, t in state.items():
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() == 0:
            continue
        if bool(torch.isnan(t).any()) or ("mask" not in name.lower() and not bool(torch.isfinite(t).all())):
            bad.append(name)
    return bad
