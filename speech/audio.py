"""Audio files in, float32 mono waveforms at the model rate out (soundfile; torchaudio.load needs torchcodec)."""

from __future__ import annotations

import functools

import numpy as np
import soundfile as sf
import torch
import torchaudio

from zoo.errors import ZooError


@functools.lru_cache(maxsize=16)
def resampler(orig: int, new: int) -> torchaudio.transforms.Resample:
    """Cached: building the polyphase kernel costs ~0.2 s (22.05 -> 16 kHz), applying it ~1 ms."""
    return torchaudio.transforms.Resample(orig, new)


def load_audio(path: str, sample_rate: int) -> torch.Tensor:
    """(T,) float32 in [-1, 1]; stereo is averaged, other rates are resampled (never refused)."""
    try:
        wave, sr = sf.read(path, dtype="float32", always_2d=True)
    except Exception as e:  # soundfile raises LibsndfileError / RuntimeError / OSError
        raise ZooError(f"cannot read audio {path}: {e}; use a wav/flac/ogg file soundfile can open") from e
    if wave.shape[0] == 0:
        raise ZooError(f"audio file {path} is empty (0 samples); remove it or re-export it")
    if not np.isfinite(wave).all():  # a float file holding NaN or inf: every weight it trains would go NaN
        raise ZooError(f"audio file {path} holds NaN or inf samples; re-export it (the samples must be finite)")
    mono = torch.from_numpy(np.ascontiguousarray(wave.mean(axis=1)))
    if sr != sample_rate:
        mono = resampler(sr, sample_rate)(mono)
    return mono


def probe(path: str) -> tuple[float | None, str | None]:
    """(duration in seconds, None) for a readable non-empty file, else (None, reason). Reads only the header, and
    the samples of a float file (for NaN or inf)."""
    try:
        info = sf.info(path)
    except Exception as e:
        return None, f"unreadable ({type(e).__name__})"
    if info.frames <= 0:
        return None, "empty"
    if info.subtype in FLOAT_SUBTYPES and not _finite(path):
        return None, "NaN or inf samples"
    return info.frames / info.samplerate, None


FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")  # integer PCM cannot hold NaN or inf, so only float files are read through


def _finite(path: str, block: int = 1 << 16) -> bool:
    """Whether every sample of a float audio file is finite, read in blocks (a long file is never held whole)."""
    try:
        for part in sf.blocks(path, blocksize=block, dtype="float32", always_2d=True):
            if not np.isfinite(part).all():
                return False
    except Exception:
        return False
    return True


def probe_usable(path: str, max_duration: float | None) -> tuple[float | None, str | None]:
    """probe(), and a file longer than `max_duration` seconds refused with its reason, as any unusable file is."""
    duration, reason = probe(path)
    if reason is None and max_duration and duration > max_duration:
        reason = f"longer than max_duration={max_duration}s"
    return duration, reason
