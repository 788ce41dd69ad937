"""Where the config trees are: the zoo's own configs/ and the user's `ZOO_CONFIG_PATH` folders.

Apart from zoo.core.config so that the trust check (what the user's own tree names) can read it without importing the
composition code, which itself reads recorded overrides through the trust check.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

CONFIG_DIR = Path(os.environ.get("ZOO_CONFIG_DIR", Path(__file__).resolve().parents[2] / "configs"))


def config_dirs() -> list[Path]:
    """The config trees, in the order Hydra searches them: the zoo's own, then `ZOO_CONFIG_PATH` (folders
    separated by `:`, each laid out like configs/: task/<domain>/<name>.yaml, experiment/...), where a user keeps
    tasks and presets of their own without editing the zoo (hydra_plugins/zoo_searchpath adds them to Hydra)."""
    extra = [Path(p).expanduser().resolve() for p in os.environ.get("ZOO_CONFIG_PATH", "").split(os.pathsep) if p]
    for folder in extra:
        if not folder.is_dir() and folder not in _SAID_MISSING:
            _SAID_MISSING.add(folder)
            print(f"zoo: warning: ZOO_CONFIG_PATH names {folder}, which is not a folder: no tasks or presets are "
                  "read from it; fix the path (folders separated by ':')", file=sys.stderr, flush=True)
    return [CONFIG_DIR, *extra]


_SAID_MISSING: set[Path] = set()
