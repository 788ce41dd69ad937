"""A word n-gram language model built from the user's text and written as an ARPA file, for the beam decoder.

Interpolated Kneser-Ney (Chen & Goodman 1998) with one absolute discount per order, D = n1 / (n1 + 2 n2) (n1, n2:
the n-grams of that order seen once and twice), the estimate KenLM's lmplz and SRILM start from. Lower orders
count continuations (how many distinct words precede an n-gram), not occurrences; the unigrams are interpolated
with a uniform distribution over the words, </s> and <unk>. In ARPA's backoff form an n-gram's stored probability
is the interpolated one and a history's backoff weight is the mass its discounts freed, so a reader that backs off
(KenLM, inside flashlight's decoder) computes the same probabilities. Written here, about a hundred lines, rather
than through a package: KenLM's own builder (lmplz) is a C++ program that PyPI's `kenlm` does not ship, and NLTK's
`nltk.lm` cannot write ARPA; flashlight reads what this writes through its KenLM.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable

from zoo.errors import ZooError

BOS, EOS, UNK = "<s>", "</s>", "<unk>"


def _discount(counts: Counter) -> float:
    n1 = sum(1 for c in counts.values() if c == 1)
    n2 = sum(1 for c in counts.values() if c == 2)
    d = n1 / (n1 + 2 * n2) if n1 + n2 else 0.5
    return min(max(d, 0.1), 0.9)  # a tiny corpus can give 0 or 1: keep some mass on both sides


def _counts(sentences: list[list[str]], order: int) -> list[Counter]:
    """counts[n - 1]: the order-n counts KN interpolates with: occurrences for the top order and for n-grams that
    start at <s> (no word precedes them), continuations (distinct words seen before them) otherwise."""
    raw = [Counter() for _ in range(order)]
    for words in sentences:
        padded = [BOS, *words, EOS]
        for i in range(1, len(padded)):
            for n in range(1, min(order, i + 1) + 1):
                raw[n - 1][tuple(padded[i - n + 1:i + 1])] += 1
    counts = [Counter() for _ in range(order)]
    counts[order - 1] = Counter(raw[order - 1])
    for n in range(order - 1):
        counts[n].update({g: c for g, c in raw[n].items() if g[0] == BOS})
    for n in range(1, order):
        for gram in raw[n]:
            if gram[1] != BOS:
                counts[n - 1][gram[1:]] += 1
    return counts


def build_arpa(sentences: Iterable[str], order: int = 3) -> tuple[str, list[str]]:
    """(ARPA text, the words it knows) from one sentence per string (words split on whitespace)."""
    if not 1 <= order <= 6:
        raise ZooError(f"lm_order={order}: give an n-gram order from 1 to 6")
    corpus = [s.split() for s in sentences if s.split()]
    if not corpus:
        raise ZooError("the language model's text has no words; give a file with one sentence per line")
    counts = _counts(corpus, order)
    words = sorted({w for s in corpus for w in s})
    vocab = [*words, EOS, UNK]
    probs: list[dict[tuple, float]] = [{} for _ in range(order)]
    backoff: dict[tuple, float] = {}
    for n in range(order):
        d = _discount(counts[n])
        totals, distinct = defaultdict(int), defaultdict(int)
        for gram, c in counts[n].items():
            totals[gram[:-1]] += c
            distinct[gram[:-1]] += 1
        gammas = {h: d * distinct[h] / totals[h] for h in totals if totals[h]}
        for gram, c in counts[n].items():
            h = gram[:-1]
            if not totals[h]:
                continue
            lower = 1 / len(vocab) if n == 0 else probs[n - 1][gram[1:]]
            probs[n][gram] = max(c - d, 0) / totals[h] + gammas[h] * lower
        if n == 0:  # words never seen as a continuation (<unk>; a word only ever after <s>) get the uniform share
            for w in vocab:
                probs[0].setdefault((w,), gammas.get((), 1.0) / len(vocab))
        else:
            backoff.update(gammas)
    return _write(probs, backoff), words


def _write(probs: list[dict[tuple, float]], backoff: dict[tuple, float]) -> str:
    order = len(probs)
    lines = ["", "\\data\\"]
    sizes = [len(p) + (1 if n == 0 else 0) for n, p in enumerate(probs)]  # +1: the <s> unigram
    lines += [f"ngram {n + 1}={k}" for n, k in enumerate(sizes)]
    for n, table in enumerate(probs):
        lines += ["", f"\\{n + 1}-grams:"]
        rows = sorted(table.items())
        if n == 0:
            rows = [((BOS,), None), *rows]
        for gram, p in rows:
            logp = -99.0 if p is None else math.log10(p)
            text = f"{logp:.6f}\t{' '.join(gram)}"
            if n + 1 < order and gram in backoff:
                text += f"\t{math.log10(backoff[gram]):.6f}"
            lines.append(text)
    lines += ["", "\\end\\", ""]
    return "\n".join(lines)


def write_lm(text: str | list[str], order: int, folder: str) -> tuple[str, list[str]]:
    """The ARPA file built from `text` (a file of one sentence per line, or the sentences), normalised as the
    model's transcripts are, written into `folder`, and its words."""
    import os

    from .vocab import normalize_text

    if isinstance(text, str):
        if not os.path.isfile(text):
            raise ZooError(f"decoder lm_text file not found: {text}; give a text file, one sentence per line, or "
                           "train (the run's training transcripts)")
        with open(text, encoding="utf-8") as f:
            text = f.read().splitlines()
    arpa, words = build_arpa((normalize_text(line) for line in text), order)
    path = os.path.join(folder, "words.arpa")
    with open(path, "w", encoding="utf-8") as f:
        f.write(arpa)
    return path, words
