"""The one owner of removal: the zoo deletes only what this process created, recorded when it created it.

Every folder the zoo makes for a run, an evaluation or an export is made here (`make_dirs`, `temp_dir`,
`temp_file`), and every removal goes through `remove`. A folder that existed before the command is never removed,
whatever it holds or lacks: inside one (`hydra.run.dir=<a folder of the user's>`) only the entries that were not
there when the process first met it can go. Two narrow rules cover what a zoo process wrote earlier: `adopt` (a
resumed run's own checkpoints, which Lightning's top-k replaces) and `remove_partial` (the temp file of a zoo writer
killed mid-write, by its name). Replacing an earlier export goes through `replace_listed`: exactly the files its
`model.json` listed, and only when the folder holds nothing else.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

_made: set[Path] = set()  # files and folders this process created (or adopted)
_found: dict[Path, frozenset[str]] = {}  # folders that existed when this process first wrote into them: their entries

# The temp names of the zoo's atomic writers: `.<name>.<random>.tmp` (AtomicCheckpointIO, temp_file) and
# `<name>.<pid>.tmp` (zoo.base.write_text_atomic). Nothing else is ever taken for a partial file.
PARTIAL = (re.compile(r"\..+\.ckpt\.[A-Za-z0-9_]+\.tmp"), re.compile(r".+\.\d+\.tmp"))


def _abs(path: str | Path) -> Path:
    return Path(os.path.abspath(path))


def make_dirs(path: str | Path) -> Path:
    """`mkdir -p path`, recording each folder it created; a folder that was already there is recorded with the
    entries it held, so that only what this process adds to it can be removed later."""
    path = _abs(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    _made.update(missing)
    if not missing and path not in _found and not owns(path):
        _found[path] = frozenset(os.listdir(path))
    return path


def temp_dir(folder: str | Path, prefix: str, suffix: str = ".tmp") -> Path:
    """A new folder in `folder` (made if missing), this process's to remove. Made with the umask's ordinary mode,
    not mkdtemp's private one: it is renamed into place as the finished folder."""
    path = _abs(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=make_dirs(folder)))
    _made.add(path)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)
    return path


def temp_file(folder: str | Path, prefix: str, suffix: str = ".tmp") -> tuple[int, Path]:
    """An open new file in `folder` (an existing one: the caller's target lives there), this process's to remove."""
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    _made.add(_abs(name))
    return fd, _abs(name)


def created(path: str | Path) -> Path:
    """Record a file this process has just created (it did not exist before), e.g. by a rename into place."""
    path = _abs(path)
    _made.add(path)
    return path


def adopt(path: str | Path) -> None:
    """A file an earlier process of the same run wrote and this one takes over (a resumed run's best checkpoints,
    which Lightning's top-k replaces by better ones)."""
    _made.add(_abs(path))


def owns(path: str | Path) -> bool:
    """Whether `path` is this process's: created by it, inside a folder it created, or a new entry (or inside one)
    of a folder that existed before it."""
    path = _abs(path)
    for p in (path, *path.parents):
        if p in _made:
            return True
        if p.parent in _found:
            return p.name not in _found[p.parent]
    return False


def remove(path: str | Path, prune: bool = True) -> bool:
    """Remove `path` if this process owns it; in a folder that existed before, remove only the entries this process
    added and keep the folder. With `prune`, folders this process created above it go too where that leaves them
    empty. Returns whether anything was removed; what is not this process's is left as it is."""
    path = _abs(path)
    if path in _found:
        gone = [remove(path / name, prune=False) for name in os.listdir(path) if name not in _found[path]]
        return any(gone)
    if not owns(path) or not os.path.lexists(path):
        return False
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
    _made.discard(path)
    if prune:
        _prune(path.parent)
    return not os.path.lexists(path)


def _prune(folder: Path) -> None:
    while folder in _made:
        try:
            folder.rmdir()  # only an empty one: what another run put there keeps it
        except OSError:
            return
        _made.discard(folder)
        folder = folder.parent


def is_partial(path: str | Path) -> bool:
    return any(p.fullmatch(Path(path).name) for p in PARTIAL)


def remove_partial(path: str | Path) -> bool:
    """Remove the temp file of a zoo writer that died mid-write (the caller knows no live writer holds its folder);
    any other name is left alone."""
    path = _abs(path)
    if not is_partial(path) or not path.is_file():
        return False
    path.unlink(missing_ok=True)
    return True


def listed_files(folder: Path) -> set[str]:
    """Every file under `folder`, as paths relative to it."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir()}


def unlisted(folder: Path, listed: set[str]) -> list[str]:
    """The files under `folder` that `listed` does not name (sorted; empty when the folder holds only those)."""
    return sorted(listed_files(folder) - listed) if folder.is_dir() else []


def replace_listed(new: Path, out: Path, listed: set[str]) -> None:
    """Put the finished folder `new` (this process's) in the place of `out`, an earlier export that holds only the
    files in `listed` (checked again here, just before): `out` is renamed aside, `new` renamed into place, then the
    listed files of the old one are removed one by one; anything else found there by then is kept where it is."""
    new, out = _abs(new), _abs(out)
    if not owns(new):
        raise ValueError(f"{new} was not made by this process")
    old = None
    if out.exists():
        if unlisted(out, listed):
            raise FileExistsError(f"{out} holds files that its export did not write: {unlisted(out, listed)[:3]}")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
    os.replace(new, out)
    _made.discard(new)
    _made.add(out)
    if old is not None:
        for name in sorted(listed, key=lambda n: -n.count("/")):
            (old / name).unlink(missing_ok=True)
        made = {old / parent for name in listed for parent in Path(name).parents if str(parent) != "."}
        for folder in sorted(made, key=lambda p: -len(p.parts)):  # the export's own folders, never another empty one
            _try_rmdir(folder)
        if not _try_rmdir(old):
            os.replace(old, out.with_name(f"{out.name}.kept-{os.getpid()}"))


def _try_rmdir(folder: Path) -> bool:
    try:
        folder.rmdir()
        return True
    except OSError:
        return False


OWNER_MARK = ".zoo-owner"  # inside a temp folder of the zoo's: {"zoo": 1, "pid": ..., "host": ...}


def mark_owner(path: str | Path) -> None:
    """Write this process's pid and host into a temp folder it made: should the process be killed (kill -9) before
    it removes the folder, a later one can tell that the folder is the zoo's own and that its writer is gone."""
    import json
    import socket

    path = _abs(path)
    if path not in _made:
        raise ValueError(f"{path} was not made by this process")
    (path / OWNER_MARK).write_text(json.dumps({"zoo": 1, "pid": os.getpid(), "host": socket.gethostname()}))


def unmark_owner(path: str | Path) -> None:
    """Take the mark out of a finished temp folder of this process's, before it is put in place."""
    mark = _abs(path) / OWNER_MARK
    if owns(mark):
        mark.unlink(missing_ok=True)


def abandoned(folder: str | Path, prefix: str, suffix: str = ".tmp") -> list[Path]:
    """Temp folders `<prefix>*<suffix>` in `folder` left by a killed process: each is removed when the mark in it
    (`mark_owner`) names this host and a process no longer alive (a zoo writer killed mid-write); one whose writer
    is alive is left to it; any other (no mark, another host) is kept and returned, for the caller to name."""
    folder, kept = _abs(folder), []
    names = sorted(os.listdir(folder)) if folder.is_dir() else []
    for name in (n for n in names if n.startswith(prefix) and n.endswith(suffix)):
        path = folder / name
        if path in _made or path.is_symlink() or not path.is_dir():
            continue
        owner = _owner(path)
        if owner is None:
            kept.append(path)
        elif not _alive(owner):
            shutil.rmtree(path, ignore_errors=True)
    return kept


def _owner(path: Path) -> int | None:
    """The pid a zoo mark in `path` names, when the mark is the zoo's and from this host; else None."""
    import json
    import socket

    try:
        mark = json.loads((path / OWNER_MARK).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(mark, dict) and mark.get("zoo") == 1 and mark.get("host") == socket.gethostname()
    pid = mark.get("pid") if ok else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def forget() -> None:
    """Clear the record (tests; a forked worker that must not remove its parent's folders)."""
    _made.clear()
    _found.clear()
