"""Splits by speaker: no speaker's voice is in two splits, so validation and test scores are for unheard speakers.

A count of speakers is drawn with a fixed seed; with speaker groups (children / adults) known, each group gives its
share of the count (at least one where the group has two or more speakers), so every split holds both.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from zoo.errors import ZooError

from .manifest import Utterance


def pick_speakers(speakers: Sequence[str], count: int, seed: int, groups: dict[str, str] | None = None) -> list[str]:
    """`count` of `speakers` (sorted, distinct), drawn with `seed`; with `groups`, stratified by group."""
    pool = sorted(set(speakers))
    if not 0 < count < len(pool):
        raise ZooError(f"cannot hold out {count} of {len(pool)} speakers; give a count from 1 to {len(pool) - 1}")
    rng = random.Random(seed)
    by_group: dict[str, list[str]] = {}
    for s in pool:
        by_group.setdefault((groups or {}).get(s, ""), []).append(s)
    picked: list[str] = []
    left = count
    for i, (_, members) in enumerate(sorted(by_group.items())):
        share = left if i == len(by_group) - 1 else round(count * len(members) / len(pool))
        if len(members) > 1:
            share = max(1, share)
        share = min(share, len(members) - 1 if len(by_group) == 1 else len(members), left)
        picked += rng.sample(members, share)
        left -= share
    return sorted(picked)


def carve_speakers(rows: list[Utterance], val_speakers: int | Sequence[str], seed: int,
                   groups: dict[str, str] | None, source: str) -> tuple[list[Utterance], list[Utterance]]:
    """(train, val): the rows of `val_speakers` (a count drawn by `pick_speakers`, or the names) go to val."""
    unnamed = sum(r.speaker is None for r in rows)
    if unnamed:
        raise ZooError(f"{source}: {unnamed} lines have no speaker field; task.data.val_speakers needs one on every "
                       "line (\"speaker\": \"...\"), or give task.data.val_manifest")
    present = {r.speaker for r in rows}
    if isinstance(val_speakers, bool) or isinstance(val_speakers, str | float) or val_speakers is None:
        raise ZooError(f"task.data.val_speakers={val_speakers!r}: give a count of speakers or a list of them")
    if isinstance(val_speakers, int):
        chosen = set(pick_speakers([str(s) for s in present], val_speakers, seed, groups))
    else:
        chosen = {str(s) for s in val_speakers}
        unknown = sorted(chosen - present)
        if unknown:
            raise ZooError(f"task.data.val_speakers: {unknown} are not speakers of {source}; use names from its "
                           "speaker field")
        if chosen == present:
            raise ZooError(f"task.data.val_speakers names every speaker of {source}; leave some for training")
    train = [r for r in rows if r.speaker not in chosen]
    val = [r for r in rows if r.speaker in chosen]
    return train, val
