"""Joint rescoring (`task.module.rescore`): the CTC model's n-best and Whisper tiny.en's own transcript, each
scored by both models, the best kept:

    score(text) = ctc_weight * log P_ctc(text | audio) + log P_tiny.en(text | audio) + word_bonus * words(text)

P_ctc sums every alignment of the text (the forward algorithm, what CTC training maximised); P_tiny.en is tiny.en's
decoder on the clip padded to 30 s (speech/whisper_full.py), the text written as the CTC model writes it (lower
case, no punctuation; numbers as words). The two models err differently: the CTC model was trained on the user's
speakers and sentences, tiny.en on 680,000 hours of other speech, so either one's transcript can win where the
other is wrong (docs/speech.md, "Joint rescoring"). Run at test and predict time; validation keeps the beam
decoder alone (tiny.en's decoder costs about a second a clip on one CPU thread).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F

from zoo.errors import ZooError

from .text import normalize_for_scoring

_TAGS = re.compile(r"\[[^\]]*\]|\([^)]*\)")  # tiny.en's sound annotations: [BLANK_AUDIO], (music), [Laughter]
# No weights path: a checkpoint records these options, and reading one never opens a file it names (tiny.en is
# the installed package's).
KEYS = {"ctc_weight": float, "word_bonus": float, "whisper_hypothesis": bool}


def check(options: dict | None) -> dict | None:
    """The `task.module.rescore` mapping with its types checked (None: no rescoring), one line when wrong."""
    if options is None or options is False:
        return None
    if not isinstance(options, Mapping):  # a dict, or OmegaConf's DictConfig from the command line
        raise ZooError(f"task.module.rescore={options!r}: give a mapping ({', '.join(KEYS)}) or null")
    options = dict(options)
    unknown = sorted(set(options) - set(KEYS))
    if unknown:
        raise ZooError(f"task.module.rescore: unknown keys {unknown}; the keys are {', '.join(KEYS)}")
    out = {"ctc_weight": 0.5, "word_bonus": 0.0, "whisper_hypothesis": True, **options}
    for key, kind in KEYS.items():
        value = out[key]
        if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ZooError(f"task.module.rescore.{key}={value!r}: give a number")
        if kind is bool and not isinstance(value, bool):
            raise ZooError(f"task.module.rescore.{key}={value!r}: give true or false")
    if out["ctc_weight"] < 0:
        raise ZooError(f"task.module.rescore.ctc_weight={out['ctc_weight']}: give 0 or more")
    return out


def heard_text(text: str) -> str:
    """tiny.en's transcript as a candidate: its sound annotations dropped (a clip of noise is "[BLANK_AUDIO]", not
    the words "blank audio"), then written as the CTC model writes (the scoring rule)."""
    return normalize_for_scoring(_TAGS.sub(" ", text))


def pick(ctc: Sequence[float], whisper: Sequence[float], words: Sequence[int], ctc_weight: float,
         word_bonus: float) -> int:
    """The index of the candidate with the best joint score (the first one on a tie)."""
    scores = [(ctc_weight * c if ctc_weight else 0.0) + w + word_bonus * n  # 0 * -inf would be nan
              for c, w, n in zip(ctc, whisper, words, strict=True)]
    return max(range(len(scores)), key=scores.__getitem__)


def ctc_log_likelihood(log_probs: torch.Tensor, texts: Sequence[str], tokens: Sequence[str]) -> list[float]:
    """log P(text | audio) under CTC for each text, given one clip's log-probs (T, V); -inf for a text the
    vocabulary cannot spell or the frames cannot hold. The empty text has one alignment: blank at every frame."""
    index = {t: i for i, t in enumerate(tokens)}
    out = [float(log_probs[:, 0].float().sum()) if not t else float("-inf") for t in texts]
    spelled = [(i, [index[c] for c in t]) for i, t in enumerate(texts) if t and all(c in index for c in t)]
    if not spelled:
        return out
    targets = torch.nn.utils.rnn.pad_sequence([torch.tensor(ids) for _, ids in spelled], batch_first=True)
    frames = log_probs.float().cpu()[:, None].expand(-1, len(spelled), -1)
    nll = F.ctc_loss(frames, targets, torch.full((len(spelled),), log_probs.shape[0]),
                     torch.tensor([len(ids) for _, ids in spelled]), blank=0, reduction="none")
    for (i, _), value in zip(spelled, nll.tolist(), strict=True):
        out[i] = -value
    return out


class JointRescorer:
    def __init__(self, tokens: Sequence[str], ctc_weight: float = 0.5, word_bonus: float = 0.0,
                 whisper_hypothesis: bool = True) -> None:
        from .whisper_full import WhisperTiny

        self.tokens = list(tokens)
        self.ctc_weight, self.word_bonus, self.whisper_hypothesis = ctc_weight, word_bonus, whisper_hypothesis
        self.whisper = WhisperTiny()

    def __call__(self, waves: Sequence[torch.Tensor], log_probs: torch.Tensor, lengths: torch.Tensor,
                 nbest: Sequence[Sequence[str]]) -> list[str]:
        """16 kHz clips (T,), the CTC model's log-probs (B, T', V) and lengths, and each clip's candidates (the CTC
        decoder's n-best) -> transcripts."""
        return [s["candidates"][pick(s["ctc"], s["whisper"], s["words"], self.ctc_weight, self.word_bonus)]
                if s["candidates"] else "" for s in self.scores(waves, log_probs, lengths, nbest)]

    def scores(self, waves: Sequence[torch.Tensor], log_probs: torch.Tensor, lengths: torch.Tensor,
               nbest: Sequence[Sequence[str]]) -> list[dict]:
        """Each clip's candidates (its n-best, then tiny.en's own transcript) and both models' log-likelihoods of
        them: what `pick` weighs (a benchmark weighs them again for each setting without running a model)."""
        enc = self.whisper.encode(list(waves))
        own = self.whisper.transcribe(enc) if self.whisper_hypothesis else [""] * len(waves)
        out = []
        for i, cands in enumerate(nbest):
            heard = heard_text(own[i])
            whisper_only = bool(heard) and heard not in cands
            # the empty transcript stays where the CTC decoder proposes it: silence, where tiny.en hallucinates
            cands = list(dict.fromkeys([*cands, *([heard] if heard else [])]))
            # whisper_only: the last candidate is tiny.en's, none of the n-best
            found = {"candidates": cands, "ctc": [], "whisper": [], "words": [len(c.split()) for c in cands],
                     "whisper_only": whisper_only}
            if cands:
                found["ctc"] = ctc_log_likelihood(log_probs[i, : int(lengths[i])], cands, self.tokens)
                found["whisper"] = self.whisper.score(enc[i:i + 1], [" " + c if c else "" for c in cands])
            out.append(found)
        return out
