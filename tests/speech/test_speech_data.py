"""speech/ctc data: manifests and their bad lines, audio reading and resampling, OOV warnings, fine-tune remap."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import soundfile as sf
import torch

from zoo.errors import ZooError
from zoo.speech.audio import load_audio
from zoo.speech.data import ManifestDataModule
from zoo.speech.manifest import read_manifest
from zoo.speech.module import CTCRecognizer
from zoo.speech.pretrained import load_init_weights
from zoo.speech.vocab import BLANK, Vocab


def burst(path, freq: float = 440.0, seconds: float = 0.5, rate: int = 8000) -> str:
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.5 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate)
    return str(path)


def manifest(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_load_audio_resamples_and_rejects_bad_files(tmp_path):
    wave = load_audio(burst(tmp_path / "a.wav", rate=8000, seconds=0.5), 16000)
    assert wave.dtype == torch.float32 and wave.shape == (8000,)
    stereo = tmp_path / "s.wav"
    sf.write(stereo, np.zeros((100, 2), np.float32), 16000)
    assert load_audio(str(stereo), 16000).shape == (100,)
    (tmp_path / "junk.wav").write_bytes(b"not audio at all")
    with pytest.raises(ZooError, match="cannot read audio"):
        load_audio(str(tmp_path / "junk.wav"), 16000)
    sf.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    with pytest.raises(ZooError, match="empty"):
        load_audio(str(tmp_path / "empty.wav"), 16000)


def test_manifest_bad_lines(tmp_path, caplog):
    ok = burst(tmp_path / "ok.wav")
    long = burst(tmp_path / "long.wav", seconds=3.0)
    sf.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 8000)
    (tmp_path / "junk.wav").write_bytes(b"nope")
    rows = [{"audio_filepath": "ok.wav", "text": "one"}, {"audio_filepath": "gone.wav", "text": "two"},
            {"audio_filepath": "empty.wav", "text": "x"}, {"audio_filepath": "junk.wav", "text": "x"},
            {"audio_filepath": long, "text": "x"}]
    with caplog.at_level(logging.WARNING):
        got = read_manifest(manifest(tmp_path / "m.jsonl", rows), max_duration=2.0)
    assert [u.path for u in got] == [ok] and got[0].duration == pytest.approx(0.5)
    msg = caplog.text
    assert "skipped 4 of 5" in msg and "missing file" in msg and "empty" in msg and "unreadable" in msg
    assert "max_duration" in msg
    with pytest.raises(ZooError, match=r"m2.jsonl:2: missing field\(s\) text"):
        read_manifest(manifest(tmp_path / "m2.jsonl", [rows[0], {"audio_filepath": "ok.wav"}]))
    with pytest.raises(ZooError, match=r"m3.jsonl:1: not valid JSON"):
        read_manifest(manifest(tmp_path / "m3.jsonl", ["{oops"]))
    with pytest.raises(ZooError, match="no usable utterances"):
        read_manifest(manifest(tmp_path / "m4.jsonl", rows[1:2]))


def test_manifest_datamodule_vocab_and_oov_warning(tmp_path, caplog):
    a, b = burst(tmp_path / "a.wav"), burst(tmp_path / "b.wav", 880)
    train = manifest(tmp_path / "train.jsonl",
                     [{"audio_filepath": a, "text": "One"}, {"audio_filepath": b, "text": "two"}])
    val = manifest(tmp_path / "val.jsonl", [{"audio_filepath": a, "text": "zoo"}])
    dm = ManifestDataModule(train_manifest=train, val_manifest=val, sample_rate=16000, batch_size=2)
    with caplog.at_level(logging.WARNING):
        vocab = dm.model_kwargs()["vocab"]
    assert vocab == [BLANK, " ", "e", "n", "o", "t", "w"]
    assert "outside the vocabulary ['z']" in caplog.text
    batch = next(iter(dm.train_dataloader()))
    assert batch["wave"].shape == (2, 8000)  # 8 kHz files resampled to the model's 16 kHz
    # The OOV reference still scores against what the model can emit: CER is not silently improved.
    m = CTCRecognizer(vocab=vocab, arch="bilstm_small", model={"hidden": 16, "layers": 1})
    m.metrics["val_cer"].update(["oo"], ["zoo"])
    assert m.metrics["val_cer"].compute().item() == pytest.approx(1 / 3)
    with pytest.raises(ZooError, match="train_manifest"):
        ManifestDataModule(val_manifest=val)


def test_finetune_keeps_old_rows_and_appends_new_characters(tmp_path):
    small = dict(arch="bilstm_small", n_mels=16, model={"hidden": 16, "layers": 1})
    old = CTCRecognizer(vocab=[BLANK, " ", "a", "b"], **small)
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": old.state_dict(), "hyper_parameters": dict(old.hparams)}, path)
    new_vocab = Vocab(list(old.hparams["vocab"])).extend(["abc"]).tokens
    assert new_vocab == [BLANK, " ", "a", "b", "c"]
    new = CTCRecognizer(vocab=new_vocab, **small)
    fresh_row = new.model.head[1].weight[4].clone()
    load_init_weights(new, str(path))
    assert torch.equal(new.model.head[1].weight[:4], old.model.head[1].weight)
    assert torch.equal(new.model.head[1].weight[4], fresh_row)
    assert torch.equal(new.model.rnn.weight_ih_l0, old.model.rnn.weight_ih_l0)
    other = CTCRecognizer(vocab=[BLANK, " ", "b", "a"], **small)
    load_init_weights(other, str(path))  # another order: rows follow the characters
    assert torch.equal(other.model.head[1].weight[2], old.model.head[1].weight[3])
    wider = CTCRecognizer(vocab=new_vocab, arch="bilstm_small", n_mels=16, model={"hidden": 24, "layers": 1})
    with pytest.raises(ZooError, match="does not match this architecture"):
        load_init_weights(wider, str(path))


def test_speed_perturbation_changes_length_in_training_only(tmp_path):
    from zoo.speech.data import SpeechDataset
    from zoo.speech.manifest import Utterance

    rows = [Utterance(burst(tmp_path / "a.wav", seconds=0.5), 0.5, "one")]
    assert SpeechDataset(rows, 8000)[0][0].shape == (4000,)
    lengths = {SpeechDataset(rows, 8000, speed_perturb=[0.9, 1.1])[0][0].shape[0] for _ in range(20)}
    assert lengths == {3600, 4400}


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", b"PK\x03\x04 truncated zip"])
def test_corrupt_checkpoint_for_init_or_vocab_is_one_line(tmp_path, content):
    """init_from / base_vocab_from read checkpoints themselves: a corrupt or missing file is one error line naming
    the option and the file, not a torch.load traceback."""
    from zoo.speech.data import checkpoint_vocab

    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(content)
    module = CTCRecognizer(vocab=[BLANK, " ", "a"], arch="bilstm_small", n_mels=16, model={"hidden": 16, "layers": 1})
    for call, key in [(lambda: load_init_weights(module, str(bad)), "task.module.init_from"),
                      (lambda: checkpoint_vocab(str(bad)), "task.data.base_vocab_from")]:
        with pytest.raises(ZooError) as e:
            call()
        # The wording is zoo.core.checkpoint's (shared by every domain); here: which option, which file, one line.
        msg = str(e.value)
        assert msg.startswith(f"{key}: ") and str(bad) in msg and "checkpoint" in msg and "\n" not in msg
    with pytest.raises(ZooError, match="task.module.init_from: .*not found"):
        load_init_weights(module, str(tmp_path / "gone.ckpt"))
