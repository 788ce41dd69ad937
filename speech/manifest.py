"""JSON-lines manifests: one `{"audio_filepath": ..., "duration": ..., "text": ...}` object per line (NeMo's format).

Policy for bad lines (documented in docs/speech.md):
- a line that is not JSON or lacks `audio_filepath` / `text` stops the run with the file and line number:
  the manifest itself is broken and a partial read would silently train on the wrong data;
- a line whose transcript is empty, or whose audio is missing, unreadable, empty, holds NaN or inf samples or is
  longer than `max_duration` is skipped, and the skips are
  counted in one warning per manifest (reason -> count, first example). If every line is skipped it is an error.
- `duration` is optional: the file header is authoritative (a stale duration would mis-bucket batches);
- `speaker` is optional: read where a split by speaker or a per-speaker WER needs it.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass

from zoo.errors import ZooError

from .audio import probe
from .vocab import normalize_text

log = logging.getLogger(__name__)
REQUIRED = ("audio_filepath", "text")


@dataclass
class Utterance:
    path: str
    duration: float
    text: str
    speaker: str | None = None


def read_manifest(path: str, max_duration: float | None = None) -> list[Utterance]:
    """Relative audio paths resolve against the manifest's folder."""
    if not os.path.isfile(path):
        raise ZooError(f"manifest not found: {path}; pass an existing JSON-lines file")
    base = os.path.dirname(os.path.abspath(path))
    rows, skipped, example = [], Counter(), {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ZooError(f"{path}:{lineno}: not valid JSON ({e.msg}); fix or delete the line") from e
            missing = [k for k in REQUIRED if not isinstance(row, dict) or k not in row]
            if missing:
                raise ZooError(f"{path}:{lineno}: missing field(s) {', '.join(missing)}; "
                               "each line needs audio_filepath and text")
            audio = os.path.join(base, os.path.expanduser(str(row["audio_filepath"])))
            reason = None
            if not normalize_text(str(row["text"] or "")):  # nothing to learn, and a WER with no reference words
                reason = "empty transcript"
            elif not os.path.isfile(audio):
                reason = "missing file"
            else:
                duration, reason = probe(audio)
                if reason is None and max_duration is not None and duration > max_duration:
                    reason = f"longer than max_duration={max_duration}s"
            if reason:
                skipped[reason] += 1
                example.setdefault(reason, f"line {lineno}: {audio}")
                continue
            speaker = row.get("speaker")
            rows.append(Utterance(audio, float(duration), str(row["text"]), None if speaker is None else str(speaker)))
    report_skips(path, skipped, example, kept=len(rows))
    return rows


def report_skips(source: str, skipped: Counter, example: dict, kept: int) -> None:
    if skipped:
        detail = "; ".join(f"{n} {reason} (e.g. {example[reason]})" for reason, n in skipped.items())
        log.warning("%s: skipped %d of %d utterances: %s", source, sum(skipped.values()),
                    sum(skipped.values()) + kept, detail)
    if kept == 0:
        raise ZooError(f"{source}: no usable utterances ({dict(skipped) or 'empty file'}); check the paths/audio")
