"""`task.module.pretrained=` for speech/ctc: a checkpoint with another vocabulary loads the acoustic model and the
output rows of the characters both know (by character, not index); new characters start fresh and are named; the
deprecated `init_from` still works and old checkpoints holding it still load; bad values are one line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from zoo.core.resume import resumed_checkpoint, resumed_from
from zoo.errors import ZooError
from zoo.kit.pretrained import PretrainedReport
from zoo.speech.module import CTCRecognizer
from zoo.speech.vocab import BLANK

SMALL = dict(arch="bilstm_small", sample_rate=8000, n_mels=16, model={"hidden": 16, "layers": 1})


def save(m: CTCRecognizer, path, task: str = "speech/ctc") -> str:  # noqa: ANN001
    torch.save({"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams), "zoo": {"task": task},
                "pytorch-lightning_version": "2.6.0"}, path)
    return str(path)


@pytest.fixture
def source(tmp_path) -> tuple[CTCRecognizer, str]:
    torch.manual_seed(0)
    m = CTCRecognizer(vocab=[BLANK, " ", "a", "b"], **SMALL)
    return m, save(m, tmp_path / "src.ckpt")


def test_another_vocabulary_keeps_the_model_and_the_rows_of_known_characters(source):
    src, path = source
    torch.manual_seed(1)
    fresh = CTCRecognizer(vocab=[BLANK, " ", "x", "b", "a"], **SMALL)  # the same init, without pretrained
    torch.manual_seed(1)
    m = CTCRecognizer(vocab=[BLANK, " ", "x", "b", "a"], pretrained=path, **SMALL)
    assert torch.equal(m.model.rnn.weight_ih_l0, src.model.rnn.weight_ih_l0)
    assert not torch.equal(fresh.model.rnn.weight_ih_l0, src.model.rnn.weight_ih_l0)
    old, new = src.model.head[1], m.model.head[1]
    for i_new, i_old in ((0, 0), (1, 1), (3, 3), (4, 2)):  # blank, space, b, a: by character
        assert torch.equal(new.weight[i_new], old.weight[i_old]) and torch.equal(new.bias[i_new], old.bias[i_old])
    assert torch.equal(new.weight[2], fresh.model.head[1].weight[2])  # 'x' keeps its fresh row
    report = m.pretrained_report
    assert report["new_characters"] == ["x"] and "head.1.weight['x']" in report["reinit_rows"]
    ckpt: dict = {}
    m.on_save_checkpoint(ckpt)
    PretrainedReport().on_save_checkpoint(None, m, ckpt)  # what `zoo train` adds (configs/callbacks)
    assert ckpt["pretrained_report"]["source"] == path and "4 of 5 kept" in " ".join(ckpt["pretrained_report"]["notes"])


def test_init_from_is_a_deprecated_alias_and_old_checkpoints_still_load(source, tmp_path, caplog):
    src, path = source
    m = CTCRecognizer(vocab=[BLANK, " ", "a", "b"], init_from=path, **SMALL)
    assert m.pretrained_report is None  # read at fit only: reloading an old checkpoint never opens the file
    with caplog.at_level(logging.WARNING):
        m.setup("fit")
    assert "init_from is deprecated: use task.module.pretrained" in caplog.text
    assert torch.equal(m.model.head[1].weight, src.model.head[1].weight)
    old = save(CTCRecognizer(vocab=[BLANK, " ", "a"], init_from=str(tmp_path / "long-gone.ckpt"), **SMALL),
               tmp_path / "old.ckpt")
    assert CTCRecognizer.load_from_checkpoint(old).hparams.init_from.endswith("long-gone.ckpt")


def test_a_resumed_run_reads_no_pretrained_source(source, tmp_path):
    """`zoo train` builds a resumed run's module inside resumed_from: its checkpoint restores every tensor next, so
    neither `pretrained` nor the deprecated `init_from` is read (the file may be gone since the run began), and the
    report the run began with is what its later checkpoints keep."""
    _, path = source
    m = CTCRecognizer(vocab=[BLANK, " ", "a", "b"], pretrained=path, **SMALL)
    run: dict = {"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams)}
    PretrainedReport().on_save_checkpoint(None, m, run)
    torch.save(run, tmp_path / "last.ckpt")
    Path(path).unlink()
    with pytest.raises(ZooError, match="not found"):  # a new run needs the source
        CTCRecognizer(vocab=[BLANK, " ", "a", "b"], pretrained=path, **SMALL)
    with resumed_from(str(tmp_path / "last.ckpt")):
        again = CTCRecognizer(vocab=[BLANK, " ", "a", "b"], pretrained=path, **SMALL)
        old = CTCRecognizer(vocab=[BLANK, " ", "a", "b"], init_from=path, **SMALL)
    assert resumed_checkpoint() is None  # only while the module is built
    assert again.pretrained_report == run["pretrained_report"] and again.hparams.pretrained == path
    old.setup("fit")  # a new run reads init_from here (and would fail: the file is gone)
    assert old.pretrained_report == run["pretrained_report"]


def test_auto_is_random_init_for_an_arch_without_packaged_weights():
    """`auto` (the task's default, for Whisper's packaged weights) starts a log-Mel model at random, as null does:
    `task=speech/ctc task.module.arch=bilstm_small` needs no `pretrained=null` beside it."""
    torch.manual_seed(0)
    auto = CTCRecognizer(vocab=[BLANK, " ", "a"], pretrained="auto", **SMALL)
    torch.manual_seed(0)
    none = CTCRecognizer(vocab=[BLANK, " ", "a"], pretrained=None, **SMALL)
    assert auto.pretrained_report is None
    assert all(torch.equal(a, b) for a, b in zip(auto.state_dict().values(), none.state_dict().values()))


def test_bad_values_are_one_line(source, tmp_path):
    src, path = source
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"PK\x03\x04 truncated")
    foreign = tmp_path / "other.safetensors"
    from safetensors.torch import save_file

    save_file({"conv.weight": torch.zeros(2, 2)}, str(foreign))
    cases = [
        (str(tmp_path / "gone.ckpt"), SMALL, "not found"),
        (save(src, tmp_path / "nlp.ckpt", task="nlp/bert"), SMALL, "is a nlp/bert checkpoint, not speech/ctc"),
        (str(corrupt), SMALL, "corrupt|not a zoo checkpoint"),
        (str(foreign), SMALL, "does not match this architecture"),
        (path, {**SMALL, "arch": "bigru"}, "holds a arch=bilstm_small model.*task.module.arch=bilstm_small"),
        (path, {**SMALL, "model": {"hidden": 24, "layers": 1}}, "does not match this architecture"),
        (True, SMALL, "no hub weights"),
    ]
    for value, kw, message in cases:
        with pytest.raises(ZooError, match=message) as e:
            CTCRecognizer(vocab=[BLANK, " ", "a"], pretrained=value, **kw)
        assert str(e.value).startswith("task.module.pretrained") and "\n" not in str(e.value)


def test_a_whisper_checkpoint_in_a_log_mel_run_names_the_whisper_preset(tmp_path):
    """The default task's checkpoints are Whisper's: speech_scratch_finetune (a log-Mel recipe) points to the preset
    that takes them, with the BiGRU head the checkpoint has."""
    whisper = CTCRecognizer(vocab=[BLANK, " ", "a"], arch="whisper", pretrained=False,
                            model={"d_model": 16, "layers": 1, "heads": 2, "ffn": 32, "rnn_head": 8})
    path = save(whisper, tmp_path / "w.ckpt")
    expected = (r"holds a arch=whisper model, this run builds arch=bilstm_small; fine-tune it with "
                r"experiment=speech_whisper_finetune .*'task.module.model=\{rnn_head: 8\}'")
    with pytest.raises(ZooError, match=expected):
        CTCRecognizer(vocab=[BLANK, " ", "a"], pretrained=path, **SMALL)
