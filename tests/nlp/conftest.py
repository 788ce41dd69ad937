"""Tiny encoders built on the fly: a 2-layer BERT and a WordPiece vocabulary written to a temp folder (no network)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nlp import builtin

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def vocabulary() -> list[str]:
    words = set()
    for split in ("train", "val"):
        for row in builtin.generate(split, 400):
            words.update(row["text"].split())
    words.update("a b c d e f g h i j k l m n o p q r s t u v w x y z 0 1 2 3 4 5 6 7 8 9 ##s ##ing ##ed".split())
    words.update(["fine", "movie", "plot", "love", "hate", "same", "different", "cat", "dog", "sat", "on", "mat", "."])
    return SPECIAL + sorted(words)


def build_tiny_encoder(path: Path, layers: int = 2) -> Path:
    from transformers import BertConfig, BertModel, BertTokenizer

    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(vocabulary()) + "\n")
    tok = BertTokenizer(vocab_file=str(path / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(path)
    config = BertConfig(vocab_size=len(vocabulary()), hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> str:
    return str(build_tiny_encoder(tmp_path_factory.mktemp("tiny_bert")))
