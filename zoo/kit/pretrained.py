"""Pretrained-weight transfer for every domain: read a weights file or zoo checkpoint, match tensors by
name and shape, report what loaded."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback

from zoo.core.checkpoint import load_checkpoint
from zoo.core.resume import resumed_checkpoint
from zoo.errors import ZooError
from zoo.kit import tb

log = logging.getLogger("zoo")


# `task.module.pretrained=<file>`: what every task but vision's timm loader shares (vision/pretrained.py is the
# model): read a zoo .ckpt of the same task or a plain weights file with one-line errors, match tensors by name and
# shape, and say by name what loaded and what did not.
WEIGHT_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".safetensors")


def read_pretrained(path: str | Path, task: str, option: str = "task.module.pretrained") -> tuple[dict, dict | None]:
    """(tensors by name, the whole checkpoint or None for a plain weights file) of a `pretrained=` source.

    A zoo checkpoint of another task, a missing, corrupt or non-tensor file: one ZooError line naming the option
    and the fix.
    """
    p = Path(path).expanduser()
    if not p.is_file():
        what = "is a folder, not a file" if p.is_dir() else "not found"
        raise ZooError(f"{option}: {path} {what}; give a {task} checkpoint (outputs/{task}/<run>/checkpoints/"
                       "last.ckpt) or a weights file (.pt, .pth, .bin, .safetensors)")
    if p.suffix == ".ckpt":
        try:
            obj: Any = load_checkpoint(p)  # its own lines for corrupt and foreign files
        except ZooError as e:
            raise ZooError(f"{option}: {e}") from None
    else:
        try:
            if p.suffix == ".safetensors":
                from safetensors.torch import load_file

                obj = load_file(str(p))
            else:
                obj = torch.load(p, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - corrupt files raise many types
            raise ZooError(f"{option}: {unreadable_weights(p, e)}") from None
    ckpt = obj if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict) else None
    if ckpt is not None:
        other = (ckpt.get("zoo") or {}).get("task")
        if other and other != task:
            raise ZooError(f"{option}: {path} is a {other} checkpoint, not {task}; give a checkpoint of a {task} run "
                           f"(outputs/{task}/<run>/checkpoints/)")
        obj = ckpt["state_dict"]
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ZooError(f"{option}: {path} holds no state dict of tensors; save one with "
                       "torch.save(model.state_dict(), path), or give a zoo .ckpt")
    return obj, ckpt


EXPECTED_WEIGHTS = ("expected a weights file: a PyTorch state dict saved with torch.save(model.state_dict(), "
                    "path) (.pt, .pth, .bin), a .safetensors file, or a zoo checkpoint (.ckpt)")


def unreadable_weights(path: Path, error: BaseException) -> str:
    """Why a `pretrained=` file did not load, as what it looks like against what was expected (torch.load's own
    error for a text file is a bare KeyError)."""
    head = path.read_bytes()[:4096] if path.is_file() else b""
    if head.startswith(b"PK\x03\x04"):
        what = f"a zip archive that torch.load cannot read ({type(error).__name__}: {str(error)[:80]})"
    elif not head:
        what = "an empty file"
    elif b"\0" not in head and _is_text(head):
        what = "a text file"
    else:
        what = f"not a file torch.load or safetensors can read ({type(error).__name__})"
    return f"{path} is {what}; {EXPECTED_WEIGHTS}"


def _is_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
        return True
    except UnicodeDecodeError as e:  # a multi-byte character cut at the 4 KiB mark is still text
        return e.start >= len(head) - 3


def match_weights(own: dict, src: dict, where: str, what: str, fresh: tuple[str, ...] = (),
                  min_match: float = 0.5, option: str = "task.module.pretrained") -> tuple[dict, dict]:
    """The tensors of `src` that fit `own` (same name, same shape), and a report of every name by outcome.

    `fresh`: name prefixes that start anew whatever the source holds (a new head). Of the other tensors at least
    `min_match` must load, else the weights are refused as another architecture instead of silently training from
    (mostly) random init.
    """
    load, shape, missing, reinit = {}, [], [], []
    for name, tensor in own.items():
        value = src.get(name)
        if fresh and name.startswith(fresh):
            reinit.append(name)
        elif value is None:
            if not name.endswith("num_batches_tracked"):
                missing.append(name)
        elif tuple(value.shape) != tuple(tensor.shape):
            shape.append(f"{name} {tuple(value.shape)}->{tuple(tensor.shape)}")
        else:
            load[name] = value
    core = [n for n in own if not n.endswith("num_batches_tracked") and not (fresh and n.startswith(fresh))]
    # Counted in numbers, not tensors: a wider model still shares its small norm and bias tensors with the source.
    total = sum(own[n].numel() for n in core)
    fits = sum(own[n].numel() for n in core if n in load)
    if fits < min_match * max(1, total):
        example = ", ".join(list(src)[:3])
        raise ZooError(f"{option}: incompatible weights: {where} does not match this architecture ({fits:,} of "
                       f"{total:,} weights of this {what} fit; its names look like {example}); use weights of the "
                       "same architecture (same arch/model settings as the run that wrote them)")
    report = {"source": where, "loaded": sorted(load), "reinit": reinit, "skipped_shape": shape, "missing": missing,
              "unused": sorted(n for n in src if n not in own)}
    return load, report


def describe_report(report: dict, limit: int = 8) -> str:
    """One line: where the weights came from, how many loaded, and by name what did not (and why)."""
    def names(items: list[str]) -> str:
        return ", ".join(items[:limit]) + (f" ... (+{len(items) - limit})" if len(items) > limit else "")

    n_loaded = len(report["loaded"])
    n_total = n_loaded + len(report["skipped_shape"]) + len(report["missing"]) + len(report.get("reinit", []))
    parts = [f"weights from {report['source']}: {n_loaded}/{n_total} tensors loaded"]
    for key, label in (("reinit", "new head (random init)"), ("reinit_rows", "new rows (random init)"),
                       ("skipped_shape", "new shape (random init)"),
                       ("missing", "not in the source (random init)"), ("unused", "unused")):
        if report.get(key):
            parts.append(f"{label}: {names(report[key])}")
    for note in report.get("notes", []):
        parts.append(note)
    return "; ".join(parts)


def announce_report(report: dict, log: Any) -> str:
    """Print the report line and return it; a warning (console and cli.log) when a tensor the source was expected to
    provide did not load. A new head is the point of fine-tuning on new labels: printed, named, not a warning."""
    line = describe_report(report)
    if any(report.get(k) for k in ("skipped_shape", "missing", "reinit_rows")):
        log.warning("%s", line)
    else:
        print(f"zoo: {line}", flush=True)
        log.info("%s", line)
    return line


def weights_path(value: Any, task: str, option: str = "task.module.pretrained",
                 example: str = "checkpoints/last.ckpt") -> str | None:
    """A `pretrained` value of a task without hub weights: the checkpoint/weights path, or None for none."""
    if value in (None, False) or str(value).lower() in ("false", "none", "null", ""):
        return None
    if value is True or str(value).lower() in ("true", "auto"):
        raise ZooError(f"{option}={value}: {task} has no hub weights; give a path to a {task} checkpoint "
                       f"(outputs/{task}/<run>/{example}) or false")
    return str(value)


def unless_resuming(load: Callable[[], dict | None]) -> dict | None:
    """A module's pretrained report: `load()` (which reads the weights) for a new run; for a resumed one the report
    its checkpoint kept, and no read: that checkpoint replaces every tensor next (zoo.core.resume.resumed_from)."""
    resumed = resumed_checkpoint()
    return load() if resumed is None else resumed["pretrained_report"]


class PretrainedReport(Callback):
    """What a module started from, for every task alike: its `pretrained_report` (a dict whose `line` says it in one
    line) goes to TensorBoard as `model/pretrained` when fitting starts and into every checkpoint it saves."""

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        report = getattr(pl_module, "pretrained_report", None)
        if report is not None:
            tb.log_text(pl_module, "model/pretrained", str(report["line"]), step=0)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        report = getattr(pl_module, "pretrained_report", None)
        if report is not None:
            checkpoint["pretrained_report"] = report
