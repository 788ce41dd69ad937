"""Speaker- and room-changing augmentations, drawn on the fly during training and identity in eval mode.

Two places, because each acts where it is cheap and exact:
- `WaveAugment` (in the training Dataset, per utterance, on the CPU): spectral tilt, a synthetic room impulse
  response and additive noise at a random SNR, in that order (a voice, then the room, then the microphone).
- `VoiceAugment` (inside the front end, on the linear power spectrogram, before the Mel filterbank): vocal-tract
  length perturbation and a formant-preserving pitch shift, per utterance of the batch.

Randomness comes from torch's global generator, which `seed_everything(workers=True)` seeds per run and per
DataLoader worker, so a run is repeatable. A static spectral tilt applied to the features alone would be a
constant per Mel bin, which the per-utterance normalisation removes; on the waveform, before noise and
reverberation, it changes how the voice stands out of them, so that is where it goes.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def _uniform(lo: float, hi: float, n: int | None = None) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(() if n is None else (n,))


def _chance(p: float) -> bool:
    return p > 0 and float(torch.rand(())) < p


# -- waveform level --------------------------------------------------------------------------------------------
def add_noise(wave: torch.Tensor, snr_db: float, colour: str = "white") -> torch.Tensor:
    """wave (T,) + Gaussian noise scaled so that mean speech power / mean noise power = snr_db.

    colour: white, or pink (power falling as 1/f, shaped in the FFT domain: more like room and fan noise).
    """
    noise = torch.randn_like(wave)
    if colour == "pink":
        spec = torch.fft.rfft(noise)
        f = torch.arange(spec.shape[-1], dtype=wave.dtype).clamp(min=1.0)
        noise = torch.fft.irfft(spec / f.sqrt(), n=wave.shape[-1])
    elif colour != "white":
        raise ValueError(f"unknown noise colour {colour!r}; use white or pink")
    power = wave.pow(2).mean().clamp(min=1e-10)
    noise = noise * (power / 10 ** (snr_db / 10) / noise.pow(2).mean().clamp(min=1e-12)).sqrt()
    return wave + noise


def synthetic_rir(sample_rate: int, rt60: float, direct_to_reverb_db: float = 0.0) -> torch.Tensor:
    """A room impulse response: a unit direct path, then Gaussian reflections whose energy falls 60 dB in `rt60`
    seconds (Polack's statistical model). Length rt60; the reverberant tail's energy is `direct_to_reverb_db`
    below the direct path's."""
    n = max(2, int(rt60 * sample_rate))
    t = torch.arange(n, dtype=torch.float32) / sample_rate
    tail = torch.randn(n) * torch.exp(-3 * math.log(10) * t / rt60)  # amplitude: -60 dB of power at rt60
    tail[0] = 0.0
    tail = tail * (10 ** (-direct_to_reverb_db / 10) / tail.pow(2).sum().clamp(min=1e-12)).sqrt()
    tail[0] = 1.0
    return tail


def reverberate(wave: torch.Tensor, rir: torch.Tensor) -> torch.Tensor:
    """wave (T,) convolved with rir, cut to T samples (durations, and so batching, unchanged), peak kept."""
    import torchaudio.functional as AF

    out = AF.fftconvolve(wave, rir)[: wave.shape[-1]]
    return out * (wave.abs().max() / out.abs().max().clamp(min=1e-8))


def spectral_tilt(wave: torch.Tensor, sample_rate: int, db_per_octave: float, ref_hz: float = 1000.0,
                  floor_hz: float = 100.0) -> torch.Tensor:
    """A linear-phase filter whose gain rises `db_per_octave` per octave around `ref_hz` (flat below floor_hz);
    the output is rescaled to the input's power, so only the balance between low and high bands changes."""
    spec = torch.fft.rfft(wave)
    f = torch.fft.rfftfreq(wave.shape[-1], 1 / sample_rate).clamp(min=floor_hz)
    gain_db = db_per_octave * torch.log2(f / ref_hz)
    out = torch.fft.irfft(spec * 10 ** (gain_db / 20), n=wave.shape[-1])
    return out * (wave.pow(2).mean() / out.pow(2).mean().clamp(min=1e-12)).sqrt()


class WaveAugment(nn.Module):
    """Per utterance in training: tilt (prob, ±dB/octave), room (prob, rt60 range, direct-to-reverb range), noise
    (prob, SNR range in dB, white or pink). Identity in eval mode. Every option is a plain value for the YAML."""

    def __init__(self, sample_rate: int, tilt_prob: float = 0.0, tilt_db_per_octave: float = 3.0,
                 rir_prob: float = 0.0, rt60: tuple[float, float] = (0.1, 0.5),
                 direct_to_reverb_db: tuple[float, float] = (0.0, 10.0), noise_prob: float = 0.0,
                 snr_db: tuple[float, float] = (5.0, 30.0), pink_noise_prob: float = 0.5) -> None:
        super().__init__()
        self.sample_rate = int(sample_rate)
        self.tilt_prob, self.tilt = float(tilt_prob), float(tilt_db_per_octave)
        self.rir_prob, self.rt60, self.drr = float(rir_prob), tuple(rt60), tuple(direct_to_reverb_db)
        self.noise_prob, self.snr_db, self.pink = float(noise_prob), tuple(snr_db), float(pink_noise_prob)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        if not self.training or wave.numel() < 2:
            return wave
        if _chance(self.tilt_prob):
            wave = spectral_tilt(wave, self.sample_rate, float(_uniform(-self.tilt, self.tilt)))
        if _chance(self.rir_prob):
            rir = synthetic_rir(self.sample_rate, float(_uniform(*self.rt60)), float(_uniform(*self.drr)))
            wave = reverberate(wave, rir)
        if _chance(self.noise_prob):
            wave = add_noise(wave, float(_uniform(*self.snr_db)), "pink" if _chance(self.pink) else "white")
        return wave.clamp(-1.0, 1.0)


# -- spectrogram level -----------------------------------------------------------------------------------------
def _resample_freq(x: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """x (B, F, T); src (B, F) fractional source bin of each output bin -> x read there by linear interpolation
    (positions outside [0, F-1] read the edge bin)."""
    n = x.shape[1]
    src = src.clamp(0, n - 1)
    lo = src.floor().long().clamp(max=n - 2)
    w = (src - lo).unsqueeze(-1)
    idx = lo.unsqueeze(-1).expand(-1, -1, x.shape[-1])
    return x.gather(1, idx) * (1 - w) + x.gather(1, idx + 1) * w


def vtlp_warp(spec: torch.Tensor, alpha: torch.Tensor, boundary: float = 0.8) -> torch.Tensor:
    """Vocal-tract-length perturbation (Jaitly & Hinton 2013): spec (B, F, T) power over linear frequency bins
    0..Nyquist; alpha (B,). A component at frequency f moves to alpha * f below a boundary, and a second line
    maps the rest onto the band so Nyquist stays Nyquist (Kaldi's piecewise-linear VTLN warp)."""
    n = spec.shape[1]
    top = float(n - 1)
    alpha = alpha.to(spec).view(-1, 1)
    knee = boundary * top * torch.minimum(alpha, 1 / alpha) / alpha  # source bin where the first line ends
    out_bins = torch.arange(n, dtype=spec.dtype, device=spec.device).view(1, -1)
    below = out_bins / alpha
    above = knee + (out_bins - alpha * knee) * (top - knee) / (top - alpha * knee)
    return _resample_freq(spec, torch.where(out_bins < alpha * knee, below, above))


def pitch_shift_spec(spec: torch.Tensor, ratio: torch.Tensor, lifter: int) -> torch.Tensor:
    """Formant-preserving pitch shift of spec (B, F, T), power over linear bins: the cepstrum splits the log
    spectrum into its envelope (quefrencies below `lifter` samples: the vocal tract) and its fine structure (the
    harmonics); only the fine structure is stretched by ratio (B,) along frequency."""
    log_spec = torch.log(spec.clamp(min=1e-10))
    n_fft = 2 * (spec.shape[1] - 1)
    ceps = torch.fft.irfft(log_spec, n=n_fft, dim=1)
    keep = torch.zeros(n_fft, 1, dtype=spec.dtype, device=spec.device)
    keep[:lifter], keep[n_fft - lifter + 1:] = 1.0, 1.0
    envelope = torch.fft.rfft(ceps * keep, dim=1).real
    bins = torch.arange(spec.shape[1], dtype=spec.dtype, device=spec.device).view(1, -1)
    fine = _resample_freq(log_spec - envelope, bins / ratio.to(spec).view(-1, 1))
    return torch.exp(envelope + fine)


class VoiceAugment(nn.Module):
    """In training, per utterance: VTLP with alpha in [1 - vtlp, 1 + vtlp] (prob vtlp_prob) and a pitch shift of up
    to ±pitch_semitones (prob pitch_prob). Identity in eval mode, so exported graphs and `zoo predict` never see it.

    lifter_ms: the cepstral cut between vocal tract and pitch (2.5 ms: voices up to 400 Hz keep their envelope)."""

    def __init__(self, sample_rate: int, vtlp: float = 0.0, vtlp_prob: float = 1.0, pitch_semitones: float = 0.0,
                 pitch_prob: float = 1.0, lifter_ms: float = 2.5) -> None:
        super().__init__()
        self.vtlp, self.vtlp_prob = float(vtlp), float(vtlp_prob)
        self.pitch, self.pitch_prob = float(pitch_semitones), float(pitch_prob)
        self.lifter = max(2, int(sample_rate * lifter_ms / 1000))

    def _draw(self, b: int, spread: float, prob: float, exp: bool) -> torch.Tensor:
        value = _uniform(-spread, spread, b)
        value = torch.where(torch.rand(b) < prob, value, torch.zeros(b))
        return 2 ** (value / 12) if exp else 1 + value

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return spec
        b = spec.shape[0]
        if self.pitch > 0 and self.pitch_prob > 0:
            spec = pitch_shift_spec(spec, self._draw(b, self.pitch, self.pitch_prob, exp=True), self.lifter)
        if self.vtlp > 0 and self.vtlp_prob > 0:
            spec = vtlp_warp(spec, self._draw(b, self.vtlp, self.vtlp_prob, exp=False))
        return spec

