"""speech/augment.py: each augmentation changes the signal as intended, and each is identity in eval mode."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.speech.augment import (
    VoiceAugment,
    WaveAugment,
    add_noise,
    pitch_shift_spec,
    reverberate,
    spectral_tilt,
    synthetic_rir,
    vtlp_warp,
)
from zoo.speech.features import LogMel

RATE = 8000


def _power_spec(wave: torch.Tensor) -> torch.Tensor:
    """(1, F, T) power over linear bins 0..4 kHz, the front end's own STFT (n_fft 256: 31.25 Hz per bin)."""
    return LogMel(RATE, 40).mel.spectrogram(wave[None])


def _peak_hz(spec: torch.Tensor, lo: float = 0.0, hi: float = 4000.0) -> float:
    hz = torch.linspace(0, RATE / 2, spec.shape[1])
    band = (hz >= lo) & (hz <= hi)
    mean = spec[0].mean(-1)
    return float(hz[band][mean[band].argmax()])


def _tone(freq: float, seconds: float = 0.5) -> torch.Tensor:
    t = torch.arange(int(RATE * seconds)) / RATE
    return 0.5 * torch.sin(2 * math.pi * freq * t)


def _vowel(f0: float, formant: float = 1000.0, seconds: float = 0.5) -> torch.Tensor:
    """Harmonics of f0 under a Gaussian envelope centred on `formant` (a crude one-formant vowel)."""
    t = torch.arange(int(RATE * seconds)) / RATE
    wave = torch.zeros_like(t)
    for k in range(1, int(3800 / f0)):
        wave += math.exp(-(((k * f0 - formant) / 800) ** 2)) * torch.sin(2 * math.pi * k * f0 * t)
    return 0.3 * wave / wave.abs().max()


@pytest.mark.parametrize("alpha", [0.9, 1.1])
def test_vtlp_moves_energy_by_the_warp_factor(alpha):
    spec = _power_spec(_tone(1000.0))
    warped = vtlp_warp(spec, torch.tensor([alpha]))
    assert warped.shape == spec.shape
    assert _peak_hz(spec) == pytest.approx(1000.0, abs=20)
    assert _peak_hz(warped) == pytest.approx(1000.0 * alpha, abs=35)  # one bin is 31 Hz
    # Nyquist stays Nyquist: the band is neither cut nor left empty at the top
    assert torch.equal(vtlp_warp(spec, torch.tensor([1.0])), spec)


def test_pitch_shift_moves_harmonics_and_keeps_the_formant():
    spec = _power_spec(_vowel(f0=200.0))
    shifted = pitch_shift_spec(spec, torch.tensor([1.25]), lifter=20)
    assert _peak_hz(spec, 120, 330) == pytest.approx(200.0, abs=20)
    assert _peak_hz(shifted, 120, 330) == pytest.approx(250.0, abs=20)  # the first harmonic moved up by 1.25

    def envelope_peak(s: torch.Tensor) -> float:  # smoothed over 300 Hz: the formant, not the harmonics
        smooth = torch.nn.functional.avg_pool1d(s[0].mean(-1)[None, None], 11, 1, 5)[0]
        return _peak_hz(smooth[..., None])

    assert envelope_peak(shifted) == pytest.approx(envelope_peak(spec), abs=150)  # the vocal tract stayed


@pytest.mark.parametrize("snr", [0.0, 10.0, 25.0])
def test_noise_is_added_at_the_requested_snr(snr):
    torch.manual_seed(0)
    clean = _tone(440.0, 1.0)
    for colour in ("white", "pink"):
        noisy = add_noise(clean, snr, colour)
        measured = 10 * math.log10(clean.pow(2).mean() / (noisy - clean).pow(2).mean())
        assert measured == pytest.approx(snr, abs=0.01)


def test_rir_lengthens_the_energy_decay_by_its_rt60():
    torch.manual_seed(0)
    burst = torch.zeros(RATE)
    burst[: RATE // 4] = torch.randn(RATE // 4) * 0.3
    wet = reverberate(burst, synthetic_rir(RATE, rt60=0.4, direct_to_reverb_db=0.0))

    def db(x: torch.Tensor) -> float:
        return 10 * math.log10(float(x.pow(2).mean()) + 1e-20)

    end, w = RATE // 4, RATE // 10  # 100 ms windows after the burst
    assert burst[end:].abs().max() == 0
    after_1, after_2 = db(wet[end + w // 4: end + w // 4 + w]), db(wet[end + w // 4 + w: end + w // 4 + 2 * w])
    assert db(wet[:end]) - after_1 < 30  # a tail where the dry signal is silent
    assert after_1 - after_2 == pytest.approx(60 * 0.1 / 0.4, abs=4)  # 15 dB per 100 ms: rt60 = 0.4 s
    assert wet.shape == burst.shape and float(wet.abs().max()) == pytest.approx(float(burst.abs().max()))


def test_spectral_tilt_changes_the_balance_of_high_and_low_bands():
    torch.manual_seed(0)
    noise = torch.randn(RATE) * 0.1
    tilted = spectral_tilt(noise, RATE, 6.0)

    def band_db(x: torch.Tensor, lo: float, hi: float) -> float:
        p = torch.fft.rfft(x).abs().pow(2)
        f = torch.fft.rfftfreq(len(x), 1 / RATE)
        return 10 * math.log10(float(p[(f >= lo) & (f < hi)].mean()))

    before = band_db(noise, 2000, 3000) - band_db(noise, 250, 375)
    after = band_db(tilted, 2000, 3000) - band_db(tilted, 250, 375)
    assert after - before == pytest.approx(6.0 * math.log2(2500 / 312.5), abs=1.5)  # 3 octaves: ~18 dB
    assert float(tilted.pow(2).mean()) == pytest.approx(float(noise.pow(2).mean()), rel=1e-4)


def test_every_augmentation_is_identity_in_eval_and_random_in_training():
    torch.manual_seed(0)
    wave = _vowel(150.0)
    wave_aug = WaveAugment(RATE, tilt_prob=1.0, rir_prob=1.0, noise_prob=1.0)
    voice = VoiceAugment(RATE, vtlp=0.1, pitch_semitones=2.0)
    spec = _power_spec(wave).repeat(3, 1, 1)
    wave_aug.eval(), voice.eval()
    assert torch.equal(wave_aug(wave), wave) and torch.equal(voice(spec), spec)
    wave_aug.train(), voice.train()
    out = wave_aug(wave)
    assert out.shape == wave.shape and not torch.allclose(out, wave) and out.abs().max() <= 1.0
    warped = voice(spec)
    assert warped.shape == spec.shape and not torch.allclose(warped[0], warped[1])  # drawn per utterance
    torch.manual_seed(1)
    a = wave_aug(wave)
    torch.manual_seed(1)
    assert torch.equal(a, wave_aug(wave))  # seeded: the run's seed makes it repeatable


def test_front_end_applies_voice_augment_in_training_only():
    fe = LogMel(RATE, 40, voice={"vtlp": 0.1, "pitch_semitones": 2.0})
    wave = _vowel(150.0)[None]
    lengths = torch.tensor([wave.shape[1]])
    fe.eval()
    ref = LogMel(RATE, 40).eval()(wave, lengths)[0]
    assert torch.equal(fe(wave, lengths)[0], ref)
    fe.train()
    torch.manual_seed(0)
    assert not torch.allclose(fe(wave, lengths)[0], ref)
    assert set(fe.state_dict()) == set(LogMel(RATE, 40).state_dict())  # checkpoints unchanged by the option


def test_level_norm_keeps_the_spectral_shape_that_bin_norm_removes():
    """A low and a high tone differ only in which bins hold the energy: per-bin normalisation makes every bin's
    average 0 (the difference is gone from the mean), level normalisation keeps it."""
    low, high = _tone(300.0)[None], _tone(2500.0)[None]
    lengths = torch.tensor([low.shape[1]])
    for norm, differs in (("bin", False), ("level", True)):
        fe = LogMel(RATE, 40, norm=norm)
        a, b = fe(low, lengths)[0][0].mean(-1), fe(high, lengths)[0][0].mean(-1)
        assert bool((a - b).abs().max() > 0.5) == differs, norm
    with pytest.raises(ValueError, match="bin or level"):
        LogMel(RATE, 40, norm="global")
