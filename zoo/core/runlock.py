"""One run per folder: a new run never writes into a folder that holds another run's checkpoints, and no run writes
into a folder that a live zoo process holds.

The hold is an `flock` on `<run dir>/.zoo.lock` (the holder's pid written inside, for the refusal's line): the kernel
drops it when the holder dies, however it dies, so a lock file that a killed run left behind is simply taken over.
Taken once by the process that starts the run, before Hydra writes `.hydra/` there; Lightning's DDP children and the
other ranks of a torchrun/SLURM job are that same run and take none.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Any

from zoo.core import owned
from zoo.errors import ZooError

LOCK = ".zoo.lock"
# What a run writes at its folder's top level (Hydra's, the zoo's, Lightning's): a new run never writes over them.
RUN_FILES = (".hydra", "cli.log", "config.yaml", "metrics.json", "env.json", "tensorboard", "checkpoints",
             "hf_model", "export", "test")
_held: dict[Path, int] = {}  # run dir -> the open, flock'ed lock file


def claim(run_dir: Path, resuming: bool) -> None:
    """Hold `run_dir` for this process, or refuse in one line: another live zoo process holds it, or (for a new run)
    it holds another run's checkpoints."""
    run_dir = Path(run_dir).absolute()
    if run_dir in _held:
        return
    fd = _lock(run_dir)
    if fd is None:
        holder = holder_pid(run_dir)
        raise ZooError(f"{run_dir} is in use by zoo process {holder or '?'} (a run still going there); wait for it "
                       "to end or stop it, then continue it with "
                       f"`python -m zoo train ckpt_path={run_dir}`, or train into another folder")
    if not resuming and checkpoints(run_dir):
        _release(run_dir, fd)
        raise ZooError(f"{run_dir} holds another run's checkpoints ({checkpoints(run_dir)[0].name}, ...); a new run "
                       "there would replace them: leave hydra.run.dir out (a new folder) or name a new one, or "
                       f"continue that run with `python -m zoo train ckpt_path={run_dir}`")
    clash = [] if resuming else [n for n in RUN_FILES if (run_dir / n).exists()]
    if clash:
        _release(run_dir, fd)
        raise ZooError(f"{run_dir} already holds {', '.join(clash)}, which a run writes (a run killed before its "
                       "first checkpoint left them, or they are yours); a new run would write over them and mix its "
                       "logs with theirs: leave hydra.run.dir out (a new folder) or name a new one")
    _held[run_dir] = fd
    if len(_held) == 1:
        atexit.register(release_all)
    remove_stale_temps(run_dir)


def remove_stale_temps(run_dir: Path) -> list[Path]:
    """The partial files a killed run left (a checkpoint cut short by kill -9: `.last.ckpt.<random>.tmp`, a text
    file's `<name>.<pid>.tmp`): this process holds the folder, so no live run is writing them."""
    import re
    import sys

    found = [*run_dir.glob("checkpoints/.*.ckpt.*.tmp")]
    for p in run_dir.glob("*.tmp"):
        pid = re.fullmatch(r".+\.(\d+)\.tmp", p.name)
        if pid and not _alive(int(pid.group(1))):
            found.append(p)
    size = 0
    for p in found:
        try:
            size += p.stat().st_size
            owned.remove_partial(p)
        except OSError:
            pass
    if found:
        print(f"zoo: removed {len(found)} partial file(s) that a killed run left in {run_dir} ({size / 2**20:.1f} MiB)",
              file=sys.stderr, flush=True)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return pid != os.getpid()


def checkpoints(run_dir: Path) -> list[Path]:
    folder = run_dir / "checkpoints"
    return sorted(folder.glob("*.ckpt")) + sorted(run_dir.glob("hpc_ckpt_*.ckpt")) if run_dir.is_dir() else []


def _lock(run_dir: Path) -> int | None:
    """The open lock file, flock'ed, with this pid inside; None when a live process holds it."""
    import fcntl

    owned.make_dirs(run_dir)  # a folder that was there keeps all it held: only what this process adds can go
    path = run_dir / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:  # a file system without locks (some network mounts): the checkpoint check still holds
            return fd
        try:  # the holder that released it may have removed the file meanwhile: lock the file that is there
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            owned.adopt(path)  # written anew by this process (a dead holder's file is taken over)
            return fd
        os.close(fd)


def holder_pid(run_dir: Path) -> int | None:
    try:
        return int((Path(run_dir) / LOCK).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def held(run_dir: Path) -> bool:
    """Whether some process (this one included) holds `run_dir` now."""
    import fcntl

    path = Path(run_dir) / LOCK
    if Path(run_dir).absolute() in _held:
        return True
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def release_all() -> None:
    """Remove the lock files this process holds (still holding them, so that no one locks a file being removed)."""
    for run_dir, fd in list(_held.items()):
        del _held[run_dir]
        _release(run_dir, fd)


def discard_new_folders() -> None:
    """A stop before the run saved anything: remove what this process made for the folders it holds (only Hydra's
    `.hydra/` and an empty log are there); a folder that was there before keeps everything it held."""
    for run_dir in list(_held):
        if not checkpoints(run_dir) and not any(run_dir.glob("*/checkpoints/*.ckpt")):  # a sweep's trials too
            owned.remove(run_dir)


def _release(run_dir: Path, fd: int) -> None:
    try:
        owned.remove(run_dir / LOCK)  # and the folders made for it, when that leaves them empty
    except OSError:
        pass
    os.close(fd)


def claim_for(cfg: Any, multirun: bool, overrides: list[str]) -> None:
    """`claim` for the folder a `zoo train` command is about to write: the run's (`hydra.run.dir`), or with -m the
    sweep's (`hydra.sweep.dir`, whose trial folders are checked for checkpoints). Only the run's one writer (global
    rank 0) holds it; a launcher's restart of its own job (torchrun, SLURM: the job id names the folder) resumes."""
    from omegaconf import OmegaConf

    from zoo.core.naming import is_writer, launcher_named_run
    from zoo.core.overrides import override_value

    if not is_writer():
        return
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    folder = OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
    if not folder:
        return
    folder = Path(str(folder)).absolute()
    resuming = override_value(overrides, "ckpt_path") not in (None, "", "null", "None") or launcher_named_run()
    if multirun and "zoo_optuna" in str(OmegaConf.select(cfg, "hydra.sweeper._target_", default="")):
        return claim(folder, resuming=True)  # a search goes on in its folder with the same command (its study)
    if multirun:
        return claim_sweep(folder, overrides)
    claim(folder, resuming)


def claim_sweep(folder: Path, overrides: list[str]) -> None:
    """A sweep's folder: held like a run's. Trial folders with checkpoints are an earlier sweep's, which only that
    sweep's own command finishes (zoo.core.sweeps)."""
    from zoo.core.sweeps import same_sweep

    found = sorted(folder.glob("*/checkpoints/*.ckpt")) if folder.is_dir() else []
    if found and not same_sweep(folder, overrides):
        raise ZooError(f"{folder} holds an earlier sweep's runs ({found[0].parent.parent.name}/checkpoints, ...); a "
                       "new sweep there would replace them: leave hydra.sweep.dir out (a new folder) or name a new "
                       "one; that sweep's own command (see its multirun.yaml) finishes it")
    clash = sorted(p.name for p in folder.iterdir() if p.name == "multirun.yaml" or p.is_dir() and p.name.isdigit()) \
        if folder.is_dir() and not same_sweep(folder, overrides) else []
    if clash:
        raise ZooError(f"{folder} already holds {', '.join(clash[:4])}, which a sweep writes (an earlier sweep's, or "
                       "yours); a new sweep would write over them: leave hydra.sweep.dir out (a new folder) or name a "
                       "new one")
    claim(folder, resuming=True)
