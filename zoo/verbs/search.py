"""Hyper-parameter search with Optuna: the engine behind the zoo's Hydra sweeper (hydra_plugins/zoo_optuna_sweeper).

The sweeper asks Optuna for a trial, launches one ordinary `zoo train` job with the trial's values as overrides, and
tells Optuna the job's monitored metric. What lives here: the search-space grammar (Hydra's sweep expressions ->
Optuna distributions, typed by the config's defaults), the study and its storage, the pruning callback a job runs,
and the trials table. Optuna is imported inside functions: the zoo works without the `search` extra.
"""

from __future__ import annotations

import csv
import math
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from zoo.errors import ZooError

MISSING = object()


def require_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise ZooError("hyper-parameter search needs Optuna: pip install -e \".[search]\"") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweeper prints one line per trial itself
    import warnings

    # Heartbeats with ask/tell: the sweeper records them itself while a trial's job runs (hydra_plugins/...).
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
    return optuna


# ------------------------------------------------------------------------------------------ search space
def config_default(cfg: Any, key: str) -> Any:
    """The composed config's value at `key` (MISSING when there is no such key; interpolations unresolved)."""
    from omegaconf import OmegaConf

    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, throw_on_resolution_failure=False) if parent else cfg
    if node is None or not hasattr(node, "_get_node") or leaf not in node:
        return MISSING
    return None if OmegaConf.is_interpolation(node, leaf) else node[leaf]


def distribution(override: Any, default: Any) -> Any:
    """One parsed sweep override -> an Optuna distribution. Integer defaults make integer distributions, so
    `task.data.batch_size=interval(16,128)` samples whole batch sizes; a non-integral bound there is refused."""
    import optuna.distributions as od
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    key, value = override.get_key_element().lstrip("+"), override.value()
    integer = isinstance(default, int) and not isinstance(default, bool)
    if isinstance(value, ChoiceSweep):
        plain = [v for v in value.list if v is None or isinstance(v, (str, int, float, bool))]
        bad = [v for v in value.list if v not in plain]
        if bad:
            raise ZooError(f"{override.input_line}: choices must be plain values (numbers, strings, true/false), "
                           f"not {bad[0]!r}")
        return od.CategoricalDistribution(plain)
    if isinstance(value, RangeSweep):  # Hydra's range: stop excluded, as the basic sweeper enumerates it
        start, stop, step = value.start, value.stop, value.step
        n = math.ceil((stop - start) / step) if start is not None and stop is not None and step else 0
        if n < 1 or start is None or step is None:
            raise ZooError(f"{override.input_line} holds no value; write range(start, stop, step) with start < stop")
        last = start + (n - 1) * step
        if all(float(x).is_integer() for x in (start, step)) and (integer or isinstance(start, int)):
            return od.IntDistribution(int(start), int(last), step=int(step))
        return od.FloatDistribution(float(start), float(last), step=float(step))
    if isinstance(value, IntervalSweep):
        unknown = set(value.tags) - {"log", "int"}
        if unknown:
            raise ZooError(f"{override.input_line}: unknown tag {sorted(unknown)[0]}; tags: log, int")
        lo, hi, log = value.start, value.end, "log" in value.tags
        if lo is None or hi is None or not lo < hi or log and lo <= 0:
            raise ZooError(f"{override.input_line}: needs low < high{' and low > 0 (log scale)' if log else ''}")
        if integer or "int" in value.tags:
            if not (float(lo).is_integer() and float(hi).is_integer()):
                raise ZooError(f"{key} takes integers: write interval({math.ceil(lo)}, {math.floor(hi)})")
            return od.IntDistribution(int(lo), int(hi), log=log)
        return od.FloatDistribution(lo, hi, log=log)
    raise ZooError(f"{override.input_line} is not a search expression; use choice(a,b), range(a,b,step), "
                   "interval(a,b) or tag(log, interval(a,b))")


def parse_params(params: dict[str, str]) -> list:
    """{"task.module.optimizer.lr": "tag(log, interval(1e-4, 1e-2))"} -> Hydra Override objects, or one line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    parsed = []
    for key, expr in params.items():
        try:
            parsed.append(parser.parse_override(f"{key}={expr}"))
        except Exception as e:  # noqa: BLE001 - Hydra's grammar errors
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ZooError(f"search space {key}={expr} does not parse ({first}); write choice(a,b), "
                           "range(a,b,step), interval(a,b) or tag(log, interval(a,b))") from None
    return parsed


def search_space(params: dict[str, str], cfg: Any) -> dict[str, Any]:
    """The search space, each key checked against the composed config: it must exist (unless added with +), and
    its values must have the default's type (zoo.core.validate's check, as for any override)."""
    from zoo.core import validate
    from zoo.core.config import GROUPS, options

    parsed = parse_params(params)
    validate.check_types(parsed, cfg, GROUPS)
    validate.check_sweep_choices(cfg, parsed)  # every choice the task would refuse, before the first trial
    space = {}
    for o in parsed:
        key = o.get_key_element()
        default = config_default(cfg, key.lstrip("+"))
        if default is MISSING and not key.startswith("+"):
            raise ZooError(f"search parameter {key} is not a key of task {cfg.task.name}; check its spelling in "
                           "`python -m zoo train --cfg job` (each hparams_search preset goes with its own task, "
                           "e.g. task=nlp/bert hparams_search=nlp)")
        if not o.is_sweep_override():
            raise ZooError(f"search parameter {o.input_line} is a single value; give a range to search, e.g. "
                           f"{key}=choice(...) or interval(a,b) (fixed values go on the command line)")
        space[key] = distribution(o, default)
    if not space:
        presets = "|".join(options("hparams_search"))
        raise ZooError(f"the search space is empty: pick a preset (hparams_search={presets}) or add "
                       "sweep overrides such as task.module.optimizer.lr='tag(log, interval(1e-4, 1e-2))'")
    return space


def as_override(key: str, value: Any) -> str:
    """A sampled value back into Hydra's override grammar (strings quoted where the grammar needs it)."""
    if isinstance(value, bool) or value is None:
        text = {True: "true", False: "false", None: "null"}[value]
    elif isinstance(value, (int, float)):
        text = repr(value)
    else:
        text = value if re.fullmatch(r"[A-Za-z_][\w./-]*", value) and value not in ("true", "false", "null") \
            else "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return f"{key}={text}"


# ------------------------------------------------------------------------------------------ study and storage
def storage_url(url: str | None, sweep_dir: Path) -> str:
    """The study's database: SQLite in the sweep folder by default; a relative SQLite path made absolute (jobs may
    run elsewhere), its folder created (SQLite does not create folders)."""
    if not url:
        url = f"sqlite:///{sweep_dir / 'optuna.db'}"
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url[len("sqlite:///"):]).expanduser().absolute()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ZooError(f"cannot open the study storage {url}: cannot create {path.parent} ({e.strerror}); give "
                           "hydra.sweeper.storage=sqlite:///<writable path>.db or another SQLAlchemy URL") from None
        url = f"sqlite:///{path}"
    return url


def redact(url: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def open_storage(url: str, heartbeat_interval: int | None = None, grace_period: int | None = None) -> Any:
    optuna = require_optuna()
    try:
        return optuna.storages.RDBStorage(url, heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                                          engine_kwargs={"pool_pre_ping": True})
    except Exception as e:  # noqa: BLE001 - SQLAlchemy's many ways to refuse a URL or a server
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ZooError(f"cannot open the study storage {redact(url)} ({type(e).__name__}: {first}); give "
                       "hydra.sweeper.storage as an SQLAlchemy URL that this machine reaches, e.g. "
                       "sqlite:///outputs/search/study.db or postgresql://user:pass@host/db") from None


def open_study(name: str, storage: Any, direction: str, sampler: Any) -> Any:
    """Create the study, or continue it (`load_if_exists`): a resumed search and other sweep processes share it."""
    optuna = require_optuna()
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction=direction,
                                load_if_exists=True)
    if study.direction.name.lower() != direction:
        raise ZooError(f"study '{name}' in {redact(storage.url)} was created to {study.direction.name.lower()}, "
                       f"not {direction}; give it another hydra.sweeper.study_name")
    return study


def count_states(study: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
    return counts


# ------------------------------------------------------------------------------------------ pruning, in the job
class OptunaPruning(Callback):
    """Reports the monitored metric to the trial after every evaluation and stops the run when the study's pruner
    says so. The sweeper hands over the storage URL, study name and trial id as plain overrides, so this works with
    any launcher (in-process, submitit, SLURM): the callback rebuilds `optuna.trial.Trial(study, trial_id)`.

    A pruned run ends like a finished one (trainer.should_stop: best checkpoint tested, HParams logged); the
    `pruned_at` user attribute tells the sweeper to record the trial as PRUNED.
    """

    def __init__(self, storage: str, study: str, trial_id: int, monitor: str, pruner: Any = None) -> None:
        self.storage, self.study_name, self.trial_id, self.monitor = storage, study, int(trial_id), monitor
        self.pruner = pruner  # an Optuna pruner (Hydra instantiated its {_target_: ...} node) or None
        self.trial: Any = None
        self.evaluations = 0

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or not trainer.is_global_zero:
            return
        optuna = require_optuna()
        pruner = self.pruner if self.pruner is not None else optuna.pruners.NopPruner()
        study = optuna.load_study(study_name=self.study_name, storage=open_storage(self.storage), pruner=pruner,
                                  sampler=optuna.samplers.RandomSampler())
        state = study._storage.get_trial(self.trial_id).state
        if state != optuna.trial.TrialState.RUNNING:  # e.g. a trial's run resumed later with ckpt_path=
            print(f"zoo: warning: trial {self.trial_id} of study {self.study_name} is {state.name}; this run no "
                  "longer reports to it", file=sys.stderr, flush=True)
            return
        self.trial = optuna.trial.Trial(study, self.trial_id)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        prune = False
        if trainer.is_global_zero and self.trial is not None:
            value = trainer.callback_metrics.get(self.monitor)
            self.evaluations += 1  # the step Optuna compares trials at: the n-th evaluation (not batch-size dependent)
            if value is not None and math.isfinite(float(value)):
                self.trial.report(float(value), self.evaluations)
                prune = self.trial.should_prune()
            if prune:
                self.trial.set_user_attr("pruned_at", self.evaluations)
                print(f"zoo: trial {self.trial.number} pruned after evaluation {self.evaluations} "
                      f"({self.monitor}={float(value):.4f})", file=sys.stderr, flush=True)
        if trainer.strategy.broadcast(prune, src=0):  # every DDP rank stops together
            trainer.should_stop = True


# ------------------------------------------------------------------------------------------ results
def trial_rows(study: Any, monitor: str) -> list[dict]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        wall = (t.datetime_complete - t.datetime_start).total_seconds() \
            if t.datetime_complete and t.datetime_start else None
        note = t.user_attrs.get("error", "")
        if t.state.name == "FAIL" and not note:  # failed by fail_stale_trials: its process stopped beating
            note = "its sweep process died (no heartbeat)"
        if t.state.name == "PRUNED":
            note = f"pruned after evaluation {t.user_attrs.get('pruned_at', '?')}"
        rows.append({"number": t.number, "state": t.state.name, monitor: t.value, **t.params,
                     "wall_s": None if wall is None else round(wall, 1), "run_dir": t.user_attrs.get("run_dir", ""),
                     "note": note})
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    fields: list[str] = []
    for r in rows:
        fields += [k for k in r if k not in fields]
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in rows)
    tmp.replace(path)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def format_table(rows: list[dict], skip: tuple[str, ...] = ("run_dir",)) -> str:
    if not rows:
        return "(no trials)"
    cols = [c for c in dict.fromkeys(k for r in rows for k in r) if c not in skip]
    cells = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def best_command(fixed: list[str], params: dict[str, Any]) -> str:
    """The best trial as one plain run: the sweep's fixed overrides (minus the search's own) and its values."""
    own = ("hparams_search", "hydra/sweeper", "hydra.sweeper", "hydra.sweep")
    keep = [o for o in fixed if not o.lstrip("+~").startswith(own)]
    args = keep + [as_override(k, v) for k, v in params.items()]
    return "python -m zoo train " + " ".join(shlex.quote(a) for a in args)
