"""Random token sequences of a fixed length, for measuring speed without data, tokenizer or network (`zoo bench` on
a machine with none): `task.data._target_=zoo.nlp.synthetic.SyntheticTextDataModule task.data.max_length=128`, with an
encoder folder from `write_encoder` and `task.module.pretrained=false` (random init: the same speed).

Every position is a real token (attention mask all ones), so tokens/s counts every slot. A few batches are made once
and served again and again, kept on the trainer's GPU (or pinned once), so the loader adds no copy per step.
Accepts (and ignores) the other keys of the task's data config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

from zoo.kit.loaders import pool_placement

# Architectures by name (Hugging Face BertConfig fields): BERT-base (Devlin et al. 2019), and a tiny one for dry runs.
ENCODERS = {
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128),
}


def write_encoder(path: str | Path, preset: str = "bert-base", vocab_size: int = 30522) -> Path:
    """A folder with a BERT config.json only (no weights, no tokenizer): what `task.module.encoder=<folder>
    task.module.pretrained=false` builds from random init, offline."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "bert", "architectures": ["BertForSequenceClassification"], "vocab_size": vocab_size,
              "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, **ENCODERS[preset]}
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


class _Batches(Dataset):
    def __init__(self, pool: list[dict], length: int) -> None:
        self.pool, self.length = pool, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict:
        return self.pool[i % len(self.pool)]


def _placed(batch: dict, placement: str, device: torch.device | None) -> dict:
    if placement == "cpu":
        return batch
    move = (lambda t: t.to(device)) if placement == "device" else (lambda t: t.pin_memory())
    return {k: move(v) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


class SyntheticTextDataModule(pl.LightningDataModule):
    def __init__(self, max_length: int = 128, batch_size: int = 32, vocab_size: int = 30522, num_labels: int = 2,
                 batches: int = 100_000, pool: int = 4, seed: int = 0, **_: Any) -> None:
        super().__init__()
        self.max_length, self.batch_size, self.vocab_size = int(max_length), int(batch_size), int(vocab_size)
        self.label_names = [str(i) for i in range(int(num_labels))]
        self.batches, self.pool_size, self.seed = int(batches), int(pool), int(seed)
        self.tokenizer = None  # ids are made directly; nothing to tokenize
        self.pool: list[dict] | None = None
        self.placement: str | None = None

    def model_kwargs(self) -> dict:
        return {"label_names": self.label_names, "task_type": "classification", "metrics": ["acc"]}

    def _batch(self, g: torch.Generator) -> dict:
        b, t = self.batch_size, self.max_length
        ids = torch.randint(1000, self.vocab_size, (b, t), generator=g)  # (B, T), clear of the special tokens
        return {"input_ids": ids, "attention_mask": torch.ones(b, t, dtype=torch.long),
                "token_type_ids": torch.zeros(b, t, dtype=torch.long),
                "labels": torch.randint(0, len(self.label_names), (b,), generator=g), "text": [""] * b}

    def _pool(self) -> list[dict]:
        """The batches, made once for every loader (train and val share them) and placed once."""
        if self.pool is None:
            g = torch.Generator().manual_seed(self.seed)
            trainer = self.trainer
            device = trainer.strategy.root_device if trainer is not None else None
            self.placement = pool_placement(device, torch.cuda.is_available())
            self.pool = [_placed(self._batch(g), self.placement, device) for _ in range(self.pool_size)]
        return self.pool

    def _loader(self, batches: int) -> DataLoader:
        # pin_memory=False: the pool is placed once (pool_placement), the loader adds no copy per batch
        return DataLoader(_Batches(self._pool(), batches), batch_size=None, pin_memory=False)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.batches)

    def val_dataloader(self) -> DataLoader:
        return self._loader(2)
