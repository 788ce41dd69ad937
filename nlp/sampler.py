"""Length-grouped sampling and dynamic padding: short sentences are batched together, so they are not padded to
the longest sentence of the data set (or to a fixed max_length).

The sampler is a `DistributedSampler` so that Lightning keeps it under DDP (it would replace a plain sampler with its
own and lose the grouping); it shards whole batches across ranks itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import DistributedSampler


class LengthGroupedSampler(DistributedSampler):
    """Index order in which each run of `batch_size` indices has similar lengths.

    Training (shuffle=True), as in Hugging Face's `LengthGroupedSampler`: a random permutation is cut into
    mega-batches of `mega * batch_size`, each is sorted by length (longest first) and cut into batches, and the
    batches are shuffled. Evaluation (shuffle=False): one sort by length, so padding is minimal.
    Each rank gets every `num_replicas`-th batch; the last ones are padded with repeats so all ranks run the same
    number of steps (as DistributedSampler does).
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, shuffle: bool = True, num_replicas: int = 1,
                 rank: int = 0, seed: int = 0, mega: int = 50) -> None:
        # Deliberately not calling DistributedSampler.__init__: it would query torch.distributed.
        self.lengths = list(lengths)
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.seed = int(seed)
        self.mega = int(mega)
        self.epoch = 0
        self.drop_last = False
        n_batches = math.ceil(len(self.lengths) / self.batch_size)
        self.batches_per_rank = math.ceil(n_batches / self.num_replicas)

    def _batches(self) -> list[list[int]]:
        n = len(self.lengths)
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
            size = self.mega * self.batch_size
            chunks = [order[i:i + size] for i in range(0, n, size)]
            order = [i for c in chunks for i in sorted(c, key=lambda j: -self.lengths[j])]
        else:
            g = None
            order = sorted(range(n), key=lambda j: -self.lengths[j])
        batches = [order[i:i + self.batch_size] for i in range(0, n, self.batch_size)]
        # A short batch must stay last: the DataLoader re-cuts this index stream every `batch_size` indices.
        short = [batches.pop()] if batches and len(batches[-1]) < self.batch_size else []
        if self.shuffle and len(batches) > 1:
            perm = torch.randperm(len(batches), generator=g).tolist()
            batches = [batches[p] for p in perm]
        return batches + short

    def _mine(self) -> list[list[int]]:
        batches = self._batches()
        short = [batches.pop()] if batches and len(batches[-1]) < self.batch_size else []
        missing = self.batches_per_rank * self.num_replicas - len(batches) - len(short)
        # Repeats, so every rank runs the same number of steps; the short batch stays the last of its rank.
        pool = batches or short
        batches = batches + (pool * (missing // max(1, len(pool)) + 1))[:missing] + short
        return batches[self.rank::self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        for b in self._mine():
            yield from b

    def __len__(self) -> int:
        return sum(len(b) for b in self._mine())

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


def pad_batch(features: list[dict], pad_id: int, pad_to_multiple_of: int | None = None) -> dict:
    """Pad `input_ids` (and `token_type_ids`) of a list of examples to the longest one.

    Returns tensors input_ids, attention_mask (and token_type_ids), all (B, T), plus `labels` (B,) when present
    and the raw `text` strings (kept for the worst-mistakes table).
    """
    longest = max(len(f["input_ids"]) for f in features)
    if pad_to_multiple_of:
        longest = math.ceil(longest / pad_to_multiple_of) * pad_to_multiple_of
    B = len(features)
    ids = torch.full((B, longest), pad_id, dtype=torch.long)
    mask = torch.zeros((B, longest), dtype=torch.long)
    has_types = "token_type_ids" in features[0]
    types = torch.zeros((B, longest), dtype=torch.long) if has_types else None
    for i, f in enumerate(features):
        n = len(f["input_ids"])
        ids[i, :n] = torch.tensor(f["input_ids"])
        mask[i, :n] = 1
        if has_types:
            types[i, :n] = torch.tensor(f["token_type_ids"])
    batch = {"input_ids": ids, "attention_mask": mask}
    if has_types:
        batch["token_type_ids"] = types
    if "label" in features[0] and features[0]["label"] is not None:
        dtype = torch.float if isinstance(features[0]["label"], float) else torch.long
        batch["labels"] = torch.tensor([f["label"] for f in features], dtype=dtype)
    batch["text"] = [f["text"] for f in features]
    return batch
