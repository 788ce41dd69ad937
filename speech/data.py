"""Datasets, duration-bucketed batching and the DataModules: eSpeak NG synth (default), manifest, LibriSpeech.

Every DataModule ends in the same place: a list of `Utterance` per split. The vocabulary is built from the
training transcripts (or extended from a checkpoint's for fine-tuning) and handed to the module through
`model_kwargs()`, so it lands in the checkpoint's hparams.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator, Mapping

import lightning as L
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, Sampler, SequentialSampler

from zoo.core.checkpoint import load_checkpoint
from zoo.errors import ZooError

from .audio import load_audio, resampler
from .manifest import Utterance, read_manifest
from .vocab import Vocab, normalize_text

log = logging.getLogger(__name__)


class SpeechDataset(Dataset):
    """Items: (wave (T,), text). Waves optionally cached in memory after the first read (small corpora).

    speed_perturb: factors drawn per item (training only), applied by resampling, which scales tempo, pitch and
    formants together, a cheap stand-in for new speakers (Ko et al. 2015, "Audio augmentation for speech recognition").
    """

    def __init__(self, rows: list[Utterance], sample_rate: int, in_memory: bool = False,
                 speed_perturb: list[float] | None = None, augment: torch.nn.Module | None = None) -> None:
        self.rows, self.sample_rate, self.in_memory = rows, sample_rate, in_memory
        self.speed_perturb = [float(f) for f in speed_perturb or []]
        self.augment = augment  # zoo.speech.augment.WaveAugment (training only): tilt, room, noise
        self.texts = [normalize_text(r.text) for r in rows]
        self._cache: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, str, str | None]:
        wave = self._cache.get(i)
        if wave is None:
            wave = load_audio(self.rows[i].path, self.sample_rate)
            if self.in_memory:
                self._cache[i] = wave
        if self.speed_perturb:
            factor = random.choice(self.speed_perturb)
            if factor != 1.0:  # a longer signal played at the same rate: slower and lower
                wave = resampler(self.sample_rate, int(round(self.sample_rate * factor)))(wave)
        if self.augment is not None:
            wave = self.augment(wave)
        return wave, self.texts[i], self.rows[i].speaker


class Collate:
    """Pads waves to (B, T) and encodes targets to (B, L); characters outside the vocabulary (only possible in
    val/test, the vocabulary comes from train) are dropped from the loss targets, but the raw text is kept for
    CER/WER."""

    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab

    def __call__(self, batch: list[tuple]) -> dict:
        """Items (wave, text) or (wave, text, speaker); "speakers" is None per item where none is known."""
        waves, texts = [b[0] for b in batch], [b[1] for b in batch]
        speakers = [b[2] if len(b) > 2 else None for b in batch]
        lengths = torch.tensor([len(w) for w in waves])
        wave = torch.zeros(len(waves), int(lengths.max()))
        for i, w in enumerate(waves):
            wave[i, : len(w)] = w
        ids = [[self.vocab.index[c] for c in t if c in self.vocab.index] for t in texts]
        target_lengths = torch.tensor([len(x) for x in ids])
        targets = torch.zeros(len(ids), max(1, int(target_lengths.max())), dtype=torch.long)
        for i, x in enumerate(ids):
            targets[i, : len(x)] = torch.tensor(x, dtype=torch.long)
        return {"wave": wave, "lengths": lengths, "targets": targets, "target_lengths": target_lengths,
                "texts": list(texts), "speakers": speakers}


class BucketBatchSampler(BatchSampler):
    """Batches of similar duration: indices from `sampler` are pooled (`pool` batches at a time), sorted by
    duration inside the pool, cut into batches, and the batch order shuffled. Cuts padding several-fold.

    A BatchSampler subclass taking (sampler, batch_size, drop_last) first, so under DDP Lightning can swap in its
    DistributedSampler and each rank buckets its own shard.
    """

    def __init__(self, sampler: Sampler, batch_size: int, drop_last: bool, durations: list[float] | None = None,
                 pool: int = 50, seed: int = 0) -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.durations, self.pool, self.seed, self.epoch = durations or [], pool, seed, 0

    def __iter__(self) -> Iterator[list[int]]:
        idx = list(self.sampler)
        size = self.batch_size * self.pool
        batches = []
        for start in range(0, len(idx), size):
            chunk = sorted(idx[start:start + size], key=lambda i: self.durations[i])
            batches += [chunk[j:j + self.batch_size] for j in range(0, len(chunk), self.batch_size)]
        if self.drop_last:
            batches = [b for b in batches if len(b) == self.batch_size]
        random.Random(self.seed + self.epoch).shuffle(batches)
        self.epoch += 1
        yield from batches


class SpeechDataModule(L.LightningDataModule):
    """Shared loaders; subclasses implement `load_rows()` -> {"train": [...], "val": [...], "test": [...]}.

    augment: options of `zoo.speech.augment.WaveAugment` (tilt, room, noise), drawn per training utterance.
    mix_synth: add eSpeak NG utterances to the training split (true or "espeak": the zoo's corpus at this rate;
    a dict of `zoo.speech.synth.generate` options; or a corpus folder holding train.jsonl), only those whose words all
    occur in the real training transcripts;
    mix_synth_ratio: how many per real training utterance (null: every one that fits).
    """

    def __init__(self, sample_rate: int = 16000, batch_size: int = 32, num_workers: int = 0,
                 max_duration: float | None = 20.0, in_memory: bool = False, base_vocab_from: str | None = None,
                 chars: str | None = None, speed_perturb: list[float] | None = None,
                 limit_train: int | None = None, augment: dict | None = None,
                 mix_synth: str | bool | dict | None = None, mix_synth_ratio: float | None = None) -> None:
        super().__init__()
        self.sample_rate, self.batch_size, self.num_workers = sample_rate, batch_size, num_workers
        self.max_duration, self.in_memory, self.base_vocab_from = max_duration, in_memory, base_vocab_from
        self.limit_train, self.chars, self.speed_perturb = limit_train, chars, speed_perturb
        self.augment = dict(augment) if augment else None
        self.mix_synth = dict(mix_synth) if isinstance(mix_synth, Mapping) else mix_synth
        self.mix_synth_ratio = mix_synth_ratio
        self.rows: dict[str, list[Utterance]] | None = None
        self.vocab: Vocab | None = None

    def load_rows(self) -> dict[str, list[Utterance]]:
        raise NotImplementedError

    def _build_vocab(self, train_texts: list[str] | None) -> Vocab:
        if self.chars is not None:  # a fixed character set: known without reading the data
            train_texts = [self.chars]
        if train_texts is None:
            self._ensure()
            return self.vocab
        if self.base_vocab_from:
            # Fine-tuning: the checkpoint's characters keep their output rows, new ones are appended.
            return Vocab(checkpoint_vocab(self.base_vocab_from)).extend(train_texts)
        return Vocab.build(train_texts)

    def _ensure(self) -> None:
        if self.rows is not None:
            return
        self.rows = self.load_rows()
        if self.limit_train:
            self.rows["train"] = self.rows["train"][: self.limit_train]
        if self.mix_synth:
            from .synth import mix_rows

            self.rows["train"] = self.rows["train"] + mix_rows(self.mix_synth, self.rows["train"], self.sample_rate,
                                                               self.mix_synth_ratio, self.max_duration)
        self.vocab = self._build_vocab([r.text for r in self.rows["train"]])
        for split in ("train", "val", "test"):
            oov = sorted({c for r in self.rows.get(split, []) for c in self.vocab.oov(normalize_text(r.text))})
            if oov:
                log.warning("%s transcripts contain characters outside the vocabulary %s: the model cannot emit "
                            "them, so in val/test they count as errors in CER/WER; they are left out of the CTC "
                            "targets (set task.data.chars to include them)", split, oov)

    def model_kwargs(self) -> dict:
        return {"vocab": self._build_vocab(None).tokens}

    def prepare_data(self) -> None:
        # rank 0 only (Lightning) builds a corpus to mix in; the other ranks find it finished
        if self.mix_synth in (True, "espeak") or isinstance(self.mix_synth, dict):
            from .synth import mix_corpus

            mix_corpus(self.mix_synth, self.sample_rate)

    def setup(self, stage: str | None = None) -> None:
        self._ensure()

    def _loader(self, split: str, train: bool) -> DataLoader:
        self._ensure()
        rows = self.rows.get(split) or []
        if not rows:
            raise ZooError(f"{type(self).__name__} has no {split} utterances; provide a {split} split")
        augment = None
        if train and self.augment:
            from .augment import WaveAugment

            augment = WaveAugment(self.sample_rate, **self.augment)
        ds = SpeechDataset(rows, self.sample_rate, self.in_memory, self.speed_perturb if train else None, augment)
        collate = Collate(self.vocab)
        common = {"collate_fn": collate, "num_workers": self.num_workers,
                  "persistent_workers": self.num_workers > 0}
        if train:
            sampler = BucketBatchSampler(RandomSampler(ds), self.batch_size, False, [r.duration for r in rows])
            return DataLoader(ds, batch_sampler=sampler, **common)
        # Eval: sorted by duration for little padding; order does not change the scores.
        order = sorted(range(len(rows)), key=lambda i: rows[i].duration)
        ds.rows, ds.texts = [rows[i] for i in order], [ds.texts[i] for i in order]
        return DataLoader(ds, batch_size=self.batch_size, sampler=SequentialSampler(ds), **common)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", False)

    def test_dataloader(self) -> DataLoader:
        return self._loader("test", False)


def checkpoint_vocab(path: str) -> list[str]:
    try:
        ckpt = load_checkpoint(path)
    except ZooError as e:
        raise ZooError(f"task.data.base_vocab_from: {e}") from None
    vocab = ckpt.get("hyper_parameters", {}).get("vocab")
    if not vocab:
        raise ZooError(f"{path} has no speech vocabulary in its hparams; is it a speech/ctc checkpoint?")
    return list(vocab)


class SynthDigitsDataModule(SpeechDataModule):
    """Default, offline: eSpeak NG digit/word sequences, generated once into `root` (see speech/synth.py)."""

    def __init__(self, root: str = "~/.cache/zoo/speech", num_train: int = 4000, num_val: int = 300,
                 num_test: int = 500, max_words: int = 5, seed: int = 0, **kwargs) -> None:
        kwargs.setdefault("in_memory", True)
        super().__init__(**kwargs)
        self.root, self.seed = root, seed
        self.sizes = (num_train, num_val, num_test)
        self.max_words = max_words

    def _build_vocab(self, train_texts: list[str] | None) -> Vocab:
        from .synth import DIGITS, WORDS

        # Known from the word lists: no corpus generation just to size the model.
        return super()._build_vocab([" ".join(DIGITS + WORDS)] if self.chars is None else None)

    def _generate(self):
        from .synth import generate

        return generate(self.root, self.sample_rate, *self.sizes, max_words=self.max_words, seed=self.seed)

    def prepare_data(self) -> None:
        super().prepare_data()
        self._generate()  # rank 0 only (Lightning); the others find the finished folder

    def load_rows(self) -> dict[str, list[Utterance]]:
        folder = self._generate()
        return {s: read_manifest(str(folder / f"{s}.jsonl"), self.max_duration) for s in ("train", "val", "test")}


class ManifestDataModule(SpeechDataModule):
    """A user's own data: JSON-lines manifests. val_manifest null: validation is carved from the training manifest
    by speaker (`val_speakers`: how many, or which), so no speaker is in both; test_manifest null: test = val.
    speakers: a TSV of speaker and age (speakers.tsv: `speaker<TAB>age<TAB>...`): the test's WER is then also
    reported for children (under 18) and adults, and a carved validation holds both in their share."""

    def __init__(self, train_manifest: str | None = None, val_manifest: str | None = None,
                 test_manifest: str | None = None, val_speakers: int | list | None = None,
                 speakers: str | None = None, split_seed: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        if not train_manifest:
            raise ZooError("ManifestDataModule needs task.data.train_manifest (JSON lines with audio_filepath, text)")
        if not val_manifest and not val_speakers:
            raise ZooError("ManifestDataModule needs task.data.val_manifest, or task.data.val_speakers (a count or a "
                           "list of speakers) to carve validation from the training manifest by speaker")
        self.paths = {"train": train_manifest, "val": val_manifest, "test": test_manifest or val_manifest}
        self.val_speakers, self.split_seed = val_speakers, split_seed
        self.speaker_groups = read_speaker_groups(os.path.expanduser(speakers)) if speakers else {}
        self.chosen_val_speakers: list[str] = []

    def load_rows(self) -> dict[str, list[Utterance]]:
        rows = {s: read_manifest(os.path.expanduser(p), self.max_duration) for s, p in self.paths.items() if p}
        if not self.paths["val"]:
            from .splits import carve_speakers

            rows["train"], rows["val"] = carve_speakers(rows["train"], self.val_speakers, self.split_seed,
                                                        self.speaker_groups, self.paths["train"])
            self.chosen_val_speakers = sorted({r.speaker for r in rows["val"]})
            log.info("validation: %d speakers carved from %s by task.data.val_speakers: %s",
                     len(self.chosen_val_speakers), self.paths["train"], " ".join(self.chosen_val_speakers))
            rows.setdefault("test", rows["val"])
        return rows


def read_speaker_groups(path: str) -> dict[str, str]:
    """speaker -> "children" (age under 18) or "adults", from a TSV with a header naming `speaker` and `age`."""
    import csv

    if not os.path.isfile(path):
        raise ZooError(f"task.data.speakers: {path} not found; give a TSV with speaker and age columns, or null")
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter="\t")
        if not {"speaker", "age"} <= set(reader.fieldnames or []):
            raise ZooError(f"task.data.speakers: {path} has columns {reader.fieldnames}; it needs a header with "
                           "speaker and age (tab-separated)")
        groups = {}
        for n, row in enumerate(reader, 2):
            try:
                groups[row["speaker"]] = "children" if float(row["age"]) < 18 else "adults"
            except (TypeError, ValueError):
                raise ZooError(f"task.data.speakers: {path}:{n}: age {row['age']!r} is not a number; "
                               "fix the line") from None
    return groups


class LibriSpeechDataModule(SpeechDataModule):
    """LibriSpeech through torchaudio's dataset index (audio read with soundfile, not torchaudio.load)."""

    def __init__(self, root: str = "~/.cache/zoo/librispeech", train: list[str] | None = None,
                 val: str = "dev-clean", test: str = "test-clean", download: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.root, self.download = os.path.expanduser(root), download
        self.splits = {"train": list(train or ["train-clean-100"]), "val": [val], "test": [test]}

    def prepare_data(self) -> None:
        super().prepare_data()
        for urls in self.splits.values():
            for url in urls:
                self._dataset(url)

    def _dataset(self, url: str):
        from torchaudio.datasets import LIBRISPEECH

        folder = os.path.join(self.root, "LibriSpeech", url)
        if not os.path.isdir(folder) and not self.download:
            raise ZooError(f"LibriSpeech {url} not found under {self.root}; set task.data.download=true "
                           "(needs internet) or task.data.root=<folder holding LibriSpeech/>")
        return LIBRISPEECH(self.root, url=url, download=self.download)

    def load_rows(self) -> dict[str, list[Utterance]]:
        from collections import Counter

        from .audio import probe_usable
        from .manifest import report_skips

        out = {}
        for split, urls in self.splits.items():
            rows, skipped, example = [], Counter(), {}
            for url in urls:
                ds = self._dataset(url)
                for n in range(len(ds)):
                    rel, _, text, *_ = ds.get_metadata(n)
                    path = os.path.join(self.root, "LibriSpeech", rel)
                    duration, reason = probe_usable(path, self.max_duration)
                    if reason:
                        skipped[reason] += 1
                        example.setdefault(reason, path)
                        continue
                    rows.append(Utterance(path, duration, text))
            report_skips(f"LibriSpeech {'+'.join(urls)}", skipped, example, len(rows))
            out[split] = rows
        return out
