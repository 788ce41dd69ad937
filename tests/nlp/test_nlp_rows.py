"""Rows of local text files that used to be read wrong without a word: a word header above word labels, and CSV rows
with more (or fewer) fields than the header."""

from __future__ import annotations

import logging

import pytest

from zoo.errors import ZooError
from zoo.nlp.data import TextDataModule
from zoo.nlp.files import read_rows


def test_a_word_header_above_word_labels_is_refused(tmp_path):
    """`label<TAB>sentence` above pos/neg rows trained with label_names ['label', 'neg', 'pos']."""
    train = tmp_path / "h.tsv"
    train.write_text("label\tsentence\npos\tgood film\nneg\tbad film\npos\tnice\nneg\tdull\n")
    with pytest.raises(ZooError, match=r"h.tsv:1: the first line looks like a header .*task.data.header=true") as e:
        TextDataModule("unused-tokenizer", train_file=str(train))
    assert "'label' names a column" in str(e.value) and "\n" not in str(e.value)
    assert TextDataModule("unused-tokenizer", train_file=str(train), header=True).label_names == ["neg", "pos"]
    # a header whose text column is named, with another label word
    (tmp_path / "s.tsv").write_text("sentiment\ttext\npos\tgood\nneg\tbad\n")
    with pytest.raises(ZooError, match="looks like a header"):
        read_rows(tmp_path / "s.tsv", text_column=1, label_column=0)
    # word labels without a header, and a first label that occurs again, are data
    (tmp_path / "w.tsv").write_text("pos\tlabel me\nneg\tb\npos\tc\n")
    assert [r["label"] for r in read_rows(tmp_path / "w.tsv", text_column=1, label_column=0)] == ["pos", "neg", "pos"]


def test_a_csv_row_with_more_fields_keeps_its_text_once_said(tmp_path, caplog):
    """`1,a gorgeous, witty movie 23` under `label,text` was cut to `a gorgeous`: in a label,text file the rest of
    the line is the text, said once for the file."""
    path = tmp_path / "c.csv"
    path.write_text("label,text\n1,\"quoted, fine\"\n1,a gorgeous, witty movie 23\n0,dull\n0,flat, grey, long\n")
    with caplog.at_level(logging.WARNING, logger="zoo.nlp.files"):
        rows = read_rows(path, header=True, text_column="text", label_column="label")
    assert [r["text"] for r in rows] == ["quoted, fine", "a gorgeous, witty movie 23", "dull", "flat, grey, long"]
    warned = [r.getMessage() for r in caplog.records if "more fields" in r.getMessage()]
    assert len(warned) == 1 and "2 line(s)" in warned[0] and "first: line 3" in warned[0]


@pytest.mark.parametrize("content, line, fields", [
    ("id,label,text,extra\n1,1,a gorgeous, witty movie 23,x\n2,0,dull,y\n", 2, 5),  # the text is not the last column
    ("label,text\n1\n0,dull\n", 2, 1),  # fewer fields than the header
])
def test_a_row_whose_field_count_differs_is_an_error_with_its_line(tmp_path, content, line, fields):
    path = tmp_path / "d.csv"
    path.write_text(content)
    with pytest.raises(ZooError) as e:
        read_rows(path, header=True, text_column="text", label_column="label")
    assert f"d.csv:{line}: {fields} field(s), but the header has" in str(e.value) and "\n" not in str(e.value)


def test_without_a_header_most_lines_set_the_field_count(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("0,a,x\n1,b,y\n1,c\n")
    with pytest.raises(ZooError, match=r"n.csv:3: 2 field\(s\), but most lines have 3"):
        read_rows(path, text_column=1, label_column=0)
