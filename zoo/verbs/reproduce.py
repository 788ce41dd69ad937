"""`python -m zoo reproduce <run dir | ckpt>`: train a finished run again from what it recorded, and compare.

What the run recorded: its overrides and resolved config (in its checkpoints, or config.yaml), its environment
(env.json) and its final metrics (metrics.json; TensorBoard's last val/ and test/ scalars for older runs). The re-run
is an ordinary `zoo train` in a new folder beside the original, with the same overrides, and every config value that
today's defaults would change pinned to the recorded one. Before it starts, the environment differences that could
change the result (packages, git commit and dirty tree, hardware) are printed; after it, both runs' final metrics
side by side. Exit 0 when every judged metric is within `reproduce.tolerance`, else 1 with one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from zoo.core.overrides import carried_overrides, is_location, override_key, override_value
from zoo.core.presets import recorded_overrides
from zoo.core.recorded import PER_COMMAND, flatten, pinned_values
from zoo.errors import ZooError


def main(rest: list[str]) -> None:
    source, user = split_arguments(rest)
    run, record = read_record(source, user)
    original = read_metrics(run)
    target = run.parent / f"{run.name}-reproduce-{datetime.now():%Y-%m-%d_%H-%M-%S}"
    overrides, notes, opts = plan(record, user, run)
    judged_metrics(original, opts, record["task_monitor"])  # a wrong reproduce option stops here, before the re-run
    print(f"zoo: reproducing {run} ({record['task']}) into {target}", flush=True)
    for line in environment_differences(record.get("env"), notes):
        print(f"  {line}", flush=True)
    code = run_train([sys.executable, "-m", "zoo", "train", *overrides, f"hydra.run.dir='{target}'"])
    if code in (130, 143):  # stopped: the re-run said so, and how to continue it
        sys.exit(code)
    if code != 0:
        print(f"zoo: reproduce: the re-run stopped with exit code {code}; see {target / 'cli.log'}", file=sys.stderr,
              flush=True)
        sys.exit(code)
    sys.exit(compare(original, read_metrics(target), opts, record["task_monitor"]))


def run_train(command: list[str]) -> int:
    """The re-run's exit code. A stop of this process reaches the re-run as the same signal, and this process waits
    for it to save its last.ckpt and say how to continue (subprocess.call would SIGKILL it, mid-save)."""
    import signal

    from zoo.core.stops import stopped_by

    proc = subprocess.Popen(command)
    try:
        return proc.wait()
    except BaseException as e:
        how = stopped_by(e)
        if how is None:
            proc.kill()
            raise
        try:  # Ctrl-C in a terminal reached the re-run already (one process group): a second one only if not
            code = proc.wait(timeout=2 if how == "Ctrl-C" else 0.001)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT if how == "Ctrl-C" else signal.SIGTERM)
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise e from None
        if code in (130, 143):  # the re-run stopped as a run does, and said so
            return code
        raise e from None  # it had finished, or died of the signal before it could say so: this process's stop


def split_arguments(rest: list[str]) -> tuple[Path, list[str]]:
    """`<run dir | ckpt>` (or ckpt_path=...) and the overrides for the re-run."""
    positional = [a for a in rest if "=" not in a and not a.startswith("-")]
    flags = [a for a in rest if a.startswith("-")]
    if flags:
        raise ZooError(f"`zoo reproduce` takes a run folder or checkpoint and key=value overrides, not {flags[0]}")
    named = override_value(rest, "ckpt_path")
    given = positional[:1] or ([named] if named else [])
    if len(positional) > 1 or not given:
        raise ZooError("`zoo reproduce` needs one run: python -m zoo reproduce outputs/<task>/<run> (or its "
                       "checkpoints/last.ckpt) [reproduce.tolerance=0.03] [other overrides]")
    user = [a for a in rest if "=" in a and override_key(a) != "ckpt_path"]
    return Path(given[0]).expanduser(), user


def read_record(source: Path, user: list[str] | None = None) -> tuple[Path, dict]:
    """The run folder and what it recorded: task, overrides, resolved config, environment, whether it was resumed.
    The newest checkpoint is the run's own record (a resumed run's last overrides); config.yaml stands in without.
    All of it is artifact data: a broken file is one line, and code it names passes zoo.core.trust (`user`: the
    command's own overrides, where the opt-in would be)."""
    from zoo.core import trust
    from zoo.core.checkpoint import checkpoint_task, load_checkpoint

    ckpt_file: Path | None
    if source.is_file():
        ckpt_file = source.resolve()
        run = ckpt_file.parent.parent if ckpt_file.parent.name == "checkpoints" else ckpt_file.parent
    elif source.is_dir():
        run = source.resolve()
        found = sorted((run / "checkpoints").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
        ckpt_file = run / "checkpoints" / "last.ckpt" if (run / "checkpoints" / "last.ckpt").is_file() else \
            (found[-1] if found else None)
    else:
        raise ZooError(f"{source} not found; give a run folder (outputs/<task>/<run>) or one of its checkpoints")
    saved = _run_config(run)
    if ckpt_file is not None:
        ckpt = load_checkpoint(ckpt_file)
        zoo = ckpt["zoo"] if isinstance(ckpt.get("zoo"), dict) else {}
        record: dict[str, Any] = {"task": checkpoint_task(ckpt, ckpt_file),
                                  "overrides": recorded_overrides(zoo, args=user),
                                  "config": zoo.get("config") or saved.get("config") or {},
                                  "env": zoo.get("env") if _env_shaped(zoo.get("env")) else None}
        source_of_config = f"{ckpt_file}'s recorded config"
    elif saved:
        record = {"task": saved["config"]["task"]["name"],
                  "overrides": recorded_overrides(saved, f"{run / 'config.yaml'}'s overrides", args=user),
                  "config": saved["config"], "env": None}
        source_of_config = str(run / "config.yaml")
    else:
        raise ZooError(f"{run} holds neither checkpoints nor config.yaml: not a zoo run folder")
    if not isinstance(record["config"], dict):
        raise ZooError(f"{source_of_config} is not a mapping; {BROKEN}")
    trust.check_config(record["config"], source_of_config, user)
    env = _run_env(run)
    if env is not None:  # the first session's environment: the one the run started on
        record["env"] = env
    record["resumed"] = saved.get("resume") or None
    record["task_monitor"] = str((record["config"].get("task") or {}).get("monitor", ""))
    return run, record


BROKEN = "the run's record was cut short or edited; reproduce another run, or retrain this one from its command"


def _run_config(run: Path) -> dict:
    """config.yaml as the zoo writes it (its `config` a mapping with the task's name); {} when there is none."""
    from omegaconf import OmegaConf

    path = run / "config.yaml"
    if not path.is_file():
        return {}
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(path))
    except Exception as e:  # noqa: BLE001 - YAML's and OmegaConf's parse errors, as one line
        raise ZooError(f"{path} does not parse ({_first_line(e)}); {BROKEN}") from None
    if not isinstance(loaded, dict):
        return {}  # a config.yaml that holds no mapping is no run's
    config = loaded.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("task"), dict) or \
            not isinstance(config["task"].get("name"), str):
        raise ZooError(f"{path} holds no run config (config.task.name); {BROKEN}")
    from zoo.core.aliases import rewrite_run_record

    return rewrite_run_record(loaded)  # an older run names the domains as top-level packages


def _run_env(run: Path) -> dict | None:
    path = run / "env.json"
    if not path.is_file():
        return None
    try:
        env = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ZooError(f"{path} does not parse ({_first_line(e)}); {BROKEN}") from None
    if not _env_shaped(env):
        raise ZooError(f"{path} is not the environment record the zoo writes; {BROKEN}")
    return env


def _env_shaped(env: Any) -> bool:
    """A mapping whose parts the comparison reads are mappings too."""
    return isinstance(env, dict) and all(isinstance(env.get(k, {}), dict) for k in ("packages", "git", "cpu", "gpu"))


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def plan(record: dict, user: list[str], run: Path) -> tuple[list[str], list[str], dict]:
    """The re-run's overrides (the run's own, the recorded values today's defaults would change, the user's), notes
    on what could not be pinned, and the reproduce options."""
    from zoo.base import plain
    from zoo.core import trust
    from zoo.core.config import check_overrides, compose, register_resolvers

    register_resolvers()
    carried = [o for o in carried_overrides(record["overrides"]) if not is_location(override_key(o))]
    # run_dir as the recorded one: values derived from it (checkpoint and logger folders) then compare equal
    recorded_dir = str(record["config"].get("run_dir") or run)
    base = [*carried, *user, f"run_dir='{recorded_dir}'"]
    try:
        check_overrides(base, sweeps=False)
    except ZooError as e:  # its presets renamed or removed since, a key its generation had: rebuilt as a resume is
        carried = rebuilt(carried, record["task"], user, recorded_dir, str(e))
        base = [*carried, *user, f"run_dir='{recorded_dir}'"]
    now = plain(compose(base))
    asked = {override_key(o) for o in user}
    def settings(config: dict) -> dict[str, Any]:  # a run's values, less the folders it lives in
        return {k: v for k, v in flatten(config).items()
                if not is_location(k) and not (isinstance(v, str) and v.startswith(recorded_dir))}

    pins, notes = pinned_values(settings(record["config"]), settings(now), asked, PER_COMMAND)
    trust.check_overrides(pins, "the run's recorded config", user)
    if record.get("resumed"):
        notes.append(f"the original was resumed (from {record['resumed']}); one uninterrupted re-run can differ "
                     "from it by more than a repeat would")
    gpu = bool(((record.get("env") or {}).get("gpu") or {}).get("names")) or now.get("trainer", {}).get(
        "accelerator") in ("gpu", "cuda")
    if gpu and not now.get("trainer", {}).get("deterministic"):
        notes.append("trainer.deterministic=false on a GPU: cuDNN's algorithm choice and atomic adds make a repeat "
                     "vary within seed noise (train with trainer.deterministic=true for exact repeats)")
    return [*carried, *pins, *user], notes, dict(now.get("reproduce") or {})


def rebuilt(carried: list[str], task: str, user: list[str], run_dir: str, reason: str) -> list[str]:
    """A run whose own overrides no longer compose: `task=<task>` and those that still do; the values it recorded are
    then pinned on top like any other (`plan`), as a resume and `zoo test` rebuild such a run."""
    from zoo.core.config import check_overrides
    from zoo.core.recorded import composable, say_rebuilt

    base = [f"task={task}", f"run_dir='{run_dir}'"]
    own = [o for o in carried if override_key(o) != "task"]
    kept = composable(own, base)
    check_overrides([f"task={task}", *kept, *user, f"run_dir='{run_dir}'"], sweeps=False)  # the user's mistakes
    say_rebuilt(reason, len(own) - len(kept), None)
    return [f"task={task}", *kept]


def environment_differences(recorded: dict | None, notes: list[str]) -> list[str]:
    """The differences between the run's environment and this one that could change the result, then the notes."""
    from zoo.measure.env import collect

    if not recorded:
        return ["environment: the run recorded none (env.json); differences unknown", *notes]
    now = collect()
    lines = []
    for name in sorted(set(recorded.get("packages", {})) | set(now["packages"])):
        was, is_ = recorded.get("packages", {}).get(name), now["packages"].get(name)
        if was != is_:
            lines.append(f"package {name}: {was or 'absent'} -> {is_ or 'absent'}")
    git_was, git_now = recorded.get("git", {}), now["git"]
    if git_was.get("commit") != git_now.get("commit"):
        lines.append(f"git commit: {str(git_was.get('commit'))[:12]} -> {str(git_now.get('commit'))[:12]}")
    if git_was.get("dirty") is True or git_now.get("dirty") is True:
        state = lambda d: {True: "dirty", False: "clean"}.get(d, "unknown")  # noqa: E731
        lines.append(f"git tree: {state(git_was.get('dirty'))} at the run, {state(git_now.get('dirty'))} now "
                     "(uncommitted changes are not recorded: the code may differ even at one commit)")
    for what, was, is_ in hardware(recorded, now):
        if was != is_:
            lines.append(f"{what}: {was} -> {is_}")
    return (lines or ["environment: same packages, commit and hardware as the original"]) + notes


def hardware(recorded: dict, now: dict) -> list[tuple[str, Any, Any]]:
    cpu = lambda e: f"{e.get('cpu', {}).get('model')} ({e.get('cpu', {}).get('usable_cores')} usable cores)"  # noqa
    gpu = lambda e: ", ".join(e.get("gpu", {}).get("names") or []) or "none"  # noqa: E731
    return [("CPU", cpu(recorded), cpu(now)), ("GPU", gpu(recorded), gpu(now)),
            ("CUDA", recorded.get("gpu", {}).get("cuda"), now["gpu"].get("cuda")),
            ("Python", recorded.get("python"), now.get("python"))]


def read_metrics(run: Path) -> dict[str, float]:
    """metrics.json, else the last val/ and test/ scalars in the run's TensorBoard files (runs before metrics.json)."""
    path = run / "metrics.json"
    if path.is_file():
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    last: dict[str, tuple[float, float]] = {}
    for events in sorted(run.glob("tensorboard/**/events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            if tag.startswith(("val/", "test/")):
                e = acc.Scalars(tag)[-1]
                if tag not in last or e.wall_time >= last[tag][0]:
                    last[tag] = (e.wall_time, float(e.value))
    if not last:
        raise ZooError(f"{run} recorded no final metrics (no metrics.json, no val/ or test/ scalars in tensorboard/); "
                       "nothing to compare a re-run with")
    return {k: v for k, (_, v) in sorted(last.items())}


def judged_metrics(original: dict[str, float], opts: dict, monitor: str,
                   again: dict[str, float] | None = None) -> tuple[list[str], float]:
    """The metrics judged (those of `reproduce.metrics`, else the monitored one and its test/ twin, that the runs
    have) and the tolerance; checked against the original alone before the re-run, against both after it."""
    tolerance = float(opts.get("tolerance", 0.03))
    if tolerance < 0:
        raise ZooError(f"reproduce.tolerance={tolerance:g} is below 0: no difference passes; use e.g. "
                       "reproduce.tolerance=0.03 (0: identical metrics)")
    names = list(opts.get("metrics") or [m for m in (monitor, "test/" + monitor.partition("/")[2]) if m])
    names = [m for m in names if m in original and (again is None or m in again)]
    if not names:
        runs = "the run has" if again is None else "both runs have"
        raise ZooError(f"no metric to judge: reproduce.metrics names none that {runs} ({sorted(original)}); "
                       "set reproduce.metrics=[<key>,...]")
    return names, tolerance


def compare(original: dict[str, float], again: dict[str, float], opts: dict, monitor: str) -> int:
    """Both runs' metrics side by side with their difference; 0 when the judged ones agree within the tolerance."""
    judged, tolerance = judged_metrics(original, opts, monitor, again)
    print(f"\n  {'metric':<18} {'original':>10} {'re-run':>10} {'difference':>11}", flush=True)
    for key in sorted(set(original) | set(again)):
        a, b = original.get(key), again.get(key)
        diff = f"{b - a:+11.4f}" if a is not None and b is not None else f"{'':>11}"
        mark = f"  (judged, tolerance {tolerance:g})" if key in judged else ""
        print(f"  {key:<18} {_num(a):>10} {_num(b):>10} {diff}{mark}", flush=True)
    worst = max(judged, key=lambda k: abs(again[k] - original[k]))
    gap = abs(again[worst] - original[worst])
    if gap <= tolerance:
        print(f"zoo: reproduced: {', '.join(judged)} within reproduce.tolerance={tolerance:g} (largest difference "
              f"{gap:.4f}, {worst})", flush=True)
        return 0
    print(f"zoo: not reproduced: {worst} {original[worst]:.4f} -> {again[worst]:.4f} differs by {gap:.4f} > "
          f"reproduce.tolerance={tolerance:g}; see the environment differences above", file=sys.stderr, flush=True)
    return 1


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"
