"""`python -m zoo bench task=<task> [train overrides] [bench.<key>=...]`: what the hardware buys, measured.

The cartesian product of the list-valued bench keys (precision, compile, channels_last, batch_size, devices), each
combination a short real fit of the task's own module and data in a FRESH PROCESS (`zoo.bench_worker`): compile
caches, memory peaks and thread settings do not leak from one row into the next, and a DDP combination's ranks,
which Lightning starts by re-running the worker's command line, load that combination's resolved config.

The verb knows no domain: the unit of throughput and how to count it in a batch come from the task's bench hook
(zoo/kit/hooks.py: `<package>/bench.py`), with
`UNIT`, `units(module, batch)`, optional `LOSS_KEY`, `BATCH_KEY` and `RUN_OVERRIDES`.
"""

from __future__ import annotations

import difflib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from zoo.core.naming import output_root
from zoo.errors import ZooError
from zoo.kit.hooks import find_hooks
from zoo.verbs.bench.report import say, show

PRECISIONS = ("auto", "32-true", "32", "tf32", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true")
AXES = ("precision", "compile", "channels_last", "batch_size", "devices")  # the list-valued keys, in table order


def main(rest: list[str]) -> None:
    if rest[:1] == ["--worker"] and len(rest) == 2:
        from zoo.verbs.bench.worker import worker

        return worker(rest[1])
    if any(a in ("-h", "--help") for a in rest):
        print(__doc__.split("\n\n")[0] + "\n\nkeys (configs/bench/default.yaml):\n" + defaults_path().read_text())
        return None
    from zoo.verbs.bench.report import report

    bench, overrides = parse_args(rest)
    plan = Plan(bench, overrides)
    # SIGTERM (a scheduler, `kill`) ends the bench like Ctrl-C: the running worker's process group is stopped
    # (it runs in its own session) and the rows measured so far are still reported.
    signal.signal(signal.SIGTERM, _interrupt)
    rows = plan.run()
    report(plan, rows)
    if plan.interrupted:  # a stop like every verb's: one line, 143 for SIGTERM, 130 for Ctrl-C
        from zoo.core.stops import exit_stopped

        exit_stopped(_stopped_by[-1] if _stopped_by else "Ctrl-C",
                     f"the rows measured before it are reported in {plan.run_dir}")
    return None


_stopped_by: list[str] = []


def _interrupt(signum: int, frame: Any) -> None:
    _stopped_by.append("SIGTERM")
    raise KeyboardInterrupt


# ------------------------------------------------------------------------------------------------------ arguments
def defaults_path() -> Path:
    from zoo.core.config import CONFIG_DIR

    return CONFIG_DIR / "bench" / "default.yaml"


def parse_args(rest: list[str]) -> tuple[dict[str, Any], list[str]]:
    """`bench.*` overrides -> the bench's settings (lists for the axes); everything else stays a train override."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep
    from omegaconf import OmegaConf

    loaded = OmegaConf.to_container(OmegaConf.load(defaults_path()))
    if not isinstance(loaded, dict):
        raise ZooError(f"{defaults_path()} is not a mapping of bench keys")
    bench = {str(k): v for k, v in loaded.items()}
    mine = [a for a in rest if a.lstrip("+").startswith("bench.")]
    overrides = [a for a in rest if a not in mine]
    try:
        parsed = OverridesParser.create().parse_overrides([m.lstrip("+") for m in mine])
    except Exception as e:  # noqa: BLE001 - Hydra's grammar errors
        raise ZooError(f"cannot parse {mine}: {str(e).splitlines()[0]}; write lists as "
                       "bench.precision=[32-true,bf16-mixed]") from None
    for o in parsed:
        key = o.key_or_group.split(".", 1)[1]
        if key not in bench:
            near = difflib.get_close_matches(key, list(bench), n=1)
            hint = f"did you mean bench.{near[0]}? " if near else ""
            raise ZooError(f"unknown bench key 'bench.{key}': {hint}keys: {', '.join(bench)}")
        value = o.value()
        if o.is_sweep_override() and not isinstance(value, ChoiceSweep):
            raise ZooError(f"{o.input_line}: list the values, e.g. bench.{key}=[a,b]")
        bench[key] = list(value.list) if isinstance(value, ChoiceSweep) else value
    return check(bench), overrides


def _bool(key: str, v: Any) -> bool | None:
    if v is None and key == "channels_last" or isinstance(v, bool):
        return v
    raise ZooError(f"bench.{key}={v!r} is not true or false; e.g. bench.{key}=[false,true]")


def _positive(key: str, v: Any, kind: type = int, none: bool = False) -> Any:
    if v is None and none:
        return None
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (kind is float or isinstance(v, int)) and v > 0
    if not ok:
        raise ZooError(f"bench.{key}={v!r} must be a positive {'number' if kind is float else 'integer'}")
    return v


def check(bench: dict[str, Any]) -> dict[str, Any]:
    """Every value checked before any process starts; axes become non-empty lists without repeats."""
    for key in AXES:
        v = bench[key]
        values = v if isinstance(v, list) else [v]
        if not values:
            raise ZooError(f"bench.{key}=[] is empty; give at least one value")
        if key == "precision":
            values = [str(p) for p in values]
            bad = [p for p in values if p not in PRECISIONS]
            if bad:
                raise ZooError(f"bench.precision: unknown {bad[0]!r}; use {', '.join(PRECISIONS)}")
        elif key in ("compile", "channels_last"):
            values = [_bool(key, x) for x in values]
        else:
            values = [_positive(key, x, none=key == "batch_size") for x in values]
        bench[key] = list(dict.fromkeys(values))
    bench["steps"] = _positive("steps", bench["steps"])
    bench["warmup"] = _positive("warmup", bench["warmup"])
    bench["peak_tflops"] = _positive("peak_tflops", bench["peak_tflops"], float, none=True)
    bench["timeout"] = _positive("timeout", bench["timeout"], float)
    bench["repeats"] = _positive("repeats", bench["repeats"])
    bench["warm_run"] = _bool("warm_run", bench["warm_run"])
    return bench


def combo_label(combo: dict[str, Any], varying: list[str]) -> str:
    return " ".join(f"{k}={show(combo[k])}" for k in varying or ["precision"])


# ------------------------------------------------------------------------------------------------------ the plan
class Plan:
    """The bench's task, run directory and combinations; `run()` measures them one process at a time."""

    def __init__(self, bench: dict[str, Any], overrides: list[str]) -> None:
        from zoo.core.config import check_overrides, compose, register_resolvers
        from zoo.core.naming import run_id as new_run_id

        register_resolvers()
        check_overrides(overrides, sweeps=False)  # bad train overrides: one line, before anything runs
        self.bench, self.overrides = bench, overrides
        base = compose([*overrides, "run_dir=/tmp/zoo-bench-probe"])
        self.task = str(base.task.name)
        self.hooks = find_hooks(base.task).need("bench", "bench")
        self.unit = str(getattr(self.hooks, "UNIT", "samples"))
        self.batch_key = str(getattr(self.hooks, "BATCH_KEY", "task.data.batch_size"))
        self.accelerator = str(base.trainer.get("accelerator", "auto"))
        self.user_threads = base.trainer.get("num_threads")
        self.device_note = self._device_note(overrides)
        root = output_root()
        self.run_dir = (root / "bench" / self.task / new_run_id()).resolve()
        self.combos = [dict(zip(AXES, values)) for values in itertools.product(*(bench[k] for k in AXES))]
        self.varying = [k for k in AXES if len(bench[k]) > 1]
        self.interrupted = False

    def combo_overrides(self, combo: dict[str, Any], run_dir: Path) -> list[str]:
        from zoo.core.overrides import merge_overrides

        # the precision as one value: the trainer's math mode (zoo.core.trainer.math_mode) decides what it means
        mine = [f"trainer.precision={combo['precision']}",
                f"trainer.compile={str(combo['compile']).lower()}", f"trainer.devices={combo['devices']}",
                f"run_dir='{run_dir}'"]
        if combo["channels_last"] is not None:
            mine.append(f"trainer.channels_last={str(combo['channels_last']).lower()}")
        if combo["batch_size"] is not None:
            mine.append(f"{self.batch_key}={combo['batch_size']}")
        if combo["devices"] > 1:
            mine.append("trainer.strategy=ddp")
            if not self.user_threads and not self._cuda():  # share the cores: N processes x (cores / N) threads
                mine.append(f"trainer.num_threads={max(1, (os.cpu_count() or 1) // combo['devices'])}")
        return merge_overrides(self.overrides, mine)

    def _cuda(self) -> bool:
        from zoo.core.trainer import cuda_wanted

        return cuda_wanted(self.accelerator)

    def _device_note(self, overrides: list[str]) -> str | None:
        """Why the rows run on a CPU when the config says so (rl pins `accelerator: cpu`: small policies run faster
        there), so that a CPU row in a GPU bench is not read as the GPU's number."""
        if self.accelerator != "cpu":
            return None
        mine = any(o.lstrip("+~").startswith(("trainer.accelerator=", "trainer=")) for o in overrides)
        return "cpu: set on the command line" if mine else "cpu: the task pins its accelerator"

    def warm(self) -> None:
        """One untimed short run of the first combination before any measured one: the first row must not be the one
        that pays for cold file caches and a cold machine (a cold first row once read as a 5x speed-up of the next)."""
        if not self.bench["warm_run"] or not self.combos:
            return
        say(f"zoo bench: [warm-up] {self.task} {combo_label(self.combos[0], self.varying)}, untimed ...")
        result = self.measure(0, self.combos[0], name="00_warmup", steps=2)
        if result.get("status") != "ok":
            say(f"zoo bench: [warm-up] {result.get('status')} ({result.get('reason')}); measuring anyway")

    def run(self) -> list[dict[str, Any]]:
        """Every combination once per round; rounds after the first in a shuffled order, so that on a shared
        machine no setting always runs first or after the same neighbour (alternated pairs, not one block each)."""
        import random

        self.run_dir.mkdir(parents=True, exist_ok=True)
        rounds, n = self.bench["repeats"], len(self.combos)
        runs: list[list[dict[str, Any]]] = [[] for _ in self.combos]
        order, rng = list(range(n)), random.Random(0)
        i = r = 0
        try:
            self.warm()
            for r in range(rounds):
                if r:
                    rng.shuffle(order)
                for i in order:
                    if runs[i] and runs[i][0].get("status") == "skipped":
                        continue  # a reason about the machine does not change between rounds
                    label = combo_label(self.combos[i], self.varying)
                    tag = f"[{i + 1}/{n}]" + (f" round {r + 1}/{rounds}" if rounds > 1 else "")
                    say(f"zoo bench: {tag} {self.task} {label} ...")
                    result = {**self.measure(i, self.combos[i], r), "round": r}
                    say(f"zoo bench: {tag} {_summary({**result, 'label': label, 'unit': self.unit})}")
                    runs[i].append(result)
        except KeyboardInterrupt:
            say("zoo bench: interrupted; reporting the combinations measured so far", sys.stderr)
            self.interrupted = True
            if not runs[i] or runs[i][-1]["round"] != r:  # the combination that was running when the signal came
                runs[i].append({"status": "interrupted", "reason": "stopped by Ctrl-C or SIGTERM", "round": r})
        return [{"index": i + 1, **combo, "label": combo_label(combo, self.varying), "unit": self.unit,
                 **aggregate(runs[i])} for i, combo in enumerate(self.combos) if runs[i]]

    def measure(self, i: int, combo: dict[str, Any], round_: int = 0, name: str | None = None,
                steps: int | None = None) -> dict[str, Any]:
        reason = skip_reason(combo, self.accelerator)
        if reason:
            return {"status": "skipped", "reason": reason}
        from zoo.base import plain
        from zoo.core.config import compose

        where = self.run_dir / (name or f"{i + 1:02d}" + (f"_r{round_ + 1}" if self.bench["repeats"] > 1 else ""))
        where.mkdir(exist_ok=True)
        overrides = self.combo_overrides(combo, where)
        try:
            cfg = compose(overrides)
        except Exception as e:  # noqa: BLE001 - e.g. a preset without trainer.channels_last
            from zoo.core.config import explain

            return {"status": "failed", "reason": explain(e, overrides)}
        spec = {"config": plain(cfg), "steps": steps or self.bench["steps"], "device_note": self.device_note,
                "warmup": self.bench["warmup"], "result": str(where / "result.json"),
                "peak_flops": self.bench["peak_tflops"] * 1e12 if self.bench["peak_tflops"] else None}
        (where / "spec.json").write_text(json.dumps(spec))
        return run_worker(where, self.bench["timeout"])


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A combination's rounds -> its row: the run with the median throughput stands for it (its step times, FLOPs,
    memory...), with the median, min and max throughput over the rounds and each round's value for the speed-ups."""
    import statistics

    ok = sorted((x for x in runs if x.get("status") == "ok"), key=lambda x: x["units_per_s"])
    if not ok:
        return dict(runs[-1])
    row = dict(ok[(len(ok) - 1) // 2])
    values = [x["units_per_s"] for x in ok]
    row.update(units_per_s=statistics.median(values), units_per_s_min=values[0], units_per_s_max=values[-1],
               runs=len(ok), per_round={x["round"]: x["units_per_s"] for x in ok})
    return row


def skip_reason(combo: dict[str, Any], accelerator: str) -> str | None:
    """Why this machine cannot run the combination, or None. (Failures the checks miss end up in the row too.)
    Whether the hardware has the precision is the trainer's to say (`precision_problem`), not repeated here."""
    import importlib.util

    import torch

    from zoo.core.trainer import cuda_wanted, precision_problem

    cuda, devices = cuda_wanted(accelerator), combo["devices"]
    reason = precision_problem(str(combo["precision"]), accelerator)
    if reason:
        return reason
    if combo["compile"]:
        if cuda and importlib.util.find_spec("triton") is None:
            return "torch.compile on GPU needs triton (pip install triton)"
        compiler = os.environ.get("CXX") or any(shutil.which(c) for c in ("g++", "c++", "clang++"))
        if not cuda and not compiler:
            return "torch.compile on CPU needs a C++ compiler (g++ or clang++)"
    have = torch.cuda.device_count() if cuda else (os.cpu_count() or 1)
    if devices > have:
        return f"{devices} devices asked, {have} {'GPUs' if cuda else 'CPU cores'} here"
    return None


def run_worker(where: Path, timeout: float) -> dict[str, Any]:
    """The combination in its own process (session: its DDP ranks are stopped with it); output in worker.log."""
    result = where / "result.json"
    with open(where / "worker.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "zoo", "bench", "--worker", str(where / "spec.json")],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return {"status": "failed",
                    "reason": f"timed out after {timeout:g} s (bench.timeout); see {where}/worker.log"}
        except KeyboardInterrupt:
            _stop(proc)
            raise
    if result.is_file():
        return json.loads(result.read_text())
    tail = [ln for ln in (where / "worker.log").read_text().splitlines() if ln.strip()][-1:] or [""]
    return {"status": "failed", "reason": f"exit code {code}: {tail[0][:200]} (see {where}/worker.log)"}


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the worker and the DDP ranks it started, nothing else
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _summary(row: dict[str, Any]) -> str:
    if row.get("status") != "ok":
        return f"{row['label']}: {row.get('status')} ({row.get('reason')})"
    return f"{row['label']}: {row['units_per_s']:.1f} {row['unit']}/s, {row['step_ms_mean']:.1f} ms/step"
