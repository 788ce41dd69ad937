"""CTC decoding: greedy best path (pure, tested on hand-made emissions), beam search with torchaudio's
flashlight-text decoder, optionally constrained by a lexicon and scored by a KenLM language model, and isolated
words: each utterance one word of a closed list, chosen by its CTC likelihood."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import torch

from zoo.errors import ZooError

SIL = "|"  # flashlight's word separator; our vocabulary writes it as " "
KINDS = ("greedy", "beam", "words")  # task.module.decoder.kind, predict.decoder


def greedy_ids(emissions: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
    """emissions (B, T, V) scores, lengths (B,) -> best-path ids per utterance, repeats merged, then blanks (0)
    dropped."""
    best = emissions.argmax(-1).cpu()  # (B, T)
    out = []
    for row, n in zip(best, lengths.cpu().tolist()):
        row = row[: int(n)]
        if row.numel() == 0:
            out.append([])
            continue
        keep = torch.ones_like(row, dtype=torch.bool)
        keep[1:] = row[1:] != row[:-1]
        out.append([int(i) for i in row[keep] if i != 0])
    return out


def greedy_decode(emissions: torch.Tensor, lengths: torch.Tensor, tokens: Sequence[str]) -> list[str]:
    return [" ".join("".join(tokens[i] for i in ids).split()) for ids in greedy_ids(emissions, lengths)]


def write_lexicon(words: Sequence[str], tokens: Sequence[str], path: str) -> str:
    """A flashlight lexicon (`word<TAB>c h a r s |`) for words spelled with `tokens`; a word with a character the
    vocabulary lacks could never be emitted, so it is refused by name."""
    spelled = spelled_words(words, tokens)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{w}\t{' '.join(w)} {SIL}\n" for w in spelled)
    return path


def spelled_words(lexicon: str | Sequence[str], tokens: Sequence[str]) -> list[str]:
    """The words of a lexicon (a list, or a flashlight lexicon file: the first column), each spelled with `tokens`."""
    if isinstance(lexicon, str):
        if not os.path.isfile(lexicon):
            raise ZooError(f"decoder lexicon file not found: {lexicon}; pass an existing file or a list of words")
        lexicon = _file_words(lexicon)
    words = list(dict.fromkeys(str(w) for w in lexicon))
    known = set(tokens[1:]) - {" "}
    bad = sorted({w for w in words if not w or set(w) - known})
    if bad or not words:
        raise ZooError(f"decoder.lexicon words {bad or '[]'} cannot be spelled with the vocabulary "
                       f"{''.join(sorted(known))!r}; use words made of its characters")
    return words


class WordDecoder:
    """Isolated words (spoken digits, commands): each utterance is one word of a closed lexicon, and the answer is
    the word with the highest CTC likelihood, all its alignments summed (the forward algorithm, what CTC training
    maximised). A beam search ranks words by their best single alignment and can keep a word whose one alignment
    is strong over one the model finds likelier overall."""

    def __init__(self, tokens: Sequence[str], lexicon: str | Sequence[str] | None = None, **other: object) -> None:
        if other:
            raise ZooError(f"decoder kind words takes a lexicon only, not {sorted(other)}; drop those keys or use "
                           "kind=beam")
        if lexicon is None:
            raise ZooError("decoder kind words needs a lexicon: the list of words an utterance can be, e.g. "
                           "predict.lexicon=[yes,no], or 'task.module.decoder={kind: words, lexicon: [yes, no]}'")
        ids = {t: i for i, t in enumerate(tokens)}
        self.words = spelled_words(lexicon, tokens)
        targets = [torch.tensor([ids[c] for c in w]) for w in self.words]
        self.targets = torch.nn.utils.rnn.pad_sequence(targets, batch_first=True)
        self.target_lengths = torch.tensor([len(t) for t in targets])

    def __call__(self, emissions: torch.Tensor, lengths: torch.Tensor) -> list[str]:
        """emissions (B, T, V) log-probabilities -> the most likely word of each utterance."""
        return [self.words[i] for i in self.scores(emissions, lengths).argmax(1).tolist()]

    def scores(self, emissions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """emissions (B, T, V) log-probabilities -> (B, words) CTC log-likelihood of each word, all alignments."""
        b, n = emissions.shape[0], len(self.words)
        if b == 0:
            return torch.zeros(0, n)
        frames = emissions.float().cpu().transpose(0, 1).repeat_interleave(n, dim=1)  # (T, B * n, V)
        nll = torch.nn.functional.ctc_loss(frames, self.targets.repeat(b, 1), lengths.cpu().repeat_interleave(n),
                                           self.target_lengths.repeat(b), blank=0, reduction="none")
        return -nll.view(b, n)


def _file_words(path: str) -> list[str]:
    """The words of a flashlight lexicon file: the first column of each line."""
    with open(path, encoding="utf-8") as f:
        return [line.split()[0] for line in f if line.strip()]


class BeamDecoder:
    """torchaudio.models.decoder.ctc_decoder over our character tokens.

    lexicon: a file of `word<TAB>c h a r s |` lines (flashlight format), or a list of words (spelled with the
    vocabulary's characters), restricting output to known words; lm: a KenLM binary/ARPA file (needs the lexicon
    or word units, as flashlight requires). Both optional. lm_text: a text file (or a list of sentences), from which
    the zoo builds a word n-gram LM of order lm_order (speech/ngram.py) and, unless lexicon is given, the lexicon:
    the words of that text (a word outside it cannot be emitted).
    """

    def __init__(self, tokens: Sequence[str], beam_size: int = 20, lexicon: str | Sequence[str] | None = None,
                 lm: str | None = None, lm_weight: float = 0.5, word_score: float = 0.0,
                 lm_text: str | list[str] | None = None, lm_order: int = 3) -> None:
        if lm_text is not None and lm is not None:
            raise ZooError("decoder: give lm (a KenLM/ARPA file) or lm_text (text to build one from), not both")
        with tempfile.TemporaryDirectory() as tmp:
            if lm_text is not None:
                from .ngram import write_lm

                lm, lm_words = write_lm(lm_text if isinstance(lm_text, list) else str(lm_text), int(lm_order), tmp)
                if lexicon is None:  # the LM's words that the vocabulary can spell
                    known = set(tokens[1:]) - {" "}
                    lexicon = [w for w in lm_words if not set(w) - known]
            self._build(tokens, beam_size, lexicon, lm, lm_weight, word_score, tmp)

    def _build(self, tokens: Sequence[str], beam_size: int, lexicon: str | Sequence[str] | None, lm: str | None,
               lm_weight: float, word_score: float, tmp: str) -> None:
        words = None if lexicon is None or isinstance(lexicon, str) else [str(w) for w in lexicon]
        for path, what in ((None if words is not None else lexicon, "lexicon"), (lm, "lm")):
            if path and not os.path.isfile(path):
                raise ZooError(f"decoder {what} file not found: {path}; pass an existing file or null")
        if lm and not lexicon:
            raise ZooError("a KenLM language model needs a lexicon file too; set decoder.lexicon")
        from torchaudio.models.decoder import ctc_decoder

        self.tokens = [SIL if t == " " else t for t in tokens]
        self.tokens[0] = "-"  # blank
        # flashlight reads the lexicon and the LM while it builds the decoder: `tmp` lives until then
        if words is not None:
            lexicon = write_lexicon(words, tokens, os.path.join(tmp, "words.lex"))
        # With a lexicon, the best path can end inside a word ("thre"), and flashlight leaves `words` empty on
        # some complete paths: keep a few paths and take the best whose spelling is lexicon words only.
        self.lexicon_words = set(_file_words(lexicon)) if lexicon else None
        self._decoder = ctc_decoder(lexicon=lexicon, tokens=self.tokens, lm=lm, beam_size=beam_size,
                                    nbest=min(beam_size, 10) if self.lexicon_words is not None else 1,
                                    lm_weight=lm_weight if lm else 0.0, word_score=word_score, blank_token="-",
                                    sil_token=SIL, unk_word="<unk>")

    def __call__(self, emissions: torch.Tensor, lengths: torch.Tensor) -> list[str]:
        """emissions (B, T, V) log-probabilities (float32, CPU)."""
        return [found[0] if found else "" for found in self.nbest(emissions, lengths)]

    def nbest(self, emissions: torch.Tensor, lengths: torch.Tensor) -> list[list[str]]:
        """Each utterance's best transcripts, best first (with a lexicon: those spelled with its words only, when
        any is)."""
        hyps = self._decoder(emissions.float().cpu().contiguous(), lengths.cpu().to(torch.int32))
        out = []
        for nbest in hyps:
            spelled = [self._spell(h.tokens) for h in nbest]
            if self.lexicon_words is not None:
                whole = [t for t in spelled if t and set(t.split()) <= self.lexicon_words]
                spelled = whole or spelled
            out.append(spelled)
        return out

    def _spell(self, ids: torch.Tensor) -> str:
        chars = "".join(self.tokens[i] for i in ids.tolist() if i != 0)
        return " ".join(chars.replace(SIL, " ").split())
