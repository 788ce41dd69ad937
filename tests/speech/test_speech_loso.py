"""The FSDD leave-one-speaker-out pieces: the FSDD data module, eSpeak data mixed into a manifest-driven run, a
lexicon given as a list of words, exact-match accuracy, and training-only waveform augmentation in the loaders.
Tiny generated wavs only: nothing here reads the real FSDD."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import soundfile as sf
import torch

from zoo.errors import ZooError
from zoo.speech.decoding import BeamDecoder
from zoo.speech.fsdd import NAMES, FSDDDataModule
from zoo.speech.module import CTCRecognizer
from zoo.speech.vocab import BLANK

DIGITS = " ".join(NAMES)


def _wav(path, freq: float, seconds: float = 0.3, rate: int = 8000) -> None:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.4 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate)


@pytest.fixture
def fsdd(tmp_path):
    """3 speakers x digits 0-2 x indices 0-6, FSDD-named, plus a file that is not FSDD (ignored)."""
    root = tmp_path / "fsdd"
    root.mkdir()
    for speaker in ("ann", "bob", "cyd"):
        for digit in range(3):
            for index in range(7):
                _wav(root / f"{digit}_{speaker}_{index}.wav", 300 + 100 * digit)
    (root / "README.wav").write_bytes(b"")
    return root


def test_fsdd_leave_one_speaker_out_splits(fsdd):
    data = FSDDDataModule(root=str(fsdd), holdout_speaker="bob", sample_rate=8000, chars=DIGITS)
    data.setup("fit")
    rows = data.rows
    assert len(rows["test"]) == 21 and all("_bob_" in r.path for r in rows["test"])
    assert len(rows["val"]) == 2 * 3 * 5 and len(rows["train"]) == 2 * 3 * 2
    speakers = {split: {r.path.split("_")[-2] for r in got} for split, got in rows.items()}
    assert speakers["train"] == speakers["val"] == {"ann", "cyd"}
    assert {r.text for r in rows["test"]} == {"zero", "one", "two"}
    assert data.model_kwargs()["vocab"][0] == BLANK


def test_fsdd_holdout_list_tests_on_all_of_them(fsdd):
    from omegaconf import OmegaConf

    data = FSDDDataModule(root=str(fsdd), holdout_speaker=OmegaConf.create(["bob", "cyd"]), sample_rate=8000,
                          chars=DIGITS)
    data.setup("fit")
    speakers = {split: {r.path.split("_")[-2] for r in got} for split, got in data.rows.items()}
    assert speakers == {"train": {"ann"}, "val": {"ann"}, "test": {"bob", "cyd"}}
    with pytest.raises(ZooError, match="'zed' is not one of"):
        FSDDDataModule(root=str(fsdd), holdout_speaker=["bob", "zed"]).setup("fit")


def test_fsdd_bad_choices_are_one_line(fsdd, tmp_path):
    for holdout, match in ((None, "set task.data.holdout_speaker.*ann, bob, cyd"), ("zed", "'zed' is not one of")):
        with pytest.raises(ZooError, match=match):
            FSDDDataModule(root=str(fsdd), holdout_speaker=holdout).setup("fit")
    with pytest.raises(ZooError, match="FSDD folder not found"):
        FSDDDataModule(root=str(tmp_path / "nowhere"), holdout_speaker="bob").setup("fit")


def _synth_corpus(root):
    """A stand-in for the zoo's eSpeak corpus: train.jsonl with digit and non-digit transcripts."""
    root.mkdir()
    texts = ["one", "two one", "left stop", "zero", "one yes", "two"]
    for i, _ in enumerate(texts):
        _wav(root / f"{i}.wav", 500 + 50 * i)
    (root / "train.jsonl").write_text("".join(json.dumps({"audio_filepath": f"{i}.wav", "text": t}) + "\n"
                                              for i, t in enumerate(texts)))
    return root


@pytest.mark.parametrize("ratio, expected", [(None, 4), (0.1, 1)])
def test_mix_synth_adds_only_utterances_with_known_words(fsdd, tmp_path, ratio, expected):
    corpus = _synth_corpus(tmp_path / "synth")
    data = FSDDDataModule(root=str(fsdd), holdout_speaker="bob", sample_rate=8000, chars=DIGITS,
                          mix_synth=str(corpus), mix_synth_ratio=ratio)
    data.setup("fit")
    synth = [r for r in data.rows["train"] if str(corpus) in r.path]
    assert len(synth) == expected and len(data.rows["train"]) == 12 + expected
    assert all(set(r.text.split()) <= {"zero", "one", "two"} for r in synth)  # "left stop", "one yes" left out
    assert all(str(corpus) not in r.path for split in ("val", "test") for r in data.rows[split])
    with pytest.raises(ZooError, match="has no train.jsonl"):
        FSDDDataModule(root=str(fsdd), holdout_speaker="bob", mix_synth=str(fsdd)).setup("fit")


def test_mix_synth_in_a_manifest_run(tmp_path):
    """The same option on the user's own manifests: words of their transcripts decide what is mixed in."""
    from zoo.speech.data import ManifestDataModule

    corpus = _synth_corpus(tmp_path / "synth")
    _wav(tmp_path / "a.wav", 440)
    (tmp_path / "m.jsonl").write_text(json.dumps({"audio_filepath": "a.wav", "text": "Left, STOP!"}) + "\n")
    manifest = str(tmp_path / "m.jsonl")
    data = ManifestDataModule(train_manifest=manifest, val_manifest=manifest, sample_rate=8000,
                              mix_synth=str(corpus))
    data.setup("fit")
    assert [r.text for r in data.rows["train"]] == ["Left, STOP!", "left stop"]
    assert data.vocab.tokens == [BLANK, " ", "e", "f", "l", "o", "p", "s", "t"]


def test_wave_augment_in_the_training_loader_only(fsdd):
    data = FSDDDataModule(root=str(fsdd), holdout_speaker="bob", sample_rate=8000, chars=DIGITS, batch_size=4,
                          augment={"noise_prob": 1.0, "snr_db": [0, 0]})
    data.setup("fit")
    train_ds, val_ds = data.train_dataloader().dataset, data.val_dataloader().dataset
    assert train_ds.augment is not None and val_ds.augment is None
    assert torch.equal(val_ds[0][0], val_ds[0][0])
    noisy = train_ds[0][0]
    reference = val_ds.__class__(train_ds.rows, 8000)[0][0]
    snr = 10 * math.log10(float(reference.pow(2).mean() / (noisy - reference).pow(2).mean()))
    assert snr == pytest.approx(0.0, abs=1.0)  # 0 dB SNR (clipping to [-1, 1] aside)


def test_lexicon_as_a_list_of_words_and_exact_match_accuracy():
    tokens = [BLANK, " ", "e", "n", "o", "t", "w"]
    emissions = torch.full((1, 6, len(tokens)), -10.0)
    for t, i in enumerate([4, 3, 0, 2, 0, 0]):  # "o n e" with blanks: spelled 'one'
        emissions[0, t, i] = 0.0
    decoder = BeamDecoder(tokens, beam_size=8, lexicon=["one", "two"])
    assert decoder(emissions.log_softmax(-1), torch.tensor([6])) == ["one"]
    with pytest.raises(ZooError, match=r"\['six'\] cannot be spelled"):
        BeamDecoder(tokens, lexicon=["one", "six"])
    module = CTCRecognizer(vocab=tokens, arch="bilstm_small", sample_rate=8000, n_mels=16,
                           model={"hidden": 16, "layers": 1}, decoder={"kind": "beam", "lexicon": ["one", "two"]})
    module.metrics["val_acc"].update(torch.tensor([1.0, 0.0, 1.0, 1.0]))
    assert float(module.metrics["val_acc"].compute()) == 0.75
    assert module.decode(emissions.log_softmax(-1), torch.tensor([6])) == ["one"]


def test_an_espeak_corpus_for_real_speech_draws_on_every_voice(tmp_path):
    """voices=all: the training split goes on into the variants the default corpus keeps for its val/test."""
    from zoo.speech.synth import TRAIN_VARIANTS, VAL_VARIANTS, generate, mix_corpus

    folder = generate(tmp_path, 8000, num_train=len(TRAIN_VARIANTS) + 2, num_val=0, num_test=0, max_words=1,
                      voices="all")
    voices = [json.loads(line)["voice"].split("+")[1] for line in (folder / "train.jsonl").read_text().splitlines()]
    assert voices[-2:] == VAL_VARIANTS[:2]
    default = generate(tmp_path, 8000, num_train=2, num_val=0, num_test=0, max_words=1)
    assert default != folder and json.loads((default / "spec.json").read_text())["splits"][0]["variants"] == \
        TRAIN_VARIANTS
    with pytest.raises(ZooError, match="voices='some': use split"):
        generate(tmp_path, 8000, voices="some")
    with pytest.raises(ZooError, match="unknown option.*num_trian; use "):
        mix_corpus({"num_trian": 10}, 8000)
