"""Text classification / regression data: the built-in offline set, local CSV/TSV/JSONL files, or GLUE.

Texts are tokenised once in `setup` (no padding); batches are padded to their own longest example and built from
length-grouped indices (`zoo.nlp.sampler`), so an epoch of short sentences costs what short sentences cost.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from zoo.errors import ZooError
from zoo.kit.loaders import loader_options
from zoo.nlp import builtin, files, glue
from zoo.nlp.models.hub import load_tokenizer
from zoo.nlp.sampler import LengthGroupedSampler, pad_batch

log = logging.getLogger(__name__)

TASK_TYPES = ("classification", "regression")
PAIR_SEP = " <SEP> "  # how a sentence pair is shown in tables and predictions


def _sort_labels(labels: set[str]) -> list[str]:
    try:
        return sorted(labels, key=float)  # "0","1","10" in numeric order
    except ValueError:
        return sorted(labels)


def finite_label(label: Any) -> float:
    """A regression label as a float; `nan` and `inf` parse as floats but are no target (the loss becomes NaN from
    the first batch that holds one), so they are refused as any other non-number is."""
    value = float(label)
    if not math.isfinite(value):
        raise ValueError(f"{label!r} is not finite")
    return value


def tokenize(tokenizer: Any, rows: list[dict], max_length: int) -> tuple[list[dict], int]:
    """Token ids per row, truncated to `max_length`; returns (features, number of rows that were truncated).

    Features hold input_ids (and token_type_ids when the tokenizer makes them), the label and the display text.
    """
    texts = [r["text"] for r in rows]
    pairs = [r["text_pair"] for r in rows] if rows and rows[0].get("text_pair") is not None else None
    enc = tokenizer(texts, pairs, truncation=False, verbose=False)
    long = [i for i, ids in enumerate(enc["input_ids"]) if len(ids) > max_length]
    if long:
        cut = tokenizer([texts[i] for i in long], [pairs[i] for i in long] if pairs else None,
                        truncation=True, max_length=max_length)
        for key in enc.keys():
            for j, i in enumerate(long):
                enc[key][i] = cut[key][j]
    feats = []
    for i, r in enumerate(rows):
        f = {"input_ids": enc["input_ids"][i], "label": r.get("label"),
             "text": r["text"] + (PAIR_SEP + r["text_pair"] if pairs else "")}
        if "token_type_ids" in enc:
            f["token_type_ids"] = enc["token_type_ids"][i]
        feats.append(f)
    return feats, len(long)


class TextDataModule(pl.LightningDataModule):
    """Sentence (or sentence-pair) classification and regression.

    dataset: auto (files when train_file is set, else builtin) | builtin | files | glue/<task>.
    Columns are names (with header=true, or JSONL keys) or 0-based numbers (header=false).
    """

    def __init__(self, tokenizer: str, dataset: str = "auto", train_file: str | None = None,
                 val_file: str | None = None, test_file: str | None = None, format: str = "auto",
                 header: bool = False, encoding: str = "utf-8", text_column: str | int = 1,
                 text_pair_column: str | int | None = None,
                 label_column: str | int = 0, task_type: str = "classification", label_names: list | None = None,
                 max_length: int = 128, batch_size: int = 32, eval_batch_size: int = 64, group_by_length: bool = True,
                 pad_to_multiple_of: int | None = None, val_fraction: float = 0.1, builtin_size: int = 2000,
                 num_workers: int = 0, seed: int = 0) -> None:
        super().__init__()
        if task_type not in TASK_TYPES:
            raise ZooError(f"unknown task.data.task_type '{task_type}'; use classification or regression")
        if max_length < 8:
            raise ZooError(f"task.data.max_length={max_length} is too short; use at least 8 tokens (e.g. 128)")
        if dataset == "auto":
            dataset = "files" if train_file else "builtin"
        if dataset == "files" and not train_file:
            raise ZooError("task.data.dataset=files needs task.data.train_file=<path> (csv, tsv or jsonl)")
        if dataset not in ("builtin", "files") and not dataset.startswith("glue/"):
            raise ZooError(f"unknown task.data.dataset '{dataset}'; use auto, builtin, files or glue/<task>")
        self.tokenizer_name = tokenizer
        self.dataset = dataset
        self.paths = {"train": train_file, "val": val_file, "test": test_file}
        self.columns = dict(text_column=text_column, text_pair_column=text_pair_column, label_column=label_column)
        files.check_encoding(encoding)
        self.format, self.header, self.encoding = format, header, encoding
        self.task_type = task_type
        self.label_names = [str(x) for x in label_names] if label_names else None
        self.metrics = ["acc"] if task_type == "classification" else ["pearson", "spearman"]
        self.max_length, self.batch_size, self.eval_batch_size = max_length, batch_size, eval_batch_size
        self.group_by_length, self.pad_to_multiple_of = group_by_length, pad_to_multiple_of
        self.val_fraction, self.builtin_size = val_fraction, builtin_size
        self.num_workers, self.seed = num_workers, seed
        self.tokenizer = None
        self.rows: dict[str, list[dict]] = {}
        self.features: dict[str, list[dict]] = {}
        self.truncated: dict[str, int] = {}
        self._load_rows()  # reading files early: a bad file fails before any model is built

    # --- raw rows -------------------------------------------------------------------------------------------------
    def _load_rows(self) -> None:
        if self.dataset == "builtin":
            n = int(self.builtin_size)
            self.rows = {"train": builtin.generate("train", n, self.seed),
                         "val": builtin.generate("val", n // 4, self.seed),
                         "test": builtin.generate("test", n // 4, self.seed)}
            self.label_names = self.label_names or list(builtin.LABELS)
        elif self.dataset.startswith("glue/"):
            name = self.dataset.split("/", 1)[1]
            spec = glue.spec(name)
            self.task_type = "classification" if spec.labels else "regression"
            self.metrics = list(spec.metrics)
            self.label_names = list(spec.labels) or None
            return  # downloaded in prepare_data (rank 0), read from the cache in setup: label names are known already
        else:
            label = self.columns["label_column"]
            for split, path in self.paths.items():
                if path:
                    self.rows[split] = files.read_rows(path, self.format, self.header, self.columns["text_column"],
                                                       self.columns["text_pair_column"], label, self.encoding)
            if "val" not in self.rows:
                self._split_val()
        self._check_labels()

    def _split_val(self) -> None:
        import random

        train = list(self.rows["train"])
        random.Random(self.seed).shuffle(train)
        n_val = max(1, int(len(train) * self.val_fraction))
        if len(train) - n_val < 1:
            raise ZooError(f"{self.paths['train']} has {len(train)} example(s): too few to hold out validation; "
                           "add examples or set task.data.val_file")
        self.rows["val"], self.rows["train"] = train[:n_val], train[n_val:]
        log.info("no val_file: holding out %d of %d training examples for validation", n_val, len(train))

    def _where(self, split: str, i: int, row: dict) -> str:
        path = self.paths.get(split)
        return f"{path}:{row['line']}" if path and "line" in row else f"{split} example {i + 1}"

    def _check_labels(self) -> None:
        if self.task_type == "regression":
            for split, rows in self.rows.items():
                for i, r in enumerate(rows):
                    try:
                        r["label"] = finite_label(r["label"])
                    except (TypeError, ValueError):
                        raise ZooError(f"{self._where(split, i, r)}: label {r['label']!r} is not a number; regression "
                                       "needs numeric labels (or set task.data.task_type=classification)") from None
            self.label_names = None
            return
        seen = {str(r["label"]) for r in self.rows["train"]}
        if self.label_names is None:
            if len(seen) < 2:
                raise ZooError(f"the training data has only the label(s) {sorted(seen)}; classification needs at least "
                               "two classes (check task.data.label_column)")
            self.label_names = _sort_labels(seen)
        known = set(self.label_names)
        for split, rows in self.rows.items():
            for i, r in enumerate(rows):
                if str(r["label"]) not in known:
                    raise ZooError(f"{self._where(split, i, r)}: label {r['label']!r} is not in the label set "
                                   f"{self.label_names}; fix the file or set task.data.label_names")
                r["label"] = self.label_names.index(str(r["label"]))

    def model_kwargs(self) -> dict:
        """Data-derived module arguments (they travel with the checkpoint in hparams)."""
        return {"label_names": self.label_names, "task_type": self.task_type, "metrics": list(self.metrics)}

    # --- tokenised datasets ---------------------------------------------------------------------------------------
    def prepare_data(self) -> None:
        if self.dataset.startswith("glue/"):
            glue.load(self.dataset.split("/", 1)[1])

    def setup(self, stage: str | None = None) -> None:
        if not self.rows and self.dataset.startswith("glue/"):
            self.rows = glue.load(self.dataset.split("/", 1)[1])
            self._check_labels()
        if self.tokenizer is None:
            self.tokenizer = load_tokenizer(self.tokenizer_name)
        for split, rows in self.rows.items():
            if split not in self.features:
                self.features[split], self.truncated[split] = tokenize(self.tokenizer, rows, self.max_length)
                if self.truncated[split]:
                    log.warning("%d of %d %s texts are longer than max_length=%d tokens and were truncated "
                                "(raise task.data.max_length to keep them whole)",
                                self.truncated[split], len(rows), split, self.max_length)

    def collate(self, features: list[dict]) -> dict:
        return pad_batch(features, self.tokenizer.pad_token_id or 0, self.pad_to_multiple_of)

    def _loader(self, split: str, train: bool) -> DataLoader:
        feats = self.features[split]
        bs = self.batch_size if train else self.eval_batch_size
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        lengths = [len(f["input_ids"]) for f in feats] if self.group_by_length else [0] * len(feats)
        # With group_by_length=false the lengths are all equal, so the sampler is a plain shuffle (or identity).
        sampler = LengthGroupedSampler(lengths, bs, shuffle=train, num_replicas=world, rank=rank, seed=self.seed)
        # Pinned on a CUDA trainer: Lightning's copy to the GPU is then asynchronous (non_blocking); a padded batch
        # of token ids is small (B x T int64), so pinning it in the main thread costs little when num_workers=0.
        return DataLoader(feats, batch_size=bs, sampler=sampler, collate_fn=self.collate,
                          **loader_options(trainer, self.num_workers, pin_in_main=True))

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        if "test" not in self.features:
            # The zoo tests whenever a datamodule defines test_dataloader; GLUE (unlabelled test split) and files
            # without test_file are tested on their validation data, and the log says so.
            log.warning("no test split (set task.data.test_file for one): test/* metrics are on the validation data")
            return self._loader("val", False)
        return self._loader("test", False)

    def check_model(self, module: Any) -> None:
        """The one check that a trained module fits this data (same task type, same labels in the same order).

        `zoo test/predict` calls it before building a trainer; the module's `setup` calls it for fit and resume.
        """
        hp = module.hparams
        if hp.get("task_type") != self.task_type:
            raise ZooError(f"the checkpoint does {hp.get('task_type')} but the data is {self.task_type}; "
                           "use data of the same kind as the checkpoint")
        if list(hp.get("label_names") or []) != list(self.label_names or []):
            raise ZooError(f"the checkpoint's labels {hp.get('label_names')} differ from the data's "
                           f"{self.label_names}; use data with the same label set (or set "
                           "task.data.label_names=[...] in the checkpoint's order), or fine-tune a new run from it "
                           "with task.module.pretrained=<this .ckpt>")
