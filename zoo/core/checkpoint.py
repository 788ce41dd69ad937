"""Checkpoint I/O: atomic writes, `weights_only` loads and one-line errors; every checkpoint read goes through here."""

from __future__ import annotations

import json
import logging
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback

from zoo.core import owned
from zoo.errors import ZooError

log = logging.getLogger("zoo")


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save into a temp file in the target folder, fsync, then rename over the target.

    A crash or Ctrl-C mid-save leaves the previous checkpoint intact; a reader never sees a half-written file.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any = None) -> None:
        path = Path(path)
        owned.make_dirs(path.parent)
        fd, tmp = owned.temp_file(path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            owned.created(path)  # written whole by this process: Lightning's top-k may replace it later
        except BaseException as e:
            owned.remove(tmp)
            if disk_full(e):
                raise ZooError(disk_full_message(path, checkpoint)) from None
            raise
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # make the rename itself durable
        finally:
            os.close(dir_fd)

    def load_checkpoint(self, path: str | Path, map_location: Any = None, weights_only: bool | None = None) -> dict:
        return load_checkpoint(path, map_location=map_location or "cpu")

    def remove_checkpoint(self, path: str | Path) -> None:
        """Lightning's top-k replacing a worse checkpoint: only one this run wrote or took over on resume."""
        owned.remove(path, prune=False)


def disk_full(e: BaseException) -> bool:
    """ENOSPC (or a quota), also where torch's zip writer turned it into its own RuntimeError ('enforce fail')."""
    import errno

    seen: BaseException | None = e
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(seen, RuntimeError) and "No space left on device" in str(seen):
            return True
        seen = seen.__context__ or seen.__cause__
    return False


def disk_full_message(path: Path, checkpoint: dict) -> str:
    """One line: which file, the space it needs and the space there is, what is kept, how to go on."""
    import shutil

    need = sum(t.untyped_storage().nbytes() for t in {id(t): t for t in _tensors(checkpoint)}.values())
    there = path.parent  # removing the partial file took back the checkpoints folder it alone was in
    while not there.is_dir() and there != there.parent:
        there = there.parent
    free = shutil.disk_usage(there).free
    kept = sorted((p for p in path.parent.glob("*.ckpt") if p.is_file()), key=lambda p: p.stat().st_mtime) \
        if path.parent.is_dir() else []
    last = f"the last good checkpoint {path if path.is_file() else kept[-1]} is kept" if kept else \
        "no earlier checkpoint of this run exists"
    run = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    go_on = f"continue with `python -m zoo train ckpt_path={run}`" if kept else "then start the run again"
    return (f"disk full while saving {path}: it needs about {need / 2**20:.0f} MiB and {free / 2**20:.0f} MiB are "
            f"free; {last} (the partial file was removed); free some space, {go_on}")


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


class ZooMetadata(Callback):
    """Adds the run's task, overrides, resolved config and environment to every checkpoint, writes the environment
    to the run directory (`env.json`, global rank 0), and makes reloading offline-safe.

    `hyper_parameters["pretrained"]` is rewritten to False: the weights are in the state dict, so a module rebuilt by
    `load_from_checkpoint` must not fetch hub weights again. The original choice stays in `zoo["pretrained"]`.
    """

    def __init__(self, task: str, overrides: list[str], config: dict) -> None:
        self.meta: dict[str, Any] = {"task": task, "overrides": list(overrides), "config": config}
        self.env: dict | None = None

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        from zoo.measure.env import collect

        if not trainer.is_global_zero or self.env is not None:
            return  # one writer, once per session (the test after fit calls setup again: same session, same env)
        self.env = collect()
        run_dir = self.meta["config"].get("run_dir") or trainer.default_root_dir
        if run_dir:
            write_env(Path(run_dir), self.env)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        from zoo import __version__
        from zoo.core.presets import GENERATION
        from zoo.measure.env import collect

        if self.env is None:
            self.env = collect()
        hp = checkpoint.get("hyper_parameters", {})
        meta = dict(self.meta, version=__version__, presets=GENERATION, env=self.env)
        if "pretrained" in hp:
            meta["pretrained"] = hp["pretrained"]
            hp["pretrained"] = False
        checkpoint["zoo"] = meta

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict) -> None:
        # runs before any callback loads its state: the best checkpoints' paths follow a moved run folder
        from zoo.core.relocate import relocate_states

        relocate_states(trainer, checkpoint)


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
        log.warning("this run continues on a different environment than it started on; see %s", path)
    from zoo.base import write_text_atomic

    return write_text_atomic(path, json.dumps(env, indent=1) + "\n")


def load_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict:
    """torch.load(weights_only=True) with one clear line for a missing, corrupt or foreign file."""
    p = Path(path)
    if not p.is_file():
        hint = " (it is a folder: point at a .ckpt inside it, e.g. checkpoints/last.ckpt)" if p.is_dir() else ""
        raise ZooError(f"checkpoint not found: {p}{hint}; check the path or list runs with `ls outputs/`")
    if not zipfile.is_zipfile(p) and not legacy_torch_file(p):
        raise ZooError(f"{p} is not a zoo checkpoint (not a PyTorch file at all: wrong file, or cut short while "
                       "copying); use the run's checkpoints/last.ckpt or best-*.ckpt")
    try:
        ckpt = torch.load(p, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        raise ZooError(unpickling_refusal(p, str(e))) from None
    except (RuntimeError, zipfile.BadZipFile, EOFError, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ZooError(f"checkpoint {p} is corrupt ({first[:100]}); use another file, e.g. the run's "
                       "checkpoints/last.ckpt") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt:
        raise ZooError(f"{p} is not a Lightning checkpoint (no state_dict); for raw weights use "
                       "the task's `pretrained=<file>` option instead")
    from zoo.core.aliases import rewrite_checkpoint

    # a checkpoint written while the domains were top-level packages names them so: read under today's names
    return rewrite_checkpoint(ckpt)


LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the number torch.save's pre-1.6 format pickles first


def legacy_torch_file(path: Path) -> bool:
    """Whether `path` is in torch.save's legacy (non-zip) format (`_use_new_zipfile_serialization=False`, torch
    before 1.6): a pickled magic number first. torch.load(weights_only=True) reads it as safely as a zip file."""
    try:
        with open(path, "rb") as f:
            head = f.read(14)
    except OSError:
        return False
    return head[:4] == b"\x80\x02\x8a\x0a" and int.from_bytes(head[4:14], "little") == LEGACY_MAGIC


def unpickling_refusal(path: Path, error: str) -> str:
    """torch.load(weights_only=True)'s refusal, said for what it is: garbled bytes inside a valid archive, or a
    pickle that names a function or class (a malicious file, or another program's objects): loading that runs code."""
    import re

    named = re.search(r"GLOBAL ([\w.]+)", error)
    if (named is None and "Unsupported operand" in error) or "Weights only" not in error:
        return f"checkpoint {path} is corrupt (its data does not unpickle); use another file, e.g. the run's " \
               "checkpoints/last.ckpt"
    what = f"it references {named.group(1)}" if named else "it holds Python objects, not only tensors and plain values"
    return (f"{path} was refused: loading it needs code execution ({what}), and the zoo loads checkpoints with "
            "torch.load(weights_only=True), which never runs code; use a checkpoint written by `zoo train`")


def checkpoint_task(ckpt: dict, path: str | Path) -> str:
    record = ckpt.get("zoo")
    task = record.get("task") if isinstance(record, dict) else None
    if not task:
        raise ZooError(f"{path} was not written by zoo (no zoo metadata); pass `task=<domain>/<name>` and use the "
                       "task's `pretrained=<file>` option to fine-tune from it")
    if not isinstance(task, str):  # a record is artifact data: its fields are checked before use
        raise ZooError(f"{path} records {task!r} as its task, not a task name: it was edited or is not a zoo "
                       "checkpoint; use the run's own checkpoints/last.ckpt or best-*.ckpt")
    return task


def evaluated_checkpoint(path: Path, asked: str | None) -> tuple[dict, str]:
    """The checkpoint a `test`/`predict`/`export` reads and its task; one line when the command's `task=` (`asked`)
    names another task."""
    ckpt = load_checkpoint(path)
    task = checkpoint_task(ckpt, path)
    check_finite_weights(ckpt, path)
    if asked and asked != task:
        raise ZooError(f"checkpoint {path} is from task {task}, not {asked}; drop task=... or pass a {asked} "
                       "checkpoint")
    return ckpt, task


def check_finite_weights(ckpt: dict, path: str | Path) -> None:
    """One line for a checkpoint whose weights hold NaN or infinity (a diverged run): what it predicts or exports
    would be NaN, which no later check should have to explain."""
    from zoo.core.numbers import non_finite_tensors

    bad = non_finite_tensors(ckpt.get("state_dict") or {})
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        raise ZooError(f"checkpoint {path} holds non-finite weights (NaN or infinity in {bad[0]}{more}): the run that "
                       "wrote it diverged; use an earlier checkpoint, or train again with a lower learning rate")


def find_last(run_dir: Path) -> Path | None:
    last = run_dir / "checkpoints" / "last.ckpt"
    return last if last.is_file() else None
