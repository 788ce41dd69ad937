"""Preset names across renames: what an `experiment=` recorded by an older run means today.

A preset's short name is its job's best measured recipe, so a name can pass to another recipe (`rl_hopper` was
rl-baselines3-zoo's Hopper entry, now `rl_hopper_rlzoo`; the name went to the recipe that reaches the aim). A run
records its overrides by name, so every checkpoint and run record also carries the presets' `GENERATION` (key
`presets`; none before the first rename: 0). Its overrides are replayed (resume, test, predict, export, a continued
sweep, reproduce) through `recorded_overrides`, which renames each `experiment=` through every step made since: an old
`rl_hopper` run resumes as `rl_hopper_rlzoo`, with its own recipe, never with the one that holds the name today.
A name typed today that no longer exists gets one line naming its successor (`renamed_preset`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from zoo.core.overrides import override_key, unquote
from zoo.errors import ZooError

# The presets' generation that new checkpoints and run records carry: add a step to RENAMES, then raise this to it.
GENERATION = 2

# generation -> {name before that step: name after it}. One step maps all of its names at once, never one after
# another: in step 1 `rl_hopper` became `rl_hopper_rlzoo` while `rl_mujoco_hopper` became `rl_hopper`.
RENAMES: dict[int, dict[str, str]] = {
    1: {
        "rl_hopper": "rl_hopper_rlzoo",
        "rl_walker2d": "rl_walker2d_rlzoo",
        "rl_mujoco_hopper": "rl_hopper",
    },
    2: {
        "speech_fsdd_whisper": "speech_fsdd",
        "speech_fsdd": "speech_fsdd_manifests",
        "speech_fsdd_loso": "speech_fsdd_scratch",
        "speech_finetune": "speech_scratch_finetune",
        "speech_wav2vec2": "speech_librispeech_wav2vec2",
    },
}


# The preset `zoo list` marks as each family's recommended start: its best measured recipe for the commonest job.
# gan has none: no gan preset was measured here, the default task (task=gan/dcgan) was.
RECOMMENDED = {"vision": "vision_imagefolder", "nlp": "nlp_cr", "rl": "rl_hopper", "speech": "speech_fsdd"}


def recorded_overrides(record: Mapping[str, Any], source: str = "the checkpoint's recorded overrides",
                       args: Iterable[str] | None = None) -> list[str]:
    """A checkpoint's or run record's overrides (its `overrides`, written at generation `presets`) in today's names.
    They are artifact data: one line when they name code outside the allow-list (zoo.core.trust), unless the user
    opted in on this command line (`args`, else the process's own); an opt-in recorded there is never carried."""
    from zoo.core import trust

    listed = (record.get("overrides") or []) if isinstance(record, Mapping) else None
    if not isinstance(listed, (list, tuple)):
        raise ZooError(f"{source} are not a list; this is not a zoo record (or it was edited): retrain, or pass "
                       "task=<domain>/<name> and the task's pretrained=<file> option to start from its weights")
    overrides = [str(o) for o in listed if override_key(str(o)) != trust.OPT_IN]
    trust.check_overrides(overrides, source, args)
    since = record.get("presets")
    generation = since if isinstance(since, int) else 0
    for step in sorted(s for s in RENAMES if s > generation):
        overrides = [_renamed(o, RENAMES[step]) for o in overrides]
    return overrides


def _renamed(override: str, table: Mapping[str, str]) -> str:
    if override_key(override) != "experiment":
        return override
    key, _, value = override.partition("=")
    name = unquote(value)
    return f"{key}={table[name]}" if name in table else override


def current_name(name: str, since: int = 0) -> str:
    """The name that a preset called `name` at generation `since` has today."""
    for step in sorted(s for s in RENAMES if s > since):
        name = RENAMES[step].get(name, name)
    return name


def renamed_preset(group: str, name: str) -> str | None:
    """One line for `experiment=<name>` when no preset has that name any more but an earlier one had: its new name.
    None for any other name (the caller says "unknown")."""
    if group != "experiment":
        return None
    for step in sorted(RENAMES, reverse=True):  # the newest step that renamed it
        if name in RENAMES[step]:
            new = current_name(RENAMES[step][name], step)
            return (f"experiment={name} is now experiment={new} (presets are named for the recipe that does their "
                    f"job best; a checkpoint trained with the old name keeps its own recipe)")
    return None
