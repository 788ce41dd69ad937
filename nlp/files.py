"""Local text-classification files: CSV, TSV or JSONL, with or without a header, any column layout.

Each reader returns rows `{"text": str, "text_pair": str | None, "label": str | None}`; every user mistake
(missing file, empty file, unknown column, bad JSON, empty text, bytes that are not in the file's encoding, a header
line read as data) is one ZooError naming the file and line.
"""

from __future__ import annotations

import codecs
import csv
import io
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


def check_encoding(encoding: str, key: str = "task.data.encoding") -> str:
    """The codec's canonical name ('utf-8', 'iso8859-1', ...)."""
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        raise ZooError(f"unknown {key} '{encoding}'; use a Python codec name such as utf-8, utf-8-sig, latin-1 "
                       "or cp1252") from None


def decode(raw: bytes, where: str | Path, encoding: str = "utf-8", key: str = "task.data.encoding") -> str:
    """Bytes -> text; a byte the encoding cannot decode is one line with its line number and byte offset.

    (Decoding all the bytes at once, rather than through a text stream, is what makes the offset exact.)
    """
    codec = check_encoding(encoding, key)
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        bad = raw[e.start:e.end][:4].hex(" ")
        raise ZooError(f"{where}:{line}: byte offset {e.start} (0x{bad}) is not valid {encoding} ({e.reason}); "
                       f"set {key}=<the file's encoding>, e.g. {key}=latin-1 or {key}=cp1252") from None
    # A byte-order mark (Excel and Notepad write one) would glue itself to the first label or text.
    return text[1:] if codec == "utf-8" and text.startswith("\ufeff") else text


def read_text(path: Path, encoding: str = "utf-8", key: str = "task.data.encoding") -> str:
    return decode(path.read_bytes(), path, encoding, key)


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


def _read_delimited(path: Path, delimiter: str, header: bool, cols: dict[str, Column], encoding: str) -> list[dict]:
    f = io.StringIO(read_text(path, encoding), newline="")
    # TSV files of tokenised text contain quote characters that are not CSV quoting.
    reader = csv.reader(f, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
    lines = [(reader.line_num, r) for r in reader if r and any(c.strip() for c in r)]
    names = None
    if header:
        if not lines:
            raise ZooError(f"{path} is empty; it needs a header line and at least one example")
        names = [c.strip() for c in lines[0][1]]
        lines = lines[1:]
    idx = {role: _column_index(c, names, path, role) for role, c in cols.items()}
    lines = _check_field_counts(path, lines, names, idx, delimiter)
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


def _check_field_counts(path: Path, lines: list[tuple[int, list[str]]], names: list[str] | None,
                        idx: dict[str, int | None], delimiter: str) -> list[tuple[int, list[str]]]:
    """Every row must have as many fields as the header (without one: as most rows). A row with more would be cut
    silently (a CSV text with an unquoted comma). Where the text is the last column and no pair is read (label,text
    files), the rest of such a row is its text, said once; any other mismatch is an error naming file and line."""
    from collections import Counter

    if not lines:
        return lines
    width = len(names) if names is not None else Counter(len(r) for _, r in lines).most_common(1)[0][0]
    whose = "the header has" if names is not None else "most lines have"
    rest_is_text = idx["text"] == width - 1 and idx.get("text_pair") is None
    out, joined = [], []
    for lineno, r in lines:
        if len(r) > width and rest_is_text:
            r = [*r[:width - 1], delimiter.join(r[width - 1:])]
            joined.append(lineno)
        elif len(r) != width:
            quote = "; quote fields that hold commas (\"a, b\")" if delimiter == "," and len(r) > width else ""
            raise ZooError(f"{path}:{lineno}: {len(r)} field(s), but {whose} {width}{quote}; fix the line, or check "
                           "task.data.format and task.data.header")
        out.append((lineno, r))
    if joined:
        sep = "commas" if delimiter == "," else "tabs"
        log.warning("%s: %d line(s) have more fields than the %d columns (first: line %d): the rest of each such "
                    "line, %s included, was read as its text", path, len(joined), width, joined[0], sep)
    return out


def _read_jsonl(path: Path, cols: dict[str, Column], encoding: str) -> list[dict]:
    rows = []
    # split("\n"), not splitlines(): JSON strings may hold U+2028 and other characters splitlines() breaks at.
    for lineno, line in enumerate(read_text(path, encoding).split("\n"), 1):
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


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


# Column names a header line uses (GLUE, SentEval, Kaggle dumps): a first row whose label or text is one of them,
# with a label seen nowhere else, is a header read as data.
COLUMN_NAMES = {"label", "labels", "class", "category", "target", "sentiment", "polarity", "score", "y", "sentence",
                "sentences", "sentence1", "sentence2", "text", "texts", "review", "question", "document", "content"}


def check_header_row(path: Path, rows: list[dict]) -> None:
    """header=false, but the first row is a header read as data: its label (e.g. 'label') appears nowhere else, and
    every other label is a number or the row names its columns. Training would quietly add a class named after the
    column."""
    if len(rows) < 2:
        return
    first = rows[0]["label"]
    others = [r["label"] for r in rows[1:]]
    if not first or _is_number(first) or first in others:
        return
    named = {first.lower(), str(rows[0]["text"] or "").lower()} & COLUMN_NAMES
    if named or all(_is_number(x) for x in others):
        why = f"{sorted(named)[0]!r} names a column" if named else "every other label is a number"
        raise ZooError(f"{path}:{rows[0]['line']}: the first line looks like a header (label {first!r} appears only "
                       f"there, {why}); set task.data.header=true "
                       "(columns may then be named, e.g. task.data.text_column=sentence)")


def read_rows(path: str | Path, fmt: str = "auto", header: bool = False, text_column: Column = 0,
              text_pair_column: Column = None, label_column: Column = None, encoding: str = "utf-8") -> list[dict]:
    """Rows of one file. `label_column=None` reads unlabelled text (for predict)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise ZooError(f"data file not found: {path}; check task.data.train_file / val_file / test_file")
    fmt = detect_format(path, fmt)
    cols = {"text": text_column, "text_pair": text_pair_column, "label": label_column}
    if fmt == "jsonl":
        rows = _read_jsonl(path, cols, encoding)
    else:
        rows = _read_delimited(path, "," if fmt == "csv" else "\t", header, cols, encoding)
        if not header and label_column is not None:
            check_header_row(path, rows)
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
