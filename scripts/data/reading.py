"""Reading what a user downloaded, as its publisher ships it: a folder, a .zip, or a .tar (.gz, .tgz, .bz2, .xz).

Nothing is extracted under a member's own name: the builders read bytes and write files under names they make
themselves, so an archive's paths (absolute, `..`, links) never decide where anything lands. A wrong or truncated
archive is one ZooError naming the file and where to download it again. Tar archives are read as streams (one
pass each), so a .tar.gz of hundreds of MB is never decompressed once per member.
"""

from __future__ import annotations

import lzma
import os
import posixpath
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from zoo.errors import ZooError

# What a broken download raises while it is read: a truncated gzip stream (EOFError, zlib.error), a cut tar
# (ReadError), a zip without its central directory or with a bad CRC (BadZipFile), an unreadable file (OSError).
BROKEN = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, OSError)


class Download:
    """A publisher's download: a folder, a zip or a tar archive; `where` says where the publisher offers it."""

    def __init__(self, path: Path, where: str) -> None:
        self.path, self.where = Path(path).expanduser(), where
        if not self.path.exists():
            raise ZooError(f"{self.path} not found; download it from {where} (this script never downloads)")
        if self.path.is_dir():
            self.kind = "folder"
        elif zipfile.is_zipfile(self.path):
            self.kind = "zip"
        else:
            self.kind = "tar"

    @contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            yield
        except BROKEN as e:
            reason = " ".join(str(e).split())[:100] or type(e).__name__
            what = "folder" if self.kind == "folder" else "zip or tar archive"
            raise ZooError(f"{self.path} is not a readable {what} ({reason}); it may be truncated or another "
                           f"file: download it again from {self.where}") from None

    def scan(self, keep: Callable[[str], bool]) -> tuple[list[str], dict[str, bytes]]:
        """(every file's name, the bytes of those `keep` accepts), in one pass. Names are relative POSIX paths."""
        return self._read(keep, listing=True)

    def read(self, wanted: set[str]) -> dict[str, bytes]:
        """The bytes of the named files (one pass); a name that is not there is left out."""
        return self._read(wanted.__contains__, listing=False)[1]

    def stream(self, wanted: set[str]) -> Iterator[tuple[str, bytes]]:
        """(name, bytes) of the named files one at a time, in the download's order: big files never all in memory."""
        with self._guard():
            for name, load in self._members():
                if name in wanted:
                    yield name, load()

    def _read(self, keep: Callable[[str], bool], listing: bool) -> tuple[list[str], dict[str, bytes]]:
        names: list[str] = []
        found: dict[str, bytes] = {}
        with self._guard():
            for name, load in self._members():
                if listing:
                    names.append(name)
                if keep(name):
                    found[name] = load()
        return names, found

    def _members(self) -> Iterator[tuple[str, Callable[[], bytes]]]:
        if self.kind == "folder":
            for top, dirs, files in os.walk(self.path):  # links to folders are not followed
                dirs.sort()
                for f in sorted(files):
                    full = Path(top, f)
                    if full.is_file():
                        yield full.relative_to(self.path).as_posix(), full.read_bytes
        elif self.kind == "zip":
            with zipfile.ZipFile(self.path) as zf:
                for info in zf.infolist():
                    if not info.is_dir():
                        yield _clean(info.filename), (lambda i=info: zf.read(i))
        else:
            with tarfile.open(self.path, mode="r|*") as tf:
                for member in tf:
                    if member.isfile():
                        yield _clean(member.name), (lambda m=member: tf.extractfile(m).read())


def _clean(name: str) -> str:
    return posixpath.normpath(name).lstrip("/").removeprefix("./")


def by_basename(names: list[str], pattern: Callable[[str], bool], prefer_parent: str | None = None) -> dict[str, str]:
    """basename -> name for the names whose basename `pattern` accepts. Where a basename occurs in several folders,
    the one inside a folder named `prefer_parent` wins; two other copies are an ambiguity the user must resolve."""
    out: dict[str, str] = {}
    for name in names:
        base = posixpath.basename(name)
        if not pattern(base):
            continue
        if base in out:
            old_ok = posixpath.basename(posixpath.dirname(out[base])) == prefer_parent
            new_ok = posixpath.basename(posixpath.dirname(name)) == prefer_parent
            if old_ok == new_ok:
                raise ZooError(f"two files named {base} ({out[base]} and {name}); pass the folder that holds only "
                               "the one you want")
            if old_ok:
                continue
        out[base] = name
    return out


def check_wav(data: bytes, name: str) -> None:
    """A RIFF/WAVE file whose data chunk holds every byte its header promises (a cut file fails here, where audio
    readers would quietly return fewer samples)."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise ZooError(f"{name} is not a WAV file; download the dataset again")
    pos = 12
    while pos + 8 <= len(data):
        chunk, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "little")
        if chunk == b"data":
            if pos + 8 + size > len(data):
                raise ZooError(f"{name} is truncated ({len(data) - pos - 8} of {size} audio bytes); download the "
                               "dataset again")
            return
        pos += 8 + size + (size & 1)
    raise ZooError(f"{name} has no audio data chunk (truncated?); download the dataset again")
