"""Override strings as the zoo reads them itself: a key's value, merging, what a resume carries over."""

from __future__ import annotations


def override_value(overrides: list[str], key: str) -> str | None:
    for o in overrides:
        k, sep, v = o.partition("=")
        if sep and k.lstrip("+") == key:
            return v.strip("'\"")
    return None


# Where a run lives (its log and checkpoint folders), never a value to carry or pin: a copied run's record names the
# original's folders (pinning them trained the re-run into the original, over its checkpoints), and a checkpoint from
# someone else could name any folder to write into.
LOCATION_KEYS = ("save_dir", "dirpath", "default_root_dir", "log_dir", "output_dir", "weights_save_path")


def is_location(key: str) -> bool:
    """A key naming a folder the run writes into (`logger.tensorboard.save_dir`, `callbacks.*.dirpath`)."""
    return key.split(".")[0] in ("run_dir", "hydra") or key.rpartition(".")[2] in LOCATION_KEYS


def carried_overrides(overrides: list[str]) -> list[str]:
    """Overrides of an earlier run worth re-applying: not its checkpoint, run dir, Hydra internals or the folders it
    wrote into (a resumed or evaluated run writes into its own folder; a folder typed again on the command line is the
    user's and applies).

    A value the run added (`+a.b=v`) is re-applied as `++a.b=v` (add or replace): the config may have gained that
    key since (a preset that took the run's setting in), and a plain `+` would then refuse the run's own checkpoint.
    Config groups (`+hparams_search=...`: no dot in their name) keep `+`, as Hydra cannot force-add a group."""
    kept = [o for o in overrides if not o.lstrip("+~").startswith(("ckpt_path=", "hydra.", "run_dir="))
            and not is_location(override_key(o))]
    return [f"+{o}" if o.startswith("+") and not o.startswith("++") and "." in override_key(o) else o for o in kept]


def unquote(value: str) -> str:
    """`'a, b'` -> `a, b`: the quoting Hydra needed, still accepted where the zoo reads the value itself."""
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value


def override_key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def merge_overrides(earlier: list[str], later: list[str]) -> list[str]:
    """Earlier overrides, then later ones, one per key (the later wins): resuming twice with
    `trainer.max_epochs=20` must not pile up copies, and a repeated `+key=` would fail to compose."""
    keys = {override_key(o) for o in later}
    return [o for o in earlier if override_key(o) not in keys] + list(later)
