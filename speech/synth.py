"""The offline default corpus: spoken digit and word sequences synthesised with eSpeak NG.

Generated once into a cache folder (wav at the model rate + one JSON-lines manifest per split). The speaker
"voices" are eSpeak variants (m1, f3, klatt2, ...); each split owns its variants, so val/test scores measure
generalisation to voices the model never heard. Rate, pitch, pitch range, gain, silence padding and additive noise
are drawn per utterance.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from zoo.core import owned

log = logging.getLogger(__name__)

DIGITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
WORDS = ["yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go"]
ACCENTS = ["en-us", "en", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-us-nyc"]
TRAIN_VARIANTS = [
    "m1", "m2", "m3", "m4", "m6", "m8", "f1", "f2", "f5", "klatt", "klatt3", "klatt4", "adam", "Alex", "Andy",
    "antonio", "aunty", "boris", "david", "ed", "edward", "Gene", "grandpa", "iven", "john", "linda", "max",
    "michel", "norbert", "paul", "pedro", "quincy", "rob", "robert", "steph", "travis", "victor", "zac",
]
VAL_VARIANTS = ["m5", "f4", "klatt2", "benjamin", "Annie", "Lee"]
TEST_VARIANTS = ["m7", "f3", "klatt6", "caleb", "belinda", "Mario"]


def random_text(rng: np.random.Generator, max_words: int) -> str:
    """Mostly digit strings (as in PINs and phone numbers), sometimes mixed with command words."""
    n = int(rng.integers(1, max_words + 1))
    pool = DIGITS if rng.random() < 0.6 else DIGITS + WORDS
    return " ".join(pool[i] for i in rng.integers(0, len(pool), n))


def _augment(wave: np.ndarray, rng: np.random.Generator, sample_rate: int, snr_db: tuple[float, float]) -> np.ndarray:
    pad = [int(rng.uniform(0.05, 0.3) * sample_rate) for _ in range(2)]
    wave = np.concatenate([np.zeros(pad[0], np.float32), wave, np.zeros(pad[1], np.float32)])
    wave = wave * rng.uniform(0.3, 1.0) / max(1e-4, float(np.abs(wave).max()))
    # White or brown-ish (low-passed) noise at a random SNR relative to the speech power.
    noise = rng.standard_normal(len(wave)).astype(np.float32)
    if rng.random() < 0.5:
        noise = np.cumsum(noise)
        noise = noise - np.convolve(noise, np.ones(64) / 64, mode="same")
    power = float(np.mean(wave**2)) + 1e-10
    snr = rng.uniform(*snr_db)
    noise *= np.sqrt(power / (10 ** (snr / 10)) / (float(np.mean(noise**2)) + 1e-10))
    return np.clip(wave + noise, -1.0, 1.0).astype(np.float32)


def _split_spec(name: str, num: int, variants: list[str], seed: int) -> dict:
    return {"name": name, "num": num, "variants": variants, "seed": seed}


def generate(root: str | Path, sample_rate: int = 16000, num_train: int = 4000, num_val: int = 300,
             num_test: int = 500, max_words: int = 5, snr_db: tuple[float, float] = (10.0, 40.0),
             seed: int = 0, voices: str = "split") -> Path:
    """Build (or reuse) the corpus; returns its folder, holding train/val/test.jsonl manifests.

    voices: "split" (each split its own eSpeak variants, so eSpeak val/test measure unseen voices) or "all" (every
    split draws from all variants: a training corpus for real speech, whose own val/test are not eSpeak voices).

    The folder name hashes every parameter, so changing one builds a new corpus instead of silently reusing an old
    one. Written to a temp folder and renamed, so an interrupted run never leaves a half corpus behind.
    """
    if voices not in ("split", "all"):
        from zoo.errors import ZooError

        raise ZooError(f"eSpeak corpus voices={voices!r}: use split (each split its own voices) or all")
    variants = {"train": TRAIN_VARIANTS, "val": VAL_VARIANTS, "test": TEST_VARIANTS}
    if voices == "all":
        variants = dict.fromkeys(variants, TRAIN_VARIANTS + VAL_VARIANTS + TEST_VARIANTS)
    spec = {"v": 1, "sr": sample_rate, "max_words": max_words, "snr": list(snr_db),
            "splits": [_split_spec("train", num_train, variants["train"], seed),
                       _split_spec("val", num_val, variants["val"], seed + 1),
                       _split_spec("test", num_test, variants["test"], seed + 2)]}
    key = hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:10]
    out = Path(os.path.expanduser(str(root))) / f"synth-{key}"
    if (out / "done").exists():
        return out
    from zoo.speech.espeak import ESpeak

    engine = ESpeak.get()
    tmp = owned.temp_dir(out.parent, prefix=f".{out.name}.")
    log.info("synthesising the eSpeak NG corpus into %s (once)", out)
    try:
        for split in spec["splits"]:
            _synth_split(engine, tmp, split, sample_rate, max_words, snr_db)
        (tmp / "spec.json").write_text(json.dumps(spec, indent=1))
        (tmp / "done").touch()
        tmp.rename(out)
    except BaseException:  # stopped, or another process finished first (its copy is used): no half corpus left
        owned.remove(tmp)
        if not (out / "done").exists():
            raise
    return out


def _synth_split(engine: Any, tmp: Path, split: dict, sample_rate: int, max_words: int, snr_db: Any) -> None:
    from math import gcd

    from scipy.signal import resample_poly  # 8x faster than torchaudio's conv1d resampler for 22.05 -> 16 kHz

    rng = np.random.default_rng(split["seed"])
    (tmp / split["name"]).mkdir(parents=True)
    with open(tmp / f"{split['name']}.jsonl", "w") as f:
        for i in range(split["num"]):
            text = random_text(rng, max_words)
            variant = split["variants"][i % len(split["variants"])]
            voice = f"{ACCENTS[int(rng.integers(len(ACCENTS)))]}+{variant}"
            wave = engine.synth(text, voice, rate=int(rng.integers(120, 231)), pitch=int(rng.integers(20, 81)),
                                pitch_range=int(rng.integers(20, 81)))
            g = gcd(engine.sample_rate, sample_rate)
            wave = resample_poly(wave, sample_rate // g, engine.sample_rate // g).astype(np.float32)
            wave = _augment(wave, rng, sample_rate, snr_db)
            path = tmp / split["name"] / f"{i:05d}.wav"
            sf.write(path, wave, sample_rate, subtype="PCM_16")
            row = {"audio_filepath": f"{split['name']}/{i:05d}.wav", "duration": round(len(wave) / sample_rate, 3),
                   "text": text, "voice": voice}
            f.write(json.dumps(row) + "\n")


def mix_corpus(source: str | bool | dict, sample_rate: int) -> Path:
    """The corpus `task.data.mix_synth` names: true or "espeak" (the default corpus at this rate), a dict of
    `generate` options (e.g. {num_train: 16000, max_words: 1, voices: all}: built once, cached like the default), or
    a folder."""
    if source is True or source == "espeak":
        return generate("~/.cache/zoo/speech", sample_rate)
    if isinstance(source, dict):
        import inspect

        known = set(inspect.signature(generate).parameters) - {"sample_rate"}
        if set(source) - known:
            from zoo.errors import ZooError

            raise ZooError(f"task.data.mix_synth: unknown option(s) {', '.join(sorted(set(source) - known))}; "
                           f"use {', '.join(sorted(known))}")
        opts = {"root": "~/.cache/zoo/speech", "num_val": 0, "num_test": 0, **source}
        return generate(sample_rate=sample_rate, **opts)
    return Path(os.path.expanduser(str(source)))


def mix_rows(source: str | bool | dict, real: list, sample_rate: int, ratio: float | None = None,
             max_duration: float | None = None, seed: int = 0) -> list:
    """Training utterances of an eSpeak corpus to add to real ones (`task.data.mix_synth`): many synthetic voices
    beside a few human ones. Only utterances whose words all occur in the real training transcripts, so the mix
    teaches no word the task never asks for; `ratio` synthetic per real utterance (None: all that fit)."""
    from zoo.errors import ZooError

    from .manifest import read_manifest
    from .vocab import normalize_text

    folder = mix_corpus(source, sample_rate)
    if not (folder / "train.jsonl").is_file():
        raise ZooError(f"task.data.mix_synth: {folder} has no train.jsonl; pass true (the zoo's eSpeak corpus) or "
                       "a corpus folder made by speech/synth.py")
    words = {w for u in real for w in normalize_text(u.text).split()}
    rows = [u for u in read_manifest(str(folder / "train.jsonl"), max_duration)
            if set(normalize_text(u.text).split()) <= words]
    if ratio is not None:
        n = min(len(rows), int(round(float(ratio) * len(real))))
        rows = [rows[i] for i in sorted(np.random.default_rng(seed).choice(len(rows), n, replace=False))]
    log.info("task.data.mix_synth: + %d eSpeak utterances from %s (words of the real transcripts only)",
             len(rows), folder)
    if not rows:
        log.warning("task.data.mix_synth: no utterance of %s uses only the words of the training transcripts", folder)
    return rows
