"""Read sentences: the scoring rule and WER/CER, splits by speaker, speaker groups and the per-speaker file, the word
n-gram LM, and the bad manifest lines (empty transcript, NaN/inf audio). Tiny generated audio only."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
import soundfile as sf
import torch

from zoo.errors import ZooError
from zoo.speech.audio import load_audio, probe
from zoo.speech.data import ManifestDataModule, read_speaker_groups
from zoo.speech.manifest import Utterance, read_manifest
from zoo.speech.ngram import build_arpa
from zoo.speech.scoring import SpeakerScores
from zoo.speech.splits import carve_speakers, pick_speakers
from zoo.speech.text import cer, normalize_for_scoring, number_words, wer, word_errors


@pytest.mark.parametrize("text,expected", [
    ("Hello, World!", "hello world"),
    ("Don't 'quote' me", "don't quote me"),
    ("I\u2019m here.", "i'm here"),
    ("42 cats", "forty two cats"),
    ("the 1st and 22nd", "the first and twenty second"),
    ("3.5 kg", "three point five kg"),
    ("1,000 people", "one thousand people"),
    ("0351", "zero three five one"),
    ("3227", "three two two seven"),
    ("Twenty-one", "twenty one"),
    ("105", "one hundred five"),
    ("  spaced\tout  ", "spaced out"),
])
def test_scoring_rule(text, expected):
    assert normalize_for_scoring(text) == expected


def test_number_words():
    assert [number_words(n) for n in (0, 13, 20, 99, 100, 110, 999)] == [
        "zero", "thirteen", "twenty", "ninety nine", "one hundred", "one hundred ten", "nine hundred ninety nine"]


def test_wer_and_cer_are_corpus_rates_on_normalised_text():
    assert word_errors("The cat, sat!", "the cat sat") == (0, 3)
    assert wer(["a b c"], ["a x c d"]) == 0.5  # one substitution, one deletion, four reference words
    assert wer(["x", "a b c d e f"], ["y", "a b c d e f"]) == pytest.approx(1 / 7)  # not the mean of 1.0 and 0.0
    assert wer(["forty two"], ["42"]) == 0.0
    assert cer(["abc"], ["abd"]) == pytest.approx(1 / 3)
    assert wer(["an insertion"], [""]) == 1.0  # no reference words: any output is an error, not a division by 0


def test_pick_speakers_stratified_and_seeded():
    speakers = [f"c{i}" for i in range(6)] + [f"a{i}" for i in range(4)]
    groups = {s: "children" if s[0] == "c" else "adults" for s in speakers}
    picked = pick_speakers(speakers, 4, seed=0, groups=groups)
    assert picked == pick_speakers(list(reversed(speakers)), 4, seed=0, groups=groups)  # order does not matter
    assert sum(s[0] == "c" for s in picked) >= 1 and sum(s[0] == "a" for s in picked) >= 1
    assert len(picked) == 4 and len(set(picked)) == 4
    with pytest.raises(ZooError, match="cannot hold out 10 of 10"):
        pick_speakers(speakers, 10, seed=0)


def test_carve_speakers_keeps_every_speaker_in_one_split():
    rows = [Utterance(f"{s}{i}.wav", 1.0, "x", s) for s in "abcde" for i in range(3)]
    train, val = carve_speakers(rows, 2, 0, None, "m.jsonl")
    assert len(val) == 6 and not {r.speaker for r in train} & {r.speaker for r in val}
    train, val = carve_speakers(rows, ["b", "d"], 0, None, "m.jsonl")
    assert {r.speaker for r in val} == {"b", "d"}
    with pytest.raises(ZooError, match=r"\['z'\] are not speakers"):
        carve_speakers(rows, ["z"], 0, None, "m.jsonl")
    with pytest.raises(ZooError, match="no speaker field"):
        carve_speakers([Utterance("a.wav", 1.0, "x")] * 2, 1, 0, None, "m.jsonl")


def _wav(path, seconds: float = 0.3, rate: int = 16000, data=None, subtype: str | None = None) -> str:
    if data is None:
        data = (0.3 * np.sin(np.arange(int(seconds * rate)) / 5)).astype(np.float32)
    sf.write(path, data, rate, subtype=subtype)
    return str(path)


def _manifest(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_nan_and_inf_float_audio_is_a_bad_file(tmp_path):
    bad = np.full(1600, 0.1, np.float32)
    bad[10] = np.nan
    nan = _wav(tmp_path / "nan.wav", data=bad, subtype="FLOAT")
    bad[10] = np.inf
    inf = _wav(tmp_path / "inf.wav", data=bad, subtype="FLOAT")
    assert probe(nan) == (None, "NaN or inf samples") and probe(inf)[1] == "NaN or inf samples"
    for path in (nan, inf):
        with pytest.raises(ZooError, match="NaN or inf samples"):
            load_audio(path, 16000)
    assert probe(_wav(tmp_path / "ok.wav", subtype="FLOAT"))[1] is None


def test_manifest_skips_empty_transcripts_and_nan_audio_with_one_count(tmp_path, caplog):
    ok = _wav(tmp_path / "ok.wav")
    bad = np.zeros(1600, np.float32)
    bad[0] = np.nan
    _wav(tmp_path / "nan.wav", data=bad, subtype="FLOAT")
    path = _manifest(tmp_path / "m.jsonl", [{"audio_filepath": "ok.wav", "text": "hi", "speaker": 7},
                                             {"audio_filepath": "ok.wav", "text": " ?! "},
                                             {"audio_filepath": "nan.wav", "text": "hi"}])
    with caplog.at_level(logging.WARNING):
        rows = read_manifest(path)
    assert [(r.path, r.speaker) for r in rows] == [(ok, "7")]
    assert "skipped 2 of 3 utterances: 1 empty transcript" in caplog.text and "1 NaN or inf samples" in caplog.text


def test_speaker_groups_and_per_speaker_file(tmp_path):
    tsv = tmp_path / "speakers.tsv"
    tsv.write_text("speaker\tage\tgender\nk1\t8\tm\na1\t30\tf\n")
    groups = read_speaker_groups(str(tsv))
    assert groups == {"k1": "children", "a1": "adults"}
    scores = SpeakerScores()
    scores.add(["k1", "k1", "a1"], ["a b", "c", "x y z w"], ["a x", "c", "x y z w"])
    assert scores.group_wer(groups) == {"adults": 0.0, "children": pytest.approx(1 / 3)}
    out = scores.write(tmp_path, groups)
    lines = out.read_text().splitlines()
    assert lines[0].startswith("speaker\tgroup") and lines[1] == "k1\tchildren\t2\t1\t3\t0.3333"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file left
    tsv.write_text("speaker\tgender\nk1\tm\n")
    with pytest.raises(ZooError, match="speaker and age"):
        read_speaker_groups(str(tsv))


def test_manifest_datamodule_carves_validation_by_speaker(tmp_path):
    rows = [{"audio_filepath": _wav(tmp_path / f"{s}{i}.wav"), "text": "ab", "speaker": s}
            for s in ("s1", "s2", "s3", "s4") for i in range(2)]
    train = _manifest(tmp_path / "train.jsonl", rows)
    test = _manifest(tmp_path / "test.jsonl", rows[:1])
    dm = ManifestDataModule(train_manifest=train, test_manifest=test, val_speakers=1, sample_rate=16000)
    dm.setup("fit")
    assert len(dm.chosen_val_speakers) == 1 and len(dm.rows["val"]) == 2 and len(dm.rows["train"]) == 6
    assert len(dm.rows["test"]) == 1
    assert not {r.speaker for r in dm.rows["train"]} & set(dm.chosen_val_speakers)
    batch = next(iter(dm.val_dataloader()))
    assert batch["speakers"] == [dm.chosen_val_speakers[0]] * 2
    with pytest.raises(ZooError, match="val_speakers"):
        ManifestDataModule(train_manifest=train)


def _arpa_table(arpa: str) -> dict[tuple, tuple[float, float]]:
    table = {}
    for line in arpa.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2:
            table[tuple(parts[1].split())] = (float(parts[0]), float(parts[2]) if len(parts) > 2 else 0.0)
    return table


def _backoff_prob(table, history: tuple, word: str) -> float:
    if history + (word,) in table:
        return 10 ** table[history + (word,)][0]
    return 10 ** table.get(history, (0.0, 0.0))[1] * _backoff_prob(table, history[1:], word)


def test_ngram_arpa_is_a_distribution_for_every_history():
    sentences = ["the cat sat", "the cat ran away", "a dog sat on the mat", "the dog ran", "zero three five one"]
    arpa, words = build_arpa(sentences, order=3)
    assert "\\data\\" in arpa and "ngram 3=" in arpa and arpa.rstrip().endswith("\\end\\")
    table = _arpa_table(arpa)
    vocab = [*words, "</s>", "<unk>"]
    for history in [(), ("<s>",), ("the",), ("<s>", "the"), ("the", "cat"), ("dog",), ("mat",), ("x", "y")]:
        assert math.isclose(sum(_backoff_prob(table, history, w) for w in vocab), 1.0, abs_tol=1e-4), history
    assert _backoff_prob(table, ("<s>", "the"), "cat") > _backoff_prob(table, ("<s>", "the"), "dog")  # 2 vs 1
    with pytest.raises(ZooError, match="no words"):
        build_arpa(["", "  "])


def _spelling(text: str, tokens: list[str]) -> torch.Tensor:
    """(1, 2 * len(text), V) log-probabilities: each character then a blank, each likely (e^4 against 1)."""
    frames = []
    for c in text:
        frames += [tokens.index(c), 0]
    return (torch.nn.functional.one_hot(torch.tensor(frames), len(tokens)).float() * 4)[None].log_softmax(-1)


def test_beam_decoder_builds_its_lm_from_text(tmp_path):
    from zoo.speech.decoding import BeamDecoder

    text = tmp_path / "lm.txt"
    text.write_text("the cat sat\nthe dog ran\n")
    tokens = ["<blank>", " ", *"acdeghnorst"]
    decoder = BeamDecoder(tokens, beam_size=8, lm_text=str(text), lm_order=2)
    assert decoder(_spelling("the cat", tokens), torch.tensor([14])) == ["the cat"]
    assert decoder(_spelling("the cag", tokens), torch.tensor([14])) == ["the cat"]  # the lexicon's nearest word
    with pytest.raises(ZooError, match="lm_text file not found"):
        BeamDecoder(tokens, lm_text=str(tmp_path / "gone.txt"))


def test_serving_refuses_nan_audio_with_a_422():
    import io

    from zoo.kit.deploy import BadRequest
    from zoo.speech.deploy import Handler

    handler = Handler({"preprocess": {"sample_rate": 16000, "input": "waveform", "max_seconds": 29.4},
                       "vocabulary": ["<blank>", "a"]})
    wave = np.full(1600, 0.1, np.float32)
    ok, buf = io.BytesIO(), io.BytesIO()
    sf.write(ok, wave, 16000, format="WAV", subtype="FLOAT")
    assert handler.decode(ok.getvalue(), "audio/wav")["wave"].shape == (1, 1600)
    wave[7] = np.nan
    sf.write(buf, wave, 16000, format="WAV", subtype="FLOAT")
    with pytest.raises(BadRequest, match="NaN or inf samples") as e:
        handler.decode(buf.getvalue(), "audio/wav")
    assert e.value.status == 422


def test_lm_text_train_is_built_from_the_kept_transcripts():
    from zoo.speech.module import CTCRecognizer
    from zoo.speech.vocab import BLANK

    m = CTCRecognizer(vocab=[BLANK, " ", *"acdeghnorst"], arch="bilstm_small", sample_rate=16000, n_mels=16,
                      pretrained=False, decoder={"kind": "beam", "beam_size": 4, "lm_text": "train", "lm_order": 2})
    emissions, lengths = _spelling("the dog", [BLANK, " ", *"acdeghnorst"]), torch.tensor([14])
    with pytest.raises(ZooError, match="lm_text=train: this model holds no training transcripts"):
        m.decode(emissions, lengths)
    m.on_load_checkpoint({"lm_sentences": ["the cat sat", "the dog ran"]})
    assert m.decode(emissions, lengths) == ["the dog"]
    saved: dict = {}
    m.on_save_checkpoint(saved)
    assert saved["lm_sentences"] == ["the cat sat", "the dog ran"]
