"""nlp data: file readers, tokenisation + dynamic padding, length-grouped sampling, the built-in set, bad input."""

from __future__ import annotations

import json

import pytest
import torch
from nlp_helpers import keyword_rows, write_tsv

from zoo.errors import ZooError
from zoo.nlp import builtin
from zoo.nlp.data import TextDataModule, tokenize
from zoo.nlp.files import read_rows
from zoo.nlp.sampler import LengthGroupedSampler, pad_batch


def test_readers_csv_header_tsv_no_header_jsonl(tmp_path):
    (tmp_path / "a.csv").write_text('sentence,other,label\n"hello, world",x,pos\nbye,y,neg\n')
    rows = read_rows(tmp_path / "a.csv", header=True, text_column="sentence", label_column="label")
    assert [(r["text"], r["label"]) for r in rows] == [("hello, world", "pos"), ("bye", "neg")]
    write_tsv(tmp_path / "b.tsv", [("1", "it 's \"quoted\" here"), ("0", "plain")])
    rows = read_rows(tmp_path / "b.tsv", header=False, text_column=1, label_column=0)
    assert rows[0]["text"] == 'it \'s "quoted" here' and rows[1]["label"] == "0"
    (tmp_path / "c.jsonl").write_text(json.dumps({"q": "a", "p": "b", "y": 0.5}) + "\n\n"
                                      + json.dumps({"q": "c", "p": "d", "y": 1}))
    rows = read_rows(tmp_path / "c.jsonl", text_column="q", text_pair_column="p", label_column="y")
    assert [(r["text"], r["text_pair"], r["label"]) for r in rows] == [("a", "b", "0.5"), ("c", "d", "1")]


@pytest.mark.parametrize("content, kwargs, message", [
    ("", {}, "has no examples"),
    ("only one column\n", {"text_column": 1, "label_column": 0}, r"has 1 column\(s\)"),
    ("text\tlabel\nhi\tpos\n", {"header": True, "text_column": "sentence", "label_column": "label"},
     "no text column 'sentence'"),
    ("1\thi\n", {"text_column": "sentence", "label_column": 0}, "is a name but task.data.header=false"),
    ("1\t\n0\t\n", {"text_column": 1, "label_column": 0}, "has no examples with text"),
    ("\thi\n", {"text_column": 1, "label_column": 0}, "has no label"),
])
def test_malformed_files_fail_with_one_clear_line(tmp_path, content, kwargs, message):
    (tmp_path / "f.tsv").write_text(content)
    with pytest.raises(ZooError, match=message) as e:
        read_rows(tmp_path / "f.tsv", **kwargs)
    assert "\n" not in str(e.value)


def test_missing_file_and_bad_json(tmp_path):
    with pytest.raises(ZooError, match="data file not found"):
        read_rows(tmp_path / "nope.tsv")
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "label": 1}\n{not json\n')
    with pytest.raises(ZooError, match=r"bad.jsonl:2: not valid JSON"):
        read_rows(tmp_path / "bad.jsonl", text_column="text", label_column="label")


def test_empty_texts_are_skipped_and_counted(tmp_path, caplog):
    write_tsv(tmp_path / "t.tsv", [("1", "good"), ("0", ""), ("0", "bad")])
    rows = read_rows(tmp_path / "t.tsv", text_column=1, label_column=0)
    assert [r["text"] for r in rows] == ["good", "bad"]
    assert "skipped 1 example(s) with an empty text (line 2" in caplog.text


def test_labels_inferred_sorted_and_unknown_labels_rejected(tmp_path, tiny_encoder):
    train = write_tsv(tmp_path / "train.tsv", keyword_rows(20))
    dm = TextDataModule(tiny_encoder, train_file=str(train))
    assert dm.model_kwargs() == {"label_names": ["neg", "pos"], "task_type": "classification", "metrics": ["acc"]}
    assert len(dm.rows["val"]) == 2 and len(dm.rows["train"]) == 18  # val_fraction=0.1 held out
    dev = write_tsv(tmp_path / "dev.tsv", [("pos", "love it"), ("meh", "so so")])
    with pytest.raises(ZooError, match=r"dev.tsv:2: label 'meh' is not in the label set \['neg', 'pos'\]"):
        TextDataModule(tiny_encoder, train_file=str(train), val_file=str(dev))
    with pytest.raises(ZooError, match="not a number; regression"):
        TextDataModule(tiny_encoder, train_file=str(train), task_type="regression")
    one = write_tsv(tmp_path / "one.tsv", [("pos", "a"), ("pos", "b")])
    with pytest.raises(ZooError, match="at least two classes"):
        TextDataModule(tiny_encoder, train_file=str(one))


@pytest.mark.parametrize("word", ["nan", "inf", "-Infinity"])
def test_a_regression_label_that_is_not_finite_is_refused(tmp_path, tiny_encoder, word):
    """float() reads `nan` and `inf` as numbers: one such label made every loss NaN from its first batch."""
    rows = [(str(i % 5), f"text {i}") for i in range(20)]
    rows[7] = (word, "text 7")
    train = write_tsv(tmp_path / "train.tsv", rows)
    with pytest.raises(ZooError, match=rf"train.tsv:8: label '{word}' is not a number; regression"):
        TextDataModule(tiny_encoder, train_file=str(train), task_type="regression")


def test_tokenize_truncates_and_counts(tiny_encoder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    rows = [{"text": "the cat sat", "text_pair": None, "label": 0},
            {"text": " ".join(["dog"] * 40), "text_pair": None, "label": 1}]
    feats, truncated = tokenize(tok, rows, max_length=16)
    assert truncated == 1
    assert len(feats[0]["input_ids"]) == 5 and len(feats[1]["input_ids"]) == 16
    assert feats[1]["input_ids"][-1] == tok.sep_token_id  # truncation keeps [SEP]


def test_pairs_get_segment_ids_and_batches_pad_to_their_longest(tiny_encoder):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder)
    rows = [{"text": "the cat", "text_pair": "a dog sat on the mat", "label": 1},
            {"text": "cat", "text_pair": "dog", "label": 0}]
    feats, _ = tokenize(tok, rows, max_length=64)
    assert feats[0]["token_type_ids"].count(1) == 7  # "a dog sat on the mat [SEP]"
    assert feats[0]["text"] == "the cat <SEP> a dog sat on the mat"
    batch = pad_batch(feats, tok.pad_token_id)
    assert batch["input_ids"].shape == (2, 11)  # [CLS] 2 [SEP] 6 [SEP]: the longest, not max_length
    assert batch["attention_mask"].sum(1).tolist() == [11, 5]
    assert batch["input_ids"][1, 5:].eq(tok.pad_token_id).all()
    assert batch["labels"].dtype == torch.long
    float_batch = pad_batch([dict(f, label=float(f["label"])) for f in feats], 0, pad_to_multiple_of=8)
    assert float_batch["labels"].dtype == torch.float and float_batch["input_ids"].shape[1] == 16


def test_length_grouped_sampler_covers_everything_and_cuts_padding():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 60, (1000,), generator=g).tolist()
    s = LengthGroupedSampler(lengths, batch_size=32, shuffle=True, mega=10)
    order = list(s)
    assert sorted(order) == list(range(1000))
    batches = [order[i:i + 32] for i in range(0, 1000, 32)]
    assert len(batches[-1]) == 1000 % 32  # the short batch stays last

    def padded(bs):
        return sum(len(b) * max(lengths[i] for i in b) for b in bs)

    rand = torch.randperm(1000, generator=g).tolist()
    assert padded(batches) < 0.7 * padded([rand[i:i + 32] for i in range(0, 1000, 32)])
    s.set_epoch(1)
    assert list(s) != order  # reshuffled per epoch


def test_length_grouped_sampler_shards_equally_across_ranks():
    lengths = list(range(100))
    shards = [list(LengthGroupedSampler(lengths, 8, shuffle=True, num_replicas=3, rank=r)) for r in range(3)]
    assert len({len(s) // 8 + (len(s) % 8 > 0) for s in shards}) == 1  # same number of steps on every rank
    assert set().union(*map(set, shards)) == set(range(100))
    evals = [list(LengthGroupedSampler(lengths, 8, shuffle=False, num_replicas=2, rank=r)) for r in range(2)]
    assert set(evals[0]) | set(evals[1]) == set(range(100))


def test_builtin_set_is_deterministic_and_holds_out_sentiment_words():
    train, val = builtin.generate("train", 300), builtin.generate("val", 100)
    assert train == builtin.generate("train", 300)
    train_words = {w for r in train for w in r["text"].split()}
    held = set(builtin.POSITIVE["heldout"]) | set(builtin.NEGATIVE["heldout"])
    assert not train_words & held
    assert all(any(w in held for w in r["text"].split()) for r in val)
    assert {r["label"] for r in train} == {"negative", "positive"}
    negated = [r for r in train if " not " in f" {r['text']} " or "far from" in r["text"]]
    assert 0.1 < len(negated) / len(train) < 0.3


def test_datamodule_loaders_use_grouping_and_expose_text(tiny_encoder):
    dm = TextDataModule(tiny_encoder, builtin_size=200, batch_size=16)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["input_ids"].shape[0] == 16 and len(batch["text"]) == 16
    assert set(batch["labels"].tolist()) <= {0, 1}
    assert len(dm.features["val"]) == 50 and dm.truncated["train"] == 0
    with pytest.raises(ZooError, match="unknown task.data.dataset"):
        TextDataModule(tiny_encoder, dataset="imdb")
    with pytest.raises(ZooError, match="needs task.data.train_file"):
        TextDataModule(tiny_encoder, dataset="files")
    with pytest.raises(ZooError, match="unknown GLUE task 'sst5'"):
        TextDataModule(tiny_encoder, dataset="glue/sst5")
    glue = TextDataModule(tiny_encoder, dataset="glue/stsb")  # nothing downloaded at construction
    assert glue.model_kwargs() == {"label_names": None, "task_type": "regression", "metrics": ["pearson", "spearman"]}


def test_header_read_as_data_is_refused(tmp_path):
    """A 'label<TAB>sentence' header with header=false is refused (read as data it would become a third class
    'label'); word labels and numeric files whose first label recurs are not mistaken for a header."""
    train = write_tsv(tmp_path / "h.tsv", [("label", "sentence")] + [(str(i % 2), f"text {i}") for i in range(8)])
    with pytest.raises(ZooError, match=r"h.tsv:1: the first line looks like a header .*task.data.header=true") as e:
        TextDataModule("unused-tokenizer", train_file=str(train))
    assert "\n" not in str(e.value)
    dm = TextDataModule("unused-tokenizer", train_file=str(train), header=True)  # the fix the message names
    assert dm.label_names == ["0", "1"]
    # Not a header: word labels, or a numeric file whose first label occurs again.
    words = write_tsv(tmp_path / "w.tsv", [("neg", "a"), ("pos", "b"), ("pos", "c")])
    assert [r["label"] for r in read_rows(words, text_column=1, label_column=0)] == ["neg", "pos", "pos"]
    nums = write_tsv(tmp_path / "n.tsv", [("2", "a"), ("0", "b"), ("2", "c")])
    assert len(read_rows(nums, text_column=1, label_column=0)) == 3
    # A UTF-8 byte-order mark is not part of the first label (nor a reason to call the first line a header).
    (tmp_path / "bom.tsv").write_bytes("\ufeff0\ta\n1\tb\n".encode("utf-8"))
    assert [r["label"] for r in read_rows(tmp_path / "bom.tsv", text_column=1, label_column=0)] == ["0", "1"]


@pytest.mark.parametrize("name, content", [
    ("latin.tsv", "1\tgood\n0\tna\u00efve caf\u00e9\n"),
    ("latin.jsonl", '{"text": "good", "label": 1}\n{"text": "na\u00efve caf\u00e9", "label": 0}\n'),
])
def test_non_utf8_file_is_one_line_with_line_and_offset(tmp_path, name, content):
    """A latin-1 file is one error line naming the line and byte offset and task.data.encoding (not a multi-line
    Hydra error that prints the whole file); with encoding=latin-1 it reads."""
    path = tmp_path / name
    path.write_bytes(content.encode("latin-1"))
    offset = content.encode("latin-1").index(b"\xef")
    cols = {"text_column": "text", "label_column": "label"} if name.endswith("jsonl") else {}
    with pytest.raises(ZooError) as e:
        TextDataModule("unused-tokenizer", train_file=str(path), **cols)
    msg = str(e.value)
    assert f"{path}:2: byte offset {offset} (0xef)" in msg and "task.data.encoding=" in msg and "\n" not in msg
    dm = TextDataModule("unused-tokenizer", train_file=str(path), val_file=str(path), encoding="latin-1", **cols)
    assert [r["text"] for r in dm.rows["train"]] == ["good", "na\u00efve caf\u00e9"]
    with pytest.raises(ZooError, match="unknown task.data.encoding 'klingon'"):
        TextDataModule("unused-tokenizer", train_file=str(path), encoding="klingon", **cols)


def test_predict_reads_standard_input_with_dash(monkeypatch):
    import io

    from zoo.nlp.predict import read_inputs

    stdin = io.TextIOWrapper(io.BytesIO(b"first text, with commas\n\nsecond\tits pair\n"), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    assert read_inputs("-") == [("first text, with commas", None), ("second", "its pair")]
