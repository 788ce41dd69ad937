"""Tiny encoders built on the fly: a 2-layer BERT and a WordPiece vocabulary written to a temp folder (no network)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test files import nlp_helpers too
from nlp_helpers import build_tiny_encoder, keyword_rows, write_tsv  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    # Tiny models on a shared 2-core machine: two OpenMP threads spin-wait on each other (20x slower when busy).
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> str:
    return str(build_tiny_encoder(tmp_path_factory.mktemp("tiny_bert")))


@pytest.fixture
def keyword_files(tmp_path) -> tuple[Path, Path]:
    return (write_tsv(tmp_path / "train.tsv", keyword_rows(256, 0)),
            write_tsv(tmp_path / "dev.tsv", keyword_rows(64, 1)))
