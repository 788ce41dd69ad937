"""speech/ctc units: features, vocabulary, CTC decoding, float32 CTC under autocast, models, batching."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from zoo.errors import ZooError
from zoo.speech.data import BucketBatchSampler, Collate
from zoo.speech.decoding import BeamDecoder, WordDecoder, greedy_decode, greedy_ids
from zoo.speech.features import LogMel, SpecAugment
from zoo.speech.models import build_model
from zoo.speech.models.subsample import Conv2dSubsample
from zoo.speech.module import CTCRecognizer
from zoo.speech.vocab import BLANK, Vocab, normalize_text

TOKENS = [BLANK, " ", "a", "b", "c"]


def tiny_module(**kw) -> CTCRecognizer:
    kw.setdefault("vocab", TOKENS)
    return CTCRecognizer(arch="bilstm_small", sample_rate=8000, n_mels=16, model={"hidden": 16, "layers": 1}, **kw)


# -- features -----------------------------------------------------------------------------------------------
def test_logmel_shapes_lengths_and_padding_invariance():
    fe = LogMel(sample_rate=16000, n_mels=40)
    a, b = torch.randn(16000) * 0.1, torch.randn(8000) * 0.1
    batch = torch.zeros(2, 16000)
    batch[0], batch[1, :8000] = a, b
    feats, frames = fe(batch, torch.tensor([16000, 8000]))
    assert feats.shape == (2, 40, 101) and frames.tolist() == [101, 51]  # 10 ms hop, centred frames
    alone, n = fe(b[None], torch.tensor([8000]))
    # Normalisation uses only real frames: the padded copy matches the utterance on its own (up to the last two
    # frames, whose windows see zero padding in the batch but reflection padding alone).
    assert (feats[1, :, :49] - alone[0, :, :49]).abs().mean() < 0.05
    assert feats[1, :, 51:].abs().max() == 0
    real = feats[0]
    assert abs(real.mean().item()) < 1e-3 and abs(real.std().item() - 1) < 0.05


def test_specaugment_masks_only_in_training():
    aug = SpecAugment(freq_masks=2, freq_width=5, time_masks=2, time_width=10, max_time_ratio=0.2)
    x, frames = torch.ones(3, 20, 100), torch.tensor([100, 60, 5])
    aug.eval()
    assert torch.equal(aug(x, frames), x)
    aug.train()
    torch.manual_seed(0)
    y = aug(x, frames)
    assert (y == 0).any() and y.shape == x.shape
    assert x.min() == 1  # input untouched


# -- vocabulary -----------------------------------------------------------------------------------------------
def test_vocab_round_trip_normalisation_and_extension():
    assert normalize_text("  Hello,  WORLD! it's ") == "hello world it's"
    v = Vocab.build(["one two", "Three!"])
    assert v.tokens[0] == BLANK and " " in v.tokens and "!" not in v.tokens
    text = "two three"
    assert v.decode(v.encode(text)) == text
    bigger = v.extend(["zebra"])
    assert bigger.tokens[: len(v)] == v.tokens and set(bigger.tokens[len(v):]) == {"z", "b", "a"}
    assert Vocab(bigger.tokens).tokens == bigger.tokens  # plain list survives a checkpoint
    with pytest.raises(KeyError):
        v.encode("xyz")


# -- decoding -------------------------------------------------------------------------------------------------
def _emissions(path: list[int], vocab_size: int = 5) -> torch.Tensor:
    e = torch.full((1, len(path), vocab_size), -8.0)
    for t, i in enumerate(path):
        e[0, t, i] = 0.0
    return e.log_softmax(-1)


def test_greedy_decoding_on_hand_made_emissions():
    # a a _ a b b _ ' ' c  -> "aab c": repeats merge, a blank separates a true double letter
    path = [2, 2, 0, 2, 3, 3, 0, 1, 4]
    e = _emissions(path)
    assert greedy_ids(e, torch.tensor([9])) == [[2, 2, 3, 1, 4]]
    assert greedy_decode(e, torch.tensor([9]), TOKENS) == ["aab c"]
    assert greedy_decode(e, torch.tensor([4]), TOKENS) == ["aa"]  # padding beyond the length is ignored
    assert greedy_decode(e, torch.tensor([0]), TOKENS) == [""]


def test_beam_decoder_agrees_on_a_peaked_emission(tmp_path):
    e = _emissions([2, 0, 3, 1, 4, 4])
    assert BeamDecoder(TOKENS, beam_size=8)(e, torch.tensor([6])) == ["ab c"]
    with pytest.raises(ZooError, match="lexicon"):
        BeamDecoder(TOKENS, lexicon=str(tmp_path / "missing.txt"))
    lexicon = tmp_path / "lexicon.txt"
    lexicon.write_text("ab\ta b |\nc\tc |\n")
    assert BeamDecoder(TOKENS, beam_size=8, lexicon=str(lexicon))(e, torch.tensor([6])) == ["ab c"]


def test_isolated_words_go_to_the_word_ctc_finds_likelier_over_all_alignments(tmp_path):
    """Four frames: "b" has one good alignment (b then blanks: 0.6 x 0.55^3 = 0.10), "a" a weaker best one (0.05)
    but many (0.22 summed). The lexicon beam keeps "b"; decoder kind words, the likelihood CTC training maximised,
    says "a". A batch is decoded per utterance (lengths respected), and bad settings are one line each."""
    probs = torch.tensor([[0.1, 1e-6, 0.3, 0.6, 1e-6]] + [[0.55, 1e-6, 0.45, 1e-6, 1e-6]] * 3)
    e = (probs / probs.sum(-1, keepdim=True)).log()[None]
    likelihood = {w: (-F.ctc_loss(e[0], torch.tensor([[TOKENS.index(w)]]), torch.tensor([4]), torch.tensor([1]),
                                  reduction="sum")).exp() for w in "ab"}
    assert likelihood["a"] == pytest.approx(0.2240, abs=1e-3) and likelihood["b"] == pytest.approx(0.0998, abs=1e-3)
    assert BeamDecoder(TOKENS, beam_size=8, lexicon=["a", "b"])(e, torch.tensor([4])) == ["b"]
    words = WordDecoder(TOKENS, lexicon=["a", "b", "ab"])
    assert words(e, torch.tensor([4])) == ["a"]
    peaked = _emissions([3, 0, 0, 0])  # "b" alone, then blanks
    assert words(torch.cat([e, peaked, _emissions([2, 3, 0, 0])]), torch.tensor([4, 4, 2])) == ["a", "b", "ab"]
    assert words(e[:0], torch.tensor([], dtype=torch.long)) == []
    lexicon = tmp_path / "words.lex"
    lexicon.write_text("a\ta |\nb\tb |\n")
    assert WordDecoder(TOKENS, lexicon=str(lexicon)).words == ["a", "b"]
    module = tiny_module(decoder={"kind": "words", "lexicon": ["a", "b"]})
    assert module.decode(e, torch.tensor([4])) == ["a"]
    for kw, message in (({}, "needs a lexicon"), ({"lexicon": ["ax"]}, r"\['ax'\] cannot be spelled"),
                        ({"lexicon": ["a"], "beam_size": 8}, "takes a lexicon only, not \\['beam_size'\\]"),
                        ({"lexicon": str(tmp_path / "gone.lex")}, "lexicon file not found")):
        with pytest.raises(ZooError, match=message):
            WordDecoder(TOKENS, **kw)
    with pytest.raises(ZooError, match="use greedy, beam or words"):
        tiny_module(decoder={"kind": "viterbi"})


# -- CTC loss -------------------------------------------------------------------------------------------------
def test_ctc_loss_is_float32_under_bf16_autocast():
    torch.manual_seed(0)
    m = tiny_module()
    batch = Collate(m.vocab)([(torch.randn(4000) * 0.1, "ab c"), (torch.randn(2400) * 0.1, "ca")])
    ref, _, _ = m._loss(batch)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, log_probs, lengths = m._loss(batch)
    assert loss.dtype == torch.float32 and log_probs.dtype == torch.float32 and torch.isfinite(loss)
    assert math.isclose(loss.item(), ref.item(), rel_tol=0.05)
    # output lengths follow the real input lengths: 4000 and 2400 samples at 8 kHz, 10 ms hop, 4x subsampling
    assert lengths.tolist() == Conv2dSubsample.out_lengths(torch.tensor([51, 31])).tolist() == [13, 8]


# -- models ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["bilstm_small", "conformer_xs"])
def test_models_output_lengths(arch):
    model = build_model(arch, n_mels=16, vocab_size=7, **({"hidden": 16, "layers": 1} if "lstm" in arch else
                                                          {"d_model": 32, "layers": 1, "ffn": 64}))
    y, n = model(torch.randn(2, 16, 50), torch.tensor([50, 21]))
    assert y.shape == (2, 13, 7) and n.tolist() == [13, 6]
    with pytest.raises(ZooError, match="unknown speech arch"):
        build_model("nope", 16, 7)


def test_transcribe_refuses_audio_longer_than_max_seconds():
    m = tiny_module(max_seconds=1.0).eval()
    assert isinstance(m.transcribe([torch.zeros(4000)])[0], str)
    with pytest.raises(ZooError, match="max_seconds"):
        m.transcribe([torch.zeros(8001 + 8000)])


# -- batching -------------------------------------------------------------------------------------------------
def test_bucket_batches_cover_everything_and_group_by_duration():
    durations = [float(d) for d in torch.rand(200, generator=torch.Generator().manual_seed(0)) * 10]
    sampler = BucketBatchSampler(range(200), batch_size=10, drop_last=False, durations=durations, pool=20)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(200))
    spread = sum(max(durations[i] for i in b) - min(durations[i] for i in b) for b in batches) / len(batches)
    assert spread < 1.0  # random batches of 10 from U(0, 10) spread ~8 s


def test_collate_pads_and_drops_oov_from_targets_only():
    batch = Collate(Vocab(TOKENS))([(torch.ones(5), "ab"), (torch.ones(3), "axc")])
    assert batch["wave"].shape == (2, 5) and batch["lengths"].tolist() == [5, 3]
    assert batch["target_lengths"].tolist() == [2, 2] and batch["texts"] == ["ab", "axc"]


def test_predict_decoder_words_keeps_the_checkpoints_lexicon(tmp_path):
    import soundfile as sf
    from omegaconf import OmegaConf

    from zoo.speech.predict import predict

    for i in range(3):
        sf.write(tmp_path / f"{i}.wav", torch.randn(4000).numpy() * 0.1, 8000)
    module = tiny_module(decoder={"kind": "beam", "lexicon": ["ab", "c"]}).eval()
    rows = list(predict(module, OmegaConf.create({"predict": {"decoder": "words"}}), str(tmp_path)))
    assert module.decoder_cfg == {"kind": "words", "lexicon": ["ab", "c"]}
    assert len(rows) == 3 and {r["text"] for r in rows} <= {"ab", "c"}
    with pytest.raises(ZooError, match="predict.decoder=viterbi: use greedy, beam or words"):
        list(predict(module, OmegaConf.create({"predict": {"decoder": "viterbi"}}), str(tmp_path)))
