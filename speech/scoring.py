"""Per-speaker and per-group word errors of a test, and the files the run keeps of them (`test_speakers.tsv`,
and `val_speakers.txt`: the speakers a run carved out of its training manifest for validation).

Each utterance adds its word edits and reference words (speech/text.py, after the scoring normalisation) to its
speaker's sums; a speaker's WER and a group's (children / adults) are corpus rates over those sums, so a group's
WER weighs each word once, however its speakers' utterance counts differ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from .text import error_rate, word_errors

FILE = "test_speakers.tsv"


@dataclass
class SpeakerScores:
    """Sums per speaker: utterances, word edits, reference words."""

    sums: dict[str, list[int]] = field(default_factory=dict)

    def add(self, speakers: list[str | None], hyps: list[str], refs: list[str]) -> None:
        for speaker, h, r in zip(speakers, hyps, refs, strict=True):
            edits, words = word_errors(h, r)
            s = self.sums.setdefault("?" if speaker is None else str(speaker), [0, 0, 0])
            s[0], s[1], s[2] = s[0] + 1, s[1] + edits, s[2] + words

    def known(self) -> bool:
        """Whether any utterance named its speaker (a manifest without the field has nothing per speaker)."""
        return any(s != "?" for s in self.sums)

    def group_wer(self, groups: dict[str, str]) -> dict[str, float]:
        """{group: WER} over the speakers `groups` places (speakers it lacks are left out)."""
        per: dict[str, list[tuple[int, int]]] = {}
        for speaker, (_, edits, words) in self.sums.items():
            if speaker in groups:
                per.setdefault(groups[speaker], []).append((edits, words))
        return {g: error_rate(pairs) for g, pairs in sorted(per.items())}

    def table(self, groups: dict[str, str]) -> str:
        """TSV: speaker, group, utterances, word errors, reference words, WER; worst speaker first."""
        lines = ["speaker\tgroup\tutterances\tword_errors\tref_words\twer"]
        rows = sorted(self.sums.items(), key=lambda kv: (-error_rate([tuple(kv[1][1:])]), kv[0]))
        for speaker, (n, edits, words) in rows:
            rate = error_rate([(edits, words)])
            lines.append(f"{speaker}\t{groups.get(speaker, '')}\t{n}\t{edits}\t{words}\t{rate:.4f}")
        return "\n".join(lines) + "\n"

    def write(self, folder: str | Path, groups: dict[str, str]) -> Path:
        return write_run_file(folder, FILE, self.table(groups))


def write_run_file(folder: str | Path, name: str, text: str) -> Path:
    """`text` into `folder`/`name`, written to a temp file and renamed into place."""
    from zoo.core import owned

    out = Path(folder) / name
    owned.make_dirs(folder)
    fd, tmp = owned.temp_file(folder, prefix=f".{name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        existed = out.exists()
        os.replace(tmp, out)
        if not existed:
            owned.created(out)
    finally:
        owned.remove(tmp, prune=False)  # gone already unless the write failed
    return out
