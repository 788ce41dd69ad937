"""Free Spoken Digit Dataset (FSDD) straight from its folder of `{digit}_{speaker}_{index}.wav` files.

Leave-one-speaker-out (`holdout_speaker=<name>`, or a list of names: all of them are the test set): the held-out
speakers' every file is the test set; the other
speakers' files with index < `val_below` (FSDD's own test split) are the validation set, the rest train. Model
selection therefore never hears the test voice, and test/acc measures how well the model hears a new person.
No manifest is written anywhere: the rows are read from the file names.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from zoo.errors import ZooError

from .audio import probe_usable
from .data import SpeechDataModule
from .manifest import Utterance, report_skips

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
_FILE = re.compile(r"^(\d)_([A-Za-z]+)_(\d+)\.wav$")


def scan(root: str) -> list[tuple[str, int, str, int]]:
    """(path, digit, speaker, index) of every FSDD-named wav under root (not recursive), sorted by name."""
    folder = Path(os.path.expanduser(root))
    if not folder.is_dir():
        raise ZooError(f"FSDD folder not found: {folder}; set task.data.root to the folder of "
                       "{digit}_{speaker}_{index}.wav files (e.g. free-spoken-digit-dataset/recordings)")
    out = []
    for name in sorted(os.listdir(folder)):
        m = _FILE.match(name)
        if m:
            out.append((str(folder / name), int(m.group(1)), m.group(2), int(m.group(3))))
    if not out:
        raise ZooError(f"no FSDD files named {{digit}}_{{speaker}}_{{index}}.wav in {folder}")
    return out


class FSDDDataModule(SpeechDataModule):
    """Speakers are whatever the file names hold; `speakers` (a list) keeps only some of them."""

    def __init__(self, root: str = "~/data/fsdd", holdout_speaker: str | list[str] | None = None, val_below: int = 5,
                 speakers: list[str] | None = None, **kwargs) -> None:
        kwargs.setdefault("in_memory", True)
        super().__init__(**kwargs)
        self.root, self.holdout, self.val_below = root, holdout_speaker, int(val_below)
        self.speakers = list(speakers) if speakers else None

    def load_rows(self) -> dict[str, list[Utterance]]:
        files = scan(self.root)
        found = sorted({s for _, _, s, _ in files})
        keep = set(self.speakers or found)
        if self.holdout is None:
            raise ZooError(f"set task.data.holdout_speaker to the speaker to test on: one of "
                           f"{', '.join(s for s in found if s in keep)}")
        held = [self.holdout] if isinstance(self.holdout, str) else [str(s) for s in self.holdout]
        unknown = [s for s in held if s not in found or s not in keep]
        if unknown or not held:
            names = ", ".join(repr(s) for s in unknown) or "[]"
            raise ZooError(f"task.data.holdout_speaker: {names} is not one of the speakers in {self.root}: "
                           f"{', '.join(s for s in found if s in keep)} (give one name or a list)")
        rows: dict[str, list[Utterance]] = {"train": [], "val": [], "test": []}
        skipped: Counter = Counter()
        example: dict[str, str] = {}
        for path, digit, speaker, index in files:
            if speaker not in keep:
                continue
            duration, reason = probe_usable(path, self.max_duration)
            if reason:
                skipped[reason] += 1
                example.setdefault(reason, path)
                continue
            split = "test" if speaker in held else ("val" if index < self.val_below else "train")
            rows[split].append(Utterance(path, float(duration), NAMES[digit]))
        report_skips(f"FSDD {self.root}", skipped, example, sum(len(r) for r in rows.values()))
        for split, got in rows.items():
            if not got:
                raise ZooError(f"FSDD {self.root}: the {split} split is empty (holdout_speaker={self.holdout}, "
                               f"val_below={self.val_below}); it needs at least two speakers")
        return rows
