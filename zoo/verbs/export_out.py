"""Where an export goes: a temp folder beside `export.out`, renamed into place when finished; an earlier export there
is replaced only when the folder holds exactly the files that export wrote (its model.json lists them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zoo.core import owned, trust
from zoo.errors import ZooError

MANIFEST = "model.json"


def out_dir(opts: dict, ckpt_path: Path) -> Path:
    """export.out, else <run dir>/export (the checkpoint's run, or its own folder for a loose .ckpt)."""
    if opts.get("out"):
        return Path(str(opts["out"])).expanduser().resolve()
    ckpt_path = ckpt_path.resolve()
    run = ckpt_path.parent.parent if ckpt_path.parent.name == "checkpoints" else ckpt_path.parent
    return run / "export"


def staging_dir(out: Path) -> Path:
    """A temp folder beside `out` (same file system, so the final rename is atomic), once `out` is known to be new,
    empty or an earlier export; fails early, in one line."""
    earlier_export(out, set())
    try:
        return owned.temp_dir(out.parent, prefix=f".{out.name}.")
    except OSError as e:
        raise ZooError(f"cannot write the export to {out} ({e.strerror or e}); pass a writable export.out=<folder>") \
            from None


def earlier_export(out: Path, written: set[str]) -> set[str]:
    """The files that the export already in `out` wrote, when the folder holds those and nothing else (empty for a
    new or empty folder); one line refusing any other folder. An export from before model.json listed its files
    counts as having written its model file and the files this export writes (`written`). model.json is artifact
    data: every name it gives must lie inside `out` (zoo.core.trust.inside), or nothing is replaced."""
    if out.exists() and not out.is_dir():
        raise ZooError(f"export.out={out} is a file; pass a folder path (it is created)")
    if not out.is_dir() or not any(out.iterdir()):
        return set()
    meta = _manifest(out)
    if meta is None:
        found = sorted(owned.listed_files(out))
        raise ZooError(f"export.out={out} is a folder with other files in it ({', '.join(found[:3])}); pass a new or "
                       "empty folder, or an earlier export's folder (it is replaced)")
    model = [meta["file"]] if "file" in meta else []
    listed = set(meta["files"]) if "files" in meta else {MANIFEST, *written, *model}
    fix = "this folder is not replaced; move what you keep out of it, or pass another export.out"
    for name in sorted(listed, key=str):
        trust.inside(out, name, f"export.out={out}: its model.json", fix)
    extra = owned.unlisted(out, listed) if "files" in meta or written else []
    if extra:
        raise ZooError(f"export.out={out} holds files that its earlier export did not write ({', '.join(extra[:3])}); "
                       "move them out or pass another folder (an export replaces only its own files)")
    folders = _other_folders(out, listed)
    if folders:
        raise ZooError(f"export.out={out} holds folders that its earlier export did not make ({', '.join(folders[:3])})"
                       "; move them out or pass another folder (an export replaces only its own files)")
    return listed


def _other_folders(out: Path, listed: set[str]) -> list[str]:
    """The folders under `out` that hold none of the `listed` files (an export makes a folder only to put files in)."""
    theirs = {str(parent) for name in listed for parent in Path(name).parents if str(parent) != "."}
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")
                  if p.is_dir() and not p.is_symlink() and str(p.relative_to(out)) not in theirs)


def _manifest(out: Path) -> dict[str, Any] | None:
    """An earlier export's model.json, when it is one: a task and a format, and a list of file names."""
    # trust: the names it returns are checked by its caller, earlier_export (zoo.core.trust.inside)
    try:
        meta = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not {"task", "format"} <= meta.keys():
        return None
    files = meta.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return meta


def write_manifest(tmp: Path, meta: dict) -> dict:
    """model.json into the finished temp folder, listing every file of the export (itself included)."""
    meta = {**meta, "files": sorted(owned.listed_files(tmp) | {MANIFEST})}
    (tmp / MANIFEST).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def publish(tmp: Path, out: Path) -> None:
    """Rename the finished temp folder into place; an earlier export there is replaced only now, its files alone."""
    listed = earlier_export(out, owned.listed_files(tmp))
    try:
        owned.replace_listed(tmp, out, listed)
    except FileExistsError as e:  # a file appeared in the folder while the export ran
        raise ZooError(f"export.out: {e}; move them out or pass another folder") from None


def discard(tmp: Path) -> None:
    owned.remove(tmp)
