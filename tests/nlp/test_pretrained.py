"""`task.module.pretrained=` for nlp/bert: a zoo .ckpt and an exported hf_model/ folder both start a run with another
label set (encoder loaded, head fresh and named) or the same one (everything loaded); bad values are one line.
Tiny 2-layer BERT from conftest, no network."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from nlp_helpers import build_tiny_encoder

from zoo.errors import ZooError
from zoo.kit.pretrained import PretrainedReport
from zoo.nlp.hf_folder import export_hf
from zoo.nlp.module import SequenceClassifier


def save(m: SequenceClassifier, path: Path, task: str = "nlp/bert") -> str:
    torch.save({"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams), "zoo": {"task": task}}, path)
    return str(path)


@pytest.fixture(scope="module")
def source(tiny_encoder, tmp_path_factory) -> tuple[SequenceClassifier, str, str]:
    """A trained-looking two-label classifier (its head moved off init), as a .ckpt and as hf_model/."""
    tmp = tmp_path_factory.mktemp("nlp_src")
    m = SequenceClassifier(tiny_encoder, label_names=["neg", "pos"])
    with torch.no_grad():
        for p in m.model.parameters():
            p.add_(0.01)  # "fine-tuned": differs from the tiny encoder's own weights everywhere
    return m, save(m, tmp / "src.ckpt"), str(export_hf(m, tmp / "hf_model"))


def encoder_equal(a: SequenceClassifier, b: SequenceClassifier) -> bool:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    return all(torch.equal(sa[k], sb[k]) for k in sa if k.startswith("bert."))


@pytest.mark.parametrize("kind", ["ckpt", "hf_model"])
def test_another_label_set_loads_the_encoder_and_starts_a_fresh_head(source, tiny_encoder, kind):
    src, ckpt, folder = source
    value = ckpt if kind == "ckpt" else folder
    m = SequenceClassifier(tiny_encoder, pretrained=value, label_names=["a", "b", "c"])
    assert encoder_equal(src, m)
    assert m.model.classifier.weight.shape == (3, 64)
    report = m.pretrained_report
    assert sorted(report["reinit"]) == ["classifier.bias", "classifier.weight"] and not report["skipped_shape"]
    assert "new classification head" in report["line"]
    out: dict = {}
    m.on_save_checkpoint(out)
    PretrainedReport().on_save_checkpoint(None, m, out)  # what `zoo train` adds (configs/callbacks)
    assert out["pretrained_report"]["loaded"] == report["loaded"] and value in out["pretrained_report"]["source"]


@pytest.mark.parametrize("kind", ["ckpt", "hf_model"])
def test_the_same_labels_load_the_head_too(source, tiny_encoder, kind):
    src, ckpt, folder = source
    m = SequenceClassifier(tiny_encoder, pretrained=ckpt if kind == "ckpt" else folder, label_names=["neg", "pos"])
    assert encoder_equal(src, m) and torch.equal(m.model.classifier.weight, src.model.classifier.weight)
    assert m.pretrained_report["reinit"] == []


def test_bad_values_are_one_line(source, tiny_encoder, tmp_path):
    src, ckpt, _ = source
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    one_layer = str(build_tiny_encoder(tmp_path / "one_layer", layers=1))
    shallow = save(SequenceClassifier(one_layer, label_names=["neg", "pos"]), tmp_path / "shallow.ckpt")
    torch.save({"conv1.weight": torch.zeros(8, 3, 3, 3), "fc.weight": torch.zeros(2, 8)}, tmp_path / "resnet.pt")
    cases = [
        (str(tmp_path / "gone.ckpt"), "not found"),
        (save(src, tmp_path / "vision.ckpt", task="vision/resnet"), "is a vision/resnet checkpoint, not nlp/bert"),
        (str(corrupt), "corrupt|not a zoo checkpoint"),
        (shallow, rf"holds another encoder \(num_hidden_layers=1\).*task.module.encoder={one_layer}"),
        (str(tmp_path / "resnet.pt"), "does not match this architecture"),
    ]
    for value, message in cases:
        with pytest.raises(ZooError, match=message) as e:
            SequenceClassifier(tiny_encoder, pretrained=value, label_names=["a", "b", "c"])
        assert str(e.value).startswith("task.module.pretrained") and "\n" not in str(e.value)


def test_a_resume_reads_neither_the_source_nor_the_encoders_weights(source, tiny_encoder, tmp_path):
    """`zoo train` builds a resumed run inside resumed_from: the architecture comes from its checkpoint (as
    load_from_checkpoint has it) and the `pretrained` file it began from is not read (it may be gone since)."""
    from zoo.core.resume import resumed_from

    src, _, _ = source
    value = save(src, tmp_path / "moved.ckpt")
    m = SequenceClassifier(tiny_encoder, pretrained=value, label_names=["a", "b", "c"])
    run: dict = {"state_dict": m.state_dict(), "hyper_parameters": dict(m.hparams)}
    PretrainedReport().on_save_checkpoint(None, m, run)
    torch.save(run, tmp_path / "last.ckpt")
    Path(value).unlink()
    with pytest.raises(ZooError, match="not found"):
        SequenceClassifier(tiny_encoder, pretrained=value, label_names=["a", "b", "c"])
    with resumed_from(str(tmp_path / "last.ckpt")):
        again = SequenceClassifier(tiny_encoder, pretrained=value, label_names=["a", "b", "c"])
    assert again.hparams.encoder_config == m.hparams.encoder_config and again.hparams.pretrained == value
    assert again.pretrained_report == run["pretrained_report"]
    again.load_state_dict(m.state_dict())
