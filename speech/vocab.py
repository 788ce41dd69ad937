"""Character vocabulary with the CTC blank at index 0; stored in the checkpoint as a plain list of strings."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

BLANK = "<blank>"
_KEEP = re.compile(r"[^\w' ]|_", re.UNICODE)  # letters, digits, apostrophe and space survive normalisation


def normalize_text(text: str) -> str:
    """Lower-case, NFKC, punctuation to spaces, whitespace collapsed: what the model is trained to emit."""
    text = unicodedata.normalize("NFKC", text).lower()
    return " ".join(_KEEP.sub(" ", text).split())


class Vocab:
    """tokens[0] is the blank; the rest are characters (" " is the word separator)."""

    def __init__(self, tokens: list[str]) -> None:
        if not tokens or tokens[0] != BLANK:
            raise ValueError(f"vocabulary must start with {BLANK!r}")
        if len(set(tokens)) != len(tokens):
            raise ValueError("vocabulary has duplicate tokens")
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def build(cls, transcripts: Iterable[str]) -> Vocab:
        chars = set()
        for t in transcripts:
            chars.update(normalize_text(t))
        chars.add(" ")
        return cls([BLANK] + sorted(chars))

    def extend(self, transcripts: Iterable[str]) -> Vocab:
        """Old tokens keep their indices (so a checkpoint's output rows still line up); new characters are appended."""
        new = sorted(set(Vocab.build(transcripts).tokens[1:]) - set(self.tokens))
        return Vocab(self.tokens + new)

    def __len__(self) -> int:
        return len(self.tokens)

    def oov(self, text: str) -> set[str]:
        return {c for c in text if c not in self.index}

    def encode(self, text: str) -> list[int]:
        """Text (already normalised) to ids; a character outside the vocabulary is a KeyError by design."""
        return [self.index[c] for c in text]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids (blanks and repeats already collapsed) to text."""
        return "".join(self.tokens[i] for i in ids if i != 0).strip()
