"""Checkpoints: atomic writes, zoo metadata in every file, and loading with clear errors.

Every checkpoint carries `checkpoint["zoo"]` = {task, overrides, config, pretrained, version, env}: enough to test,
predict or resume from the file alone, and to know what it was trained on (`env`: zoo.env.collect()). All of it is
plain containers, so `torch.load(weights_only=True)` works. The run directory gets the same environment as
`env.json`.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback

from zoo.errors import ZooError

log = logging.getLogger("zoo")


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save into a temp file in the target folder, fsync, then rename over the target.

    A crash or Ctrl-C mid-save leaves the previous checkpoint intact; a reader never sees a half-written file.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename itself durable
        finally:
            os.close(dir_fd)

    def load_checkpoint(self, path: str | Path, map_location: Any = None, weights_only: bool | None = None) -> dict:
        return load_checkpoint(path, map_location=map_location or "cpu")


class ZooMetadata(Callback):
    """Adds the run's task, overrides, resolved config and environment to every checkpoint, writes the environment
    to the run directory (`env.json`, global rank 0), and makes reloading offline-safe.

    `hyper_parameters["pretrained"]` is rewritten to False: the weights are in the state dict, so a module rebuilt by
    `load_from_checkpoint` must not fetch hub weights again. The original choice stays in `zoo["pretrained"]`.
    """

    def __init__(self, task: str, overrides: list[str], config: dict) -> None:
        self.meta = {"task": task, "overrides": list(overrides), "config": config}
        self.env: dict | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from zoo.env import collect

        if not trainer.is_global_zero or self.env is not None:
            return  # one writer, once per session (the test after fit calls setup again: same session, same env)
        self.env = collect()
        run_dir = self.meta["config"].get("run_dir") or trainer.default_root_dir
        if run_dir:
            write_env(Path(run_dir), self.env)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        from zoo import __version__
        from zoo.env import collect

        if self.env is None:
            self.env = collect()
        hp = checkpoint.get("hyper_parameters", {})
        meta = dict(self.meta, version=__version__, env=self.env)
        if "pretrained" in hp:
            meta["pretrained"] = hp["pretrained"]
            hp["pretrained"] = False
        checkpoint["zoo"] = meta


def write_env(run_dir: Path, env: dict) -> Path:
    """`env.json` in the run directory, atomically. A resumed run keeps the first session's file; when it resumes on
    a different environment (another commit, GPU or package set), that one goes next to it as env-resume-<n>.json,
    so numbers from before and after the resume are never silently mixed."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "env.json"
    if path.is_file():
        try:
            same = json.loads(path.read_text()) == json.loads(json.dumps(env))
        except (OSError, ValueError):
            same = False
        if same:
            return path
        n = 1
        while (run_dir / f"env-resume-{n}.json").exists():
            n += 1
        path = run_dir / f"env-resume-{n}.json"
        log.warning("zoo: this run continues on a different environment than it started on; see %s", path)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(env, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict:
    """torch.load(weights_only=True) with one clear line for a missing, corrupt or foreign file."""
    p = Path(path)
    if not p.is_file():
        hint = " (it is a folder: point at a .ckpt inside it, e.g. checkpoints/last.ckpt)" if p.is_dir() else ""
        raise ZooError(f"checkpoint not found: {p}{hint}; check the path or list runs with `ls outputs/`")
    if not zipfile.is_zipfile(p):
        raise ZooError(f"{p} is not a zoo checkpoint (not a PyTorch file at all: wrong file, or cut short while "
                       "copying); use the run's checkpoints/last.ckpt or best-*.ckpt")
    try:
        ckpt = torch.load(p, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Unsupported global" not in str(e):  # garbled bytes inside a valid archive
            raise ZooError(f"checkpoint {p} is corrupt (its data does not unpickle); use another file, e.g. the "
                           "run's checkpoints/last.ckpt") from None
        raise ZooError(f"{p} is not a zoo checkpoint: it holds pickled Python objects, which the zoo never writes "
                       "and will not load (they can run code); use a checkpoint written by `zoo train`") from None
    except (RuntimeError, zipfile.BadZipFile, EOFError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ZooError(f"checkpoint {p} is corrupt ({first[:100]}); use another file, e.g. the run's "
                       "checkpoints/last.ckpt") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise ZooError(f"{p} is not a Lightning checkpoint (no state_dict); for raw weights use "
                       "the task's `pretrained=<file>` option instead")
    return ckpt


def checkpoint_task(ckpt: dict, path: str | Path) -> str:
    task = ckpt.get("zoo", {}).get("task")
    if not task:
        raise ZooError(f"{path} was not written by zoo (no zoo metadata); pass `task=<domain>/<name>` and use the "
                       "task's `pretrained=<file>` option to fine-tune from it")
    return task


def find_last(run_dir: Path) -> Path | None:
    last = run_dir / "checkpoints" / "last.ckpt"
    return last if last.is_file() else None


# ---------------------------------------------------------------------------------------------------------------------
# `task.module.pretrained=<file>`: what every task but vision's timm loader shares (vision/models/weights.py is the
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
            raise ZooError(f"{option}: cannot read {path} as weights ({type(e).__name__}); use a file saved with "
                           "torch.save(model.state_dict(), ...) or safetensors, or a zoo .ckpt") from None
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
    for key, label in (("reinit", "new head (random init)"), ("reinit_rows", "new rows (random init)"), ("skipped_shape", "new shape (random init)"),
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
