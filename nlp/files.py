"""Local text-classification files: CSV, TSV or JSONL, with or without a header, any column layout.

Each reader returns rows `{"text": str, "text_pair": str | None, "label": str | None}`; every user mistake
(missing file, empty file, unknown column, bad JSON, empty text) is one ZooError naming the file and line.
"""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

from zoo.errors import ZooError

log = logging.getLogger(__name__)
FORMATS = ("csv", "tsv", "jsonl")
Column = str | int | None


def detect_format(path: Path, fmt: str = "auto") -> str:
    if fmt != "auto":
        if fmt not in FORMATS:
            raise ZooError(f"unknown file format '{fmt}'; use task.data.format=auto|csv|tsv|jsonl")
        return fmt
    suffix = path.suffix.lower().lstrip(".")
    if suffix in ("csv", "tsv"):
        return suffix
    if suffix in ("jsonl", "json", "ndjson"):
        return "jsonl"
    if suffix == "txt":
        return "tsv"
    raise ZooError(f"cannot tell the format of {path} from its suffix; set task.data.format=csv|tsv|jsonl")


def _column_index(col: Column, header: list[str] | None, path: Path, role: str) -> int | None:
    if col is None:
        return None
    if header is not None:
        if isinstance(col, int) or (isinstance(col, str) and col.isdigit() and col not in header):
            return int(col)
        if col not in header:
            raise ZooError(f"{path}: no {role} column '{col}' in the header {header}; set task.data.{role}_column "
                           "to one of them (or task.data.header=false for files without a header)")
        return header.index(col)
    if isinstance(col, int) or (isinstance(col, str) and col.isdigit()):
        return int(col)
    raise ZooError(f"{path}: {role} column '{col}' is a name but task.data.header=false; use a 0-based column "
                   "number, or task.data.header=true if the first line names the columns")


def _read_delimited(path: Path, delimiter: str, header: bool, cols: dict[str, Column]) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as f:
        # TSV files of tokenised text contain quote characters that are not CSV quoting.
        reader = csv.reader(f, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
        lines = [(i + 1, r) for i, r in enumerate(reader) if r and any(c.strip() for c in r)]
    names = None
    if header:
        if not lines:
            raise ZooError(f"{path} is empty; it needs a header line and at least one example")
        names = [c.strip() for c in lines[0][1]]
        lines = lines[1:]
    idx = {role: _column_index(c, names, path, role) for role, c in cols.items()}
    rows = []
    for lineno, r in lines:
        row: dict = {"line": lineno}
        for role, i in idx.items():
            if i is None:
                row[role] = None
                continue
            if i >= len(r):
                raise ZooError(f"{path}:{lineno}: has {len(r)} column(s), the {role} column is number {i} (0-based); "
                               f"check task.data.{role}_column and task.data.format (delimiter)")
            row[role] = r[i].strip()
        rows.append(row)
    return rows


def _read_jsonl(path: Path, cols: dict[str, Column]) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ZooError(f"{path}:{lineno}: not valid JSON ({e.msg}); JSONL needs one object per line") from None
            if not isinstance(obj, dict):
                raise ZooError(f"{path}:{lineno}: expected a JSON object per line, got {type(obj).__name__}")
            row: dict = {"line": lineno}
            for role, key in cols.items():
                if key is None:
                    row[role] = None
                    continue
                if str(key) not in obj:
                    raise ZooError(f"{path}:{lineno}: no key '{key}' (has {sorted(obj)}); set task.data.{role}_column")
                value = obj[str(key)]
                row[role] = None if value is None else str(value).strip()
            rows.append(row)
    return rows


def read_rows(path: str | Path, fmt: str = "auto", header: bool = False, text_column: Column = 0,
              text_pair_column: Column = None, label_column: Column = None) -> list[dict]:
    """Rows of one file. `label_column=None` reads unlabelled text (for predict)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ZooError(f"data file not found: {path}; check task.data.train_file / val_file / test_file")
    fmt = detect_format(path, fmt)
    cols = {"text": text_column, "text_pair": text_pair_column, "label": label_column}
    if fmt == "jsonl":
        rows = _read_jsonl(path, cols)
    else:
        rows = _read_delimited(path, "," if fmt == "csv" else "\t", header, cols)
    empty = [r["line"] for r in rows if not r["text"]]
    if empty:
        # Real corpora have a few (CR's train.tsv has one): skip them loudly rather than fail or train on "".
        log.warning("%s: skipped %d example(s) with an empty text (line %s%s)", path, len(empty), empty[0],
                    ", ..." if len(empty) > 1 else "")
        rows = [r for r in rows if r["text"]]
    if not rows:
        raise ZooError(f"{path} has no examples with text; fill it or point task.data at another file")
    for row in rows:
        if label_column is not None and not row["label"]:
            raise ZooError(f"{path}:{row['line']}: the example has no label; fill it or check task.data.label_column")
    return rows
