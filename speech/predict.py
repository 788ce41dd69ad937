"""`zoo predict` for speech/ctc: transcribe a wav/flac file, every audio file in a folder, or every usable line of a
JSON-lines manifest (its bad lines skipped with one warning that counts them), one JSON line each.

Options (cfg.predict): batch_size (8), decoder (greedy|beam|words, default: the checkpoint's), beam_size, lexicon
(words: the checkpoint's when not given), lm, lm_text + lm_order (a word n-gram LM built from a text file), lm_weight,
word_score, max_seconds (default: the checkpoint's), rescore (false: without the checkpoint's joint rescoring; a
mapping: these options, speech/rescore.py). In a folder, a bad file
yields {"file", "error"} and the rest continue; a single bad file is a ZooError.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from zoo.errors import ZooError, one_line

from .audio import load_audio
from .decoding import KINDS

# The predict.* keys this task reads (every other predict.* key is refused, not dropped).
PREDICT_KEYS = ("batch_size", "decoder", "beam_size", "lexicon", "lm", "lm_text", "lm_order", "lm_weight", "word_score",
                "max_seconds", "rescore")

AUDIO_EXT = (".wav", ".flac", ".ogg", ".mp3")
DECODER_KEYS = ("beam_size", "lexicon", "lm", "lm_text", "lm_order", "lm_weight", "word_score")


def _files(input: str) -> list[str]:
    if input.endswith((".jsonl", ".json")) and os.path.isfile(input):  # a manifest: its usable lines' audio
        from .manifest import read_manifest

        return [r.path for r in read_manifest(input)]
    if os.path.isdir(input):
        files = sorted(os.path.join(input, f) for f in os.listdir(input) if f.lower().endswith(AUDIO_EXT))
        if not files:
            raise ZooError(f"no audio files ({', '.join(AUDIO_EXT)}) in {input}")
        return files
    if not os.path.isfile(input):
        raise ZooError(f"input not found: {input}; pass a wav file, a folder of them or a JSON-lines manifest")
    return [input]


def predict(model, cfg, input: str | None) -> Iterator[dict]:
    if not input:
        raise ZooError("speech predict needs input=<audio file or folder>")
    opts = dict(cfg.get("predict") or {})
    if any(k in opts for k in ("decoder", *DECODER_KEYS)):
        kind = opts.pop("decoder", "beam")
        if kind not in KINDS:
            raise ZooError(f"predict.decoder={kind}: use greedy, beam or words")
        given = {k: opts.pop(k) for k in DECODER_KEYS if k in opts}
        if kind == "words" and "lexicon" not in given and model.decoder_cfg.get("lexicon"):
            given["lexicon"] = model.decoder_cfg["lexicon"]  # the closed word list the checkpoint decodes with
        model.decoder_cfg = {"kind": kind, **given}
        model._decoder = None
    if "rescore" in opts:
        from .rescore import check

        model.rescore_cfg, model._rescorer = check(opts.pop("rescore")), None
    if "max_seconds" in opts:
        model.hparams.max_seconds = float(opts["max_seconds"])
        if model.max_seconds() < model.hparams.max_seconds:
            raise ZooError(f"predict.max_seconds={opts['max_seconds']}: this model takes at most "
                           f"{model.max_seconds():g} s (its encoder's window); split longer files")
    path = os.path.expanduser(str(input))
    files = _files(path)
    single = os.path.isfile(path) and not path.endswith((".jsonl", ".json"))  # one audio file: its error stops
    batch_size = int(opts.get("batch_size", 8))
    rate = model.hparams.sample_rate
    for start in range(0, len(files), batch_size):
        waves, names = [], []
        for f in files[start:start + batch_size]:
            try:
                wave = load_audio(f, rate)
                if (why := model.too_long(len(wave) / rate)) is not None:
                    raise ZooError(f"{f}: {why}")
            except ZooError as e:
                if single:
                    raise
                yield {"file": f, "error": one_line(e)}
                continue
            waves.append(wave)
            names.append(f)
        if waves:
            for f, w, text in zip(names, waves, model.transcribe(waves)):
                yield {"file": f, "duration": round(len(w) / rate, 3), "text": text}
