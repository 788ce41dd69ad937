"""The checkpoint an export reads, as one private file for the whole export.

A run still training replaces its best checkpoint (the new one written, the old one removed); an export that opened
the path three times (config, weights, sha256) could read two checkpoints, or find the file gone halfway (a
FileNotFoundError traceback). The export reads a snapshot instead: a hard link where the temp folder shares the
checkpoint's file system (no copy: the link keeps these bytes when the run replaces the file), else a copy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from zoo.core import owned


@contextlib.contextmanager
def snapshot(path: Path) -> Iterator[Path | None]:
    """The checkpoint at `path` as one private file for the whole export: a hard link where the temp folder shares
    its file system (no copy; the link keeps these bytes when training replaces the file), else a copy; None when the
    file is gone before it is opened (found missing ones are left to the ordinary "not found" line)."""
    if not path.is_file():
        yield path  # not there: deploy_config says so in its own line
        return
    owned.abandoned(tempfile.gettempdir(), "zoo-export-")  # a killed export's snapshot (marked, its writer gone)
    folder = owned.temp_dir(tempfile.gettempdir(), prefix="zoo-export-")
    owned.mark_owner(folder)
    copy = folder / path.name
    try:
        try:
            os.link(path, copy)
        except FileNotFoundError:
            yield None
            return
        except OSError:  # another file system, or links not allowed: copy it from one open file
            try:
                with open(path, "rb") as src, open(copy, "xb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            except FileNotFoundError:
                yield None
                return
        yield copy
    finally:
        owned.remove(folder)
