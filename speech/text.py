"""What WER and CER are computed on: transcripts normalised the way ASR results are compared, and the edit counts.

The scoring rule (docs/speech.md, "Scoring"): NFKC, lower case; numbers written as words: up to three digits as a
cardinal ("42" -> "forty two", "1st" -> "first", "3.5" -> "three point five"), four or more digits, or a leading
zero, digit by digit ("0351", "3227" -> "three two two seven": how codes and digit strings are read aloud; a year
is not read so), unless grouped by thousands ("1,000" -> "one thousand"); an apostrophe inside a word kept
("don't"), every other punctuation mark a space; whitespace collapsed. Both the reference and the hypothesis go
through it, so a model that writes "42" and a transcript that says "forty-two" agree. Pure functions, no torch.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
        "seventeen eighteen nineteen").split()
TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
SCALES = ((10**9, "billion"), (10**6, "million"), (1000, "thousand"), (100, "hundred"))
ORDINAL = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth",
           "twelve": "twelfth"}
_NUMBER = re.compile(r"(\d+)(?:\.(\d+))?(?:(st|nd|rd|th)\b)?")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "`": "'"})


def number_words(n: int) -> str:
    """A whole number in English words: 0 -> "zero", 1999 -> "one thousand nine hundred ninety nine"."""
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else " " + ONES[n % 10])
    for value, name in SCALES:
        if n >= value:
            rest = n % value
            return f"{number_words(n // value)} {name}" + ("" if rest == 0 else " " + number_words(rest))
    raise AssertionError(n)  # unreachable: n >= 100 meets the last scale


def _ordinal(words: str) -> str:
    *head, last = words.split()
    if last in ORDINAL:
        last = ORDINAL[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return " ".join([*head, last])


def _spell(match: re.Match) -> str:
    whole, frac, suffix = match.groups()
    if len(whole) >= 4 or (len(whole) > 1 and whole[0] == "0"):
        # a code, a phone or PIN number, a digit string: read digit by digit ("0351" -> "zero three five one")
        words = " ".join(ONES[int(d)] for d in whole)
    else:
        words = number_words(int(whole))
    if frac:
        words += " point " + " ".join(ONES[int(d)] for d in frac)
    elif suffix:
        words = _ordinal(words)
    return f" {words} "


def normalize_for_scoring(text: str) -> str:
    """The scoring rule of the module docstring, applied to a reference or a hypothesis."""
    text = unicodedata.normalize("NFKC", text).translate(_APOSTROPHES).lower()
    # a number grouped by thousands ("1,000") is a cardinal, however long
    text = re.sub(r"\b\d{1,3}(?:,\d{3})+\b", lambda m: f" {number_words(int(m.group().replace(',', '')))} ", text)
    text = _NUMBER.sub(_spell, text)
    text = re.sub(r"[^\w']|_", " ", text)
    text = re.sub(r"(?<!\w)'|'(?!\w)", " ", text)  # quotes around words go; "don't" stays
    return " ".join(text.split())


def edit_distance(hyp: Sequence, ref: Sequence) -> int:
    """Levenshtein distance (substitutions, insertions, deletions cost 1) between two sequences."""
    prev = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, 1):
        cur = [i]
        for j, r in enumerate(ref, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (h != r)))
        prev = cur
    return prev[-1]


def word_errors(hyp: str, ref: str) -> tuple[int, int]:
    """(word edits, reference words) after normalisation: summed over a corpus, their ratio is its WER."""
    h, r = normalize_for_scoring(hyp).split(), normalize_for_scoring(ref).split()
    return edit_distance(h, r), len(r)


def char_errors(hyp: str, ref: str) -> tuple[int, int]:
    """(character edits, reference characters, spaces included) after normalisation: the CER's two sums."""
    h, r = normalize_for_scoring(hyp), normalize_for_scoring(ref)
    return edit_distance(h, r), len(r)


def error_rate(pairs: Iterable[tuple[int, int]]) -> float:
    """Corpus rate: all edits over all reference units (not a mean of per-utterance rates)."""
    edits = units = 0
    for e, n in pairs:
        edits, units = edits + e, units + n
    return edits / units if units else float(edits > 0)


def wer(hyps: Sequence[str], refs: Sequence[str]) -> float:
    return error_rate(word_errors(h, r) for h, r in zip(hyps, refs, strict=True))


def cer(hyps: Sequence[str], refs: Sequence[str]) -> float:
    return error_rate(char_errors(h, r) for h, r in zip(hyps, refs, strict=True))
