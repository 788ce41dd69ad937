"""Resume: `ckpt_path=last|<run dir>|<file>`, checked before Hydra writes anything, and launcher restarts."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from zoo.core.naming import output_root
from zoo.core.overrides import carried_overrides, merge_overrides, override_key, override_value
from zoo.core.presets import recorded_overrides
from zoo.errors import ZooError


def composed_task(overrides: list[str]) -> str:
    """The task these group choices select, as the composed config says (a preset may set it, not only `task=`)."""
    from zoo.core.config import compose, explain, register_resolvers

    register_resolvers()
    try:  # group choices only: one composition (the full override and value checks run once, later)
        return str(compose(overrides).task.name)
    except Exception as e:  # noqa: BLE001 - Hydra's composition errors, as one line
        raise ZooError(explain(e, overrides)) from None


def latest_run_checkpoint(task: str, pattern: str, verb: str) -> Path:
    """The newest checkpoint matching `pattern` under the task's runs: what `ckpt_path=last` means."""
    found = sorted((output_root() / task).glob(f"*/checkpoints/{pattern}"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ZooError(f"ckpt_path=last: no earlier run of {task} under {output_root() / task}; {verb} one with "
                       f"`python -m zoo train task={task}` or pass task=<domain>/<name>")
    return found[-1]


def resolve_resume(overrides: list[str]) -> list[str]:
    """`ckpt_path=last|<run dir>|<file>` -> continue that run: its overrides, its run dir, its last checkpoint.

    Everything is checked before Hydra starts, because Hydra then writes `.hydra/` into the run directory: a resume
    that would fail (another task's run, a corrupt file) must not touch that run's files.
    """
    value = override_value(overrides, "ckpt_path")
    if value is None or value in ("", "null", "None"):
        return overrides
    from zoo.core.checkpoint import checkpoint_task, find_last, load_checkpoint

    user = [o for o in overrides if override_key(o) != "ckpt_path"]
    if value == "last":
        task = composed_task([o for o in user if override_key(o) in ("task", "experiment")])
        ckpt = latest_run_checkpoint(task, "last.ckpt", "start")
    else:
        path = Path(value).expanduser()
        if path.is_dir():
            found = find_last(path)
            if found is None:
                raise ZooError(f"{path} holds no checkpoints/last.ckpt; point ckpt_path at a run directory "
                               "or a .ckpt file")
            ckpt = found
        else:
            ckpt = path
    saved = load_checkpoint(ckpt)  # fails early, in one line, on a missing or corrupt file
    task = checkpoint_task(saved, ckpt)
    ckpt = ckpt.resolve()
    run_dir = ckpt.parent.parent
    # The checkpoint carries the overrides of the run that wrote it: the run's own record, which a failed
    # later command cannot have changed.
    previous = carried_overrides(recorded_overrides(saved["zoo"], args=user))  # in today's preset names
    in_run = ckpt.parent.name == "checkpoints"
    if in_run:
        previous = replayable(previous, saved, task, user, run_dir)
    merged = merge_overrides(previous, user) if in_run else user
    # The user's own task/preset first: merged with the run's stored `task=`, that stored choice would win over a
    # preset's `override /task`, and the other task's preset values would reach this task's module.
    own, carried = ([o for o in groups if override_key(o) in ("task", "experiment")] for groups in (user, merged))
    for chosen in ([own] if own else []) + [carried]:
        asked = composed_task(chosen)
        if asked != task:
            raise ZooError(f"checkpoint {ckpt} is from task {task}, but these overrides select {asked}; resume it "
                           "without the other task's preset, or fine-tune from it with the task's pretrained option")
    if in_run:
        return merged + [f"hydra.run.dir='{run_dir}'", f"ckpt_path='{ckpt}'"]
    return user + [f"ckpt_path='{ckpt}'"]


def replayable(previous: list[str], saved: dict, task: str, user: list[str], run_dir: Path) -> list[str]:
    """The run's own overrides; where they no longer compose (a preset renamed or removed since the run began, a key
    its preset's generation had and today's config lacks), `task=<task>`, those of its overrides that still compose,
    and the config the checkpoint recorded pinned value by value on top, so that the run still resumes (as `zoo
    test` rebuilds it: zoo.core.recorded.checkpoint_overrides)."""
    from zoo.core.config import check_overrides
    from zoo.core.recorded import PER_COMMAND, composable, recorded_values, say_rebuilt

    try:
        check_overrides([*merge_overrides(previous, user), f"run_dir='{run_dir}'"], sweeps=False)
        return previous
    except ZooError as e:
        recorded = (saved.get("zoo") or {}).get("config")
        if not isinstance(recorded, dict):
            raise
        reason = str(e)
    base = [f"task={task}", f"run_dir='{run_dir}'"]
    own = [o for o in previous if override_key(o) != "task"]
    kept = composable(own, base)
    check_overrides(merge_overrides([*base, *kept], user), sweeps=False)  # the user's own mistake is theirs to read
    asked = {override_key(o) for o in user}
    pins = recorded_values(recorded, [*base, *kept], asked, not_pinned=PER_COMMAND, args=user)
    say_rebuilt(reason, len(own) - len(kept), len(pins))
    return [f"task={task}", *kept, *pins]


# What the checkpoint of a run being resumed recorded, while its module is built (`resumed_from`)
_RESUMED: ContextVar[dict | None] = ContextVar("zoo_resumed", default=None)


@contextmanager
def resumed_from(ckpt_path: str | None) -> Iterator[None]:
    """Build a resumed run's module inside this: its checkpoint replaces every tensor right after, so a module asks
    `resumed_checkpoint()` and skips reading its `pretrained` source (seconds for hub weights, and the file may be
    gone since the run began). The checkpoint is opened memory-mapped: its hyper-parameters and pretrained report
    are read, its tensors are not."""
    if not ckpt_path:
        yield
        return
    import torch

    saved = torch.load(ckpt_path, map_location="cpu", weights_only=True, mmap=True)
    token = _RESUMED.set({"hyper_parameters": dict(saved.get("hyper_parameters") or {}),
                          "pretrained_report": saved.get("pretrained_report")})
    try:
        yield
    finally:
        _RESUMED.reset(token)


def resumed_checkpoint() -> dict | None:
    """{hyper_parameters, pretrained_report} of the checkpoint the module being built resumes from, else None."""
    return _RESUMED.get()


def check_resume_task(cfg) -> str | None:  # noqa: ANN001
    """The checkpoint this job continues: `ckpt_path`, or its run's last.ckpt when a launcher restarted it."""
    restart = None if cfg.get("ckpt_path") else restart_checkpoint(Path(cfg.run_dir))
    path = cfg.get("ckpt_path") or restart
    if not path:
        return None
    from zoo.core.checkpoint import checkpoint_task, load_checkpoint

    saved = load_checkpoint(path)
    task = checkpoint_task(saved, path)
    if restart:
        logging.getLogger("zoo").warning(
            "%s already holds this job's run (a torchrun restart, a SLURM requeue, or the same job id again): "
            "continuing from %s (epoch %s, step %s)", cfg.run_dir, path, saved.get("epoch"), saved.get("global_step"))
    if task != cfg.task.name:
        raise ZooError(f"checkpoint {path} is from task {task}, not {cfg.task.name}; resume it with "
                       f"task={task}, or fine-tune from it with the task's pretrained=<file> option")
    import warnings

    for pattern in RESUME_WARNINGS:
        warnings.filterwarnings("ignore", message=pattern)
    if not restart:
        announce_resume(cfg.run_dir, Path(path), saved)
    return str(path)


# Lightning's lines about a resume that the zoo says itself, in its own words (announce_resume)
RESUME_WARNINGS = (r"Checkpoint directory .* exists and is not empty",
                   r"You're resuming from a checkpoint that ended before the epoch ended")


def announce_resume(run_dir: str, path: Path, saved: dict) -> None:
    """`zoo: resuming <run> from last.ckpt at epoch E, step S`, and what happens to an epoch cut short: Lightning
    then runs only its remaining batches, from a loader that starts that epoch afresh (a new shuffle: some of its
    examples are seen twice, others not at all); the epochs after it are whole. A module whose batches hold no data
    (PPO's, each a tick that collects a rollout) says so with `checkpoint["batches_are_examples"] = False`."""
    import sys

    from zoo.core.ddp import is_lightning_child, launcher_rank

    if is_lightning_child() or launcher_rank() != 0:
        return
    epoch, step = saved.get("epoch"), saved.get("global_step")
    print(f"zoo: resuming {run_dir} from {path.name} at epoch {epoch}, step {step}", file=sys.stderr, flush=True)
    done = batches_into_epoch(saved)
    if done and saved.get("batches_are_examples") is False:  # a module's own word: its batches hold no data
        print(f"zoo: {path.name} was saved {done} batch(es) into epoch {epoch}: that epoch goes on with its remaining "
              "batches", file=sys.stderr, flush=True)
    elif done:
        print(f"zoo: {path.name} was saved {done} batch(es) into epoch {epoch}: that epoch goes on with only its "
              "remaining batches, in a new shuffle (some of its examples are seen twice, others not at all); "
              "later epochs are whole", file=sys.stderr, flush=True)


def batches_into_epoch(saved: dict) -> int:
    """How many batches of an unfinished epoch the checkpoint had trained (0 when it was saved at an epoch's end)."""
    progress = saved.get("loops", {}).get("fit_loop", {}).get("epoch_loop.batch_progress", {})
    if not progress or progress.get("is_last_batch", True):
        return 0
    return int(progress.get("current", {}).get("processed", 0))


def restart_checkpoint(run_dir: Path) -> Path | None:
    """A job that torchrun restarted or SLURM requeued continues from its run's last.ckpt, with no new arguments.

    Only runs named by their launcher (torchrun's run id, the SLURM job) can find a run dir already there: the job id
    names the run, so starting the same id again continues it. (Not torchrun's restart count: an agent whose own
    worker did not fail restarts its workers with count 0, and every rank must agree on resuming.)"""
    from zoo.core.naming import launcher_named_run

    # Lightning's own SLURM requeue (SIGUSR1 in an sbatch job) saves hpc_ckpt_<n>.ckpt in the run dir: the newest wins.
    found = [p for p in [run_dir / "checkpoints" / "last.ckpt", *run_dir.glob("hpc_ckpt_*.ckpt")] if p.is_file()]
    if not launcher_named_run() or not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime)


def checkpoint_argument(verb: str, rest: list[str]) -> Path:
    """ckpt_path=<file|run dir|last> -> the checkpoint file (a run dir gives its best) for test, predict, export
    and serve."""
    bad = [a for a in rest if a.startswith("-")]
    if bad:
        raise ZooError(f"`zoo {verb}` takes key=value overrides only, not {bad[0]}")
    value = override_value(rest, "ckpt_path")
    if not value:
        raise ZooError(f"`zoo {verb}` needs ckpt_path=<file.ckpt|run dir|last> (e.g. outputs/<task>/<run>)")
    if value == "last":
        task = composed_task([o for o in rest if override_key(o) in ("task", "experiment")])
        value = str(latest_run_checkpoint(task, "*.ckpt", "train").parent.parent)
    path = Path(value).expanduser()
    if path.is_dir():
        best = sorted((path / "checkpoints").glob("best*.ckpt")) or sorted(path.glob("best*.ckpt"))
        path = best[-1] if best else (path / "checkpoints" / "last.ckpt")
    return path
