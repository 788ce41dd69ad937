"""`zoo predict` for nlp/bert: one JSON line per input text, with the label and the class probabilities.

input= is a text, a file (one text per line; a sentence pair as `first<TAB>second`), a folder of .txt files, or `-`:
standard input, one text per line (no shell or Hydra quoting needed). Options: predict.batch_size (32),
predict.max_length (the training max_length, else 128), predict.encoding (of input files; else task.data.encoding).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from zoo.errors import ZooError, one_line
from zoo.nlp.data import PAIR_SEP, tokenize
from zoo.nlp.files import decode, read_text
from zoo.nlp.sampler import pad_batch

# The predict.* keys this task reads (every other predict.* key is refused, not dropped).
PREDICT_KEYS = ("batch_size", "max_length", "encoding")


def read_inputs(input: str | None, encoding: str = "utf-8",
                errors: list[dict] | None = None) -> list[tuple[str, str | None]]:
    """(text, text_pair or None) per input line. With `errors`, a folder's unreadable file becomes an entry there
    ({"file", "error"}) and the other files are read; without, it is a ZooError."""
    if input is None or not str(input).strip():
        raise ZooError("nothing to predict; pass input=\"a sentence\", input=<file with one text per line>, "
                       "or input=- with one text per line on standard input")
    path = Path(str(input)).expanduser()
    key = "predict.encoding"
    if str(input) == "-":
        if sys.stdin is None:
            raise ZooError("input=- reads texts from standard input, but this process has none; pipe them in, "
                           "e.g. `cat texts.txt | python -m zoo predict ckpt_path=... input=-`")
        if sys.stdin.isatty():
            print("zoo: reading texts from standard input, one per line; end with Ctrl-D", file=sys.stderr)
        lines = decode(sys.stdin.buffer.read(), "standard input", encoding, key).splitlines()
        input = "standard input"
    elif path.is_dir():
        lines = _folder_lines(path, encoding, errors)
        if not lines and not errors:
            raise ZooError(f"{path} holds no .txt files with text; put one text per line in .txt files")
    elif path.is_file():
        lines = read_text(path, encoding, key).splitlines()
    elif path.exists():  # /dev/zero, a FIFO: reading it never ends; its name is no text to classify either
        raise ZooError(f"input {path} is not a regular file (a device, pipe or socket); pass a text, a file of texts "
                       "or a folder of .txt files")
    else:
        lines = [str(input)]
    pairs = []
    for line in lines:
        if line.strip():
            first, _, second = line.partition("\t")
            pairs.append((first.strip(), second.strip() or None))
    if not pairs and not errors:
        raise ZooError(f"{input} has no non-empty lines to predict")
    return pairs


def _folder_lines(path: Path, encoding: str, errors: list[dict] | None) -> list[str]:
    lines = []
    for p in sorted(path.glob("*.txt")):
        try:
            lines += read_text(p, encoding, "predict.encoding").splitlines()
        except ZooError as e:
            if errors is None:
                raise
            errors.append({"file": str(p), "error": one_line(e)})
    return lines


def _encoding(cfg: Any) -> str:
    opts = (cfg.get("predict") or {}) if cfg is not None else {}
    data = cfg.get("task", {}).get("data") if cfg is not None else None
    return str(opts.get("encoding") or (data.get("encoding") if data else None) or "utf-8")


def _max_length(cfg: Any) -> int:
    opts = (cfg.get("predict") or {}) if cfg is not None else {}
    if opts.get("max_length"):
        return int(opts["max_length"])
    data = cfg.get("task", {}).get("data") if cfg is not None else None
    return int(data.get("max_length", 128)) if data else 128


@torch.inference_mode()
def predict(model: Any, cfg: Any, input: str | None) -> Iterator[dict]:
    if model.tokenizer is None:
        raise ZooError("this checkpoint carries no tokenizer; export it again from a run of this version")
    errors: list[dict] = []
    items = read_inputs(input, _encoding(cfg), errors)
    yield from errors  # a folder's unreadable file: its own line; the others' texts go on
    opts = (cfg.get("predict") or {}) if cfg is not None else {}
    bs = int(opts.get("batch_size", 32))
    rows = [{"text": t, "text_pair": p, "label": None} for t, p in items]
    if any(p is not None for _, p in items) and not all(p is not None for _, p in items):
        raise ZooError("some lines are sentence pairs (with a TAB) and some are not; use one kind per input")
    model.eval()
    device = next(model.parameters()).device
    regression = model.hparams.task_type == "regression"
    names = model.hparams.label_names
    for start in range(0, len(rows), bs):
        chunk = rows[start:start + bs]
        feats, _ = tokenize(model.tokenizer, chunk, _max_length(cfg))
        for f in feats:
            f.pop("label")
        batch = pad_batch(feats, model.tokenizer.pad_token_id or 0)
        inputs = {k: v.to(device) for k, v in batch.items() if k != "text"}
        out = model(**inputs).float().cpu()
        for i, row in enumerate(chunk):
            text = row["text"] + (PAIR_SEP + row["text_pair"] if row["text_pair"] else "")
            if regression:
                yield {"text": text, "score": round(float(out[i]), 4)}
            else:
                probs = out[i].softmax(-1).tolist()
                best = max(range(len(probs)), key=probs.__getitem__)
                yield {"text": text, "label": names[best], "probs": {n: round(p, 4) for n, p in zip(names, probs)}}
