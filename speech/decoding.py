"""CTC decoding: greedy best path (pure, tested on hand-made emissions) and beam search with torchaudio's
flashlight-text decoder, optionally constrained by a lexicon and scored by a KenLM language model."""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from zoo.errors import ZooError

SIL = "|"  # flashlight's word separator; our vocabulary writes it as " "


def greedy_ids(emissions: torch.Tensor, lengths: torch.Tensor) -> list[list[int]]:
    """emissions (B, T, V) scores, lengths (B,) -> best-path ids per utterance, repeats merged then blanks (0)
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


class BeamDecoder:
    """torchaudio.models.decoder.ctc_decoder over our character tokens.

    lexicon: a file of `word<TAB>c h a r s |` lines (flashlight format) restricting output to known words;
    lm: a KenLM binary/ARPA file (needs the lexicon or word units, as flashlight requires). Both optional.
    """

    def __init__(self, tokens: Sequence[str], beam_size: int = 20, lexicon: str | None = None, lm: str | None = None,
                 lm_weight: float = 0.5, word_score: float = 0.0) -> None:
        for path, what in ((lexicon, "lexicon"), (lm, "lm")):
            if path and not os.path.isfile(path):
                raise ZooError(f"decoder {what} file not found: {path}; pass an existing file or null")
        if lm and not lexicon:
            raise ZooError("a KenLM language model needs a lexicon file too; set decoder.lexicon")
        from torchaudio.models.decoder import ctc_decoder

        self.tokens = [SIL if t == " " else t for t in tokens]
        self.tokens[0] = "-"  # blank
        self._decoder = ctc_decoder(lexicon=lexicon, tokens=self.tokens, lm=lm, beam_size=beam_size,
                                    lm_weight=lm_weight if lm else 0.0, word_score=word_score, blank_token="-",
                                    sil_token=SIL, unk_word="<unk>")

    def __call__(self, emissions: torch.Tensor, lengths: torch.Tensor) -> list[str]:
        """emissions (B, T, V) log-probabilities (float32, CPU)."""
        hyps = self._decoder(emissions.float().cpu().contiguous(), lengths.cpu().to(torch.int32))
        out = []
        for nbest in hyps:
            if not nbest:
                out.append("")
                continue
            if nbest[0].words:
                out.append(" ".join(nbest[0].words))
            else:
                chars = "".join(self.tokens[i] for i in nbest[0].tokens.tolist() if i != 0)
                out.append(" ".join(chars.replace(SIL, " ").split()))
        return out
