"""Helpers for the nlp tests: a tiny 2-layer BERT with its own WordPiece vocabulary, and keyword data files."""

from __future__ import annotations

from pathlib import Path

from zoo.nlp import builtin

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
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(vocabulary()) + "\n")
    # transformers 5 takes `vocab` (a path or a dict); the old `vocab_file=` keyword is silently ignored.
    tok = BertTokenizer(vocab=str(path / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(path)
    config = BertConfig(vocab_size=len(vocabulary()), hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=128)
    torch.manual_seed(0)  # the same tiny encoder every time (a 32-wide one sometimes stuck at chance)
    BertModel(config).save_pretrained(path)
    return path


def keyword_rows(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """(label, sentence): the label is given away by one keyword among neutral words, so a tiny model learns it."""
    import random

    rng = random.Random(seed)
    neutral = ["the", "cat", "dog", "sat", "on", "mat", "movie", "plot", "a", "same"]
    rows = []
    for _ in range(n):
        label = rng.choice(["neg", "pos"])
        words = [rng.choice(neutral) for _ in range(rng.randint(3, 12))]
        words.insert(rng.randrange(len(words) + 1), "love" if label == "pos" else "hate")
        rows.append((label, " ".join(words)))
    return rows


def write_tsv(path: Path, rows: list[tuple]) -> Path:
    path.write_text("".join("\t".join(map(str, r)) + "\n" for r in rows))
    return path
