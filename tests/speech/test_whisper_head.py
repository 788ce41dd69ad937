"""The Whisper CTC model's reading options: a weighted mix of encoder layers (feature_layers) and the silence
put before and after each clip (silence_lead, silence_tail). Tiny random configs, no weights needed."""

from __future__ import annotations

import pytest
import torch

from zoo.errors import ZooError
from zoo.speech.models.whisper import WhisperCTC
from zoo.speech.module import CTCRecognizer
from zoo.speech.vocab import BLANK

TINY = {"d_model": 32, "layers": 2, "heads": 2, "ffn": 64}
VOCAB = [BLANK, " ", "a", "b", "c"]


def _pair(**kwargs) -> tuple[WhisperCTC, WhisperCTC]:
    torch.manual_seed(0)
    plain = WhisperCTC(len(VOCAB), **TINY, rnn_head=8).eval()
    other = WhisperCTC(len(VOCAB), **TINY, rnn_head=8, **kwargs).eval()
    other.load_state_dict(plain.state_dict(), strict=False)
    return plain, other


def test_feature_layers_mix_normalised_layers_by_learned_weights():
    plain, mixed = _pair(feature_layers=[1, 2])
    wave, n = torch.randn(2, 9000) * 0.1, torch.tensor([9000, 6000])
    assert mixed.mix is not None and mixed.taps == (1, 2)
    with torch.no_grad():
        mixed.mix.copy_(torch.tensor([-1e4, 0.0]))  # all weight on the last layer: the plain model's output
        assert torch.allclose(mixed(wave, n)[0], plain(wave, n)[0], atol=1e-5)
        mixed.mix.zero_()  # half and half: another output, and layer 1 is normalised before it is mixed
        feats, frames = mixed.front(wave, n)
        (h1, last), _ = mixed.encoder.states(feats, frames, (1, 2))
        want = 0.5 * torch.nn.functional.layer_norm(h1, (32,)) + 0.5 * last
        assert torch.allclose(mixed._mixed([h1, last]), want, atol=1e-6)
        assert not torch.allclose(mixed(wave, n)[0], plain(wave, n)[0], atol=1e-3)


def test_feature_layers_stop_at_the_highest_tap_and_refuse_missing_layers():
    _, low = _pair(feature_layers=[1])
    ran = []
    low.encoder.layers[1].register_forward_hook(lambda *a: ran.append(1))
    with torch.no_grad():
        low(torch.randn(1, 4000), torch.tensor([4000]))
    assert not ran and low.mix is None
    for bad in ([0, 2], [3]):
        with pytest.raises(ZooError, match=r"feature_layers=.*this encoder has layers 1-2"):
            WhisperCTC(len(VOCAB), **TINY, feature_layers=bad)


@pytest.mark.parametrize(("options", "before", "after", "frames", "bad"), [
    ({"silence_tail": 0.1}, 0, 1600, [55, 27], {"silence_tail": -1}),
    ({"silence_lead": 0.05, "silence_tail": 0.1}, 800, 1600, [58, 29], {"silence_lead": 6.0}),
])
def test_silence_equals_zeros_put_by_hand_and_stays_batch_invariant(options, before, after, frames, bad):
    plain, padded = _pair(**options)
    a, b = torch.randn(16000) * 0.1, torch.randn(7000) * 0.1
    batch = torch.zeros(2, 16000)
    batch[0], batch[1, :7000] = a, b
    batch[1, 7000:] = 0.5  # junk past the clip's end must not reach the model
    with torch.no_grad():
        both, lengths = padded(batch, torch.tensor([16000, 7000]))
        by_hand, n = plain(torch.cat([torch.zeros(before), b, torch.zeros(after)])[None],
                           torch.tensor([before + 7000 + after]))
        alone, _ = padded(b[None], torch.tensor([7000]))
    assert lengths.tolist() == frames and n.tolist() == frames[1:]
    assert torch.allclose(both[1, : frames[1]], by_hand[0], atol=1e-5)
    assert torch.allclose(alone[0], by_hand[0], atol=1e-5)
    (key, value), = bad.items()
    with pytest.raises(ZooError, match=rf"{key}={value}.*seconds in \[0, 5\]"):
        WhisperCTC(len(VOCAB), **TINY, **bad)


def test_options_survive_the_checkpoint(tmp_path):
    m = CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000,
                      model={**TINY, "feature_layers": [1, 2], "silence_tail": 0.2, "silence_lead": 0.1},
                      pretrained=False)
    path = tmp_path / "m.ckpt"
    torch.save({"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams)}, path)
    back = CTCRecognizer(**torch.load(path, weights_only=False)["hyper_parameters"])
    back.load_state_dict(torch.load(path, weights_only=False)["state_dict"])
    assert back.model.taps == (1, 2) and back.model.tail == 3200 and back.model.lead == 1600
    assert torch.equal(back.model.mix, m.model.mix)


def test_negative_freeze_epochs_is_one_line():
    with pytest.raises(ZooError, match=r"freeze_encoder_epochs=-1: give a whole number of epochs, 0 or more"):
        CTCRecognizer(vocab=VOCAB, arch="whisper", sample_rate=16000, model=TINY, freeze_encoder_epochs=-1,
                      pretrained=False)
