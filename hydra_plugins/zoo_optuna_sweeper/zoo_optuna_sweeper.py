"""`hydra/sweeper=zoo_optuna`: Optuna (ask/tell) behind Hydra's Sweeper interface.

Optuna is the engine; this plugin maps the search space onto overrides, launches each trial as one ordinary job
through whatever launcher Hydra has (basic, submitit), and tells Optuna the job's `task.monitor` metric. The
engine's parts live in `zoo.search`. This module is imported whenever Hydra scans its plugins (every command), so
it imports neither zoo.search, optuna nor torch at the top.
"""

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf


@dataclass
class ZooOptunaSweeperConf:
    # hydra/sweeper/sampler=tpe|random, hydra/sweeper/pruner=median|percentile|hyperband|threshold (none by default)
    defaults: list[Any] = field(default_factory=lambda: ["_self_", {"sampler": "tpe"}, {"pruner": None}])
    _target_: str = "hydra_plugins.zoo_optuna_sweeper.zoo_optuna_sweeper.ZooOptunaSweeper"
    _recursive_: bool = False  # sampler and pruner stay specs: the pruner travels to each job as an override
    n_trials: int = 20  # COMPLETE + PRUNED trials the study should hold (FAIL ones are replaced)
    n_jobs: int = 1  # trials handed to the launcher at once (parallel launchers: submitit, SLURM arrays)
    study_name: str | None = None  # null: the task's name
    storage: str | None = None  # any SQLAlchemy URL; null: sqlite:///<hydra.sweep.dir>/optuna.db
    direction: str | None = None  # null: from task.mode (max -> maximize)
    monitor: str | None = None  # null: task.monitor
    sampler: Any = None  # {_target_: optuna.samplers..., seed: null (the run's seed)}, from the group above
    pruner: Any = None  # {_target_: optuna.pruners..., ...} or null (no pruning)
    # key -> choice(...) | range(...) | interval(...) | tag(log, ...)
    params: dict[str, str] = field(default_factory=dict)
    max_failures_in_a_row: int = 3  # then the sweep stops with the last error (a broken setup, not a bad trial)
    # seconds; a RUNNING trial without a heartbeat for grace_period is marked FAIL
    heartbeat_interval: int = 10
    grace_period: int = 30


_STORE = ConfigStore.instance()
_STORE.store(group="hydra/sweeper", name="zoo_optuna", node=ZooOptunaSweeperConf, provider="zoo")
# Samplers and pruners as config groups (as in Hydra's own Optuna sweeper), so that a preset's choice is replaced,
# not merged into: hydra/sweeper/pruner=threshold hydra.sweeper.pruner.lower=0.5
for _name, _node in {
    "tpe": {"_target_": "optuna.samplers.TPESampler", "seed": None, "n_startup_trials": 10},
    "random": {"_target_": "optuna.samplers.RandomSampler", "seed": None},
}.items():
    _STORE.store(group="hydra/sweeper/sampler", name=_name, node=_node, provider="zoo")
for _name, _node in {
    "median": {"_target_": "optuna.pruners.MedianPruner", "n_startup_trials": 3, "n_warmup_steps": 2},
    "percentile": {"_target_": "optuna.pruners.PercentilePruner", "percentile": 25.0, "n_startup_trials": 3,
                   "n_warmup_steps": 2},
    "hyperband": {"_target_": "optuna.pruners.HyperbandPruner", "min_resource": 1, "max_resource": "auto",
                  "reduction_factor": 3},
    "threshold": {"_target_": "optuna.pruners.ThresholdPruner", "lower": None, "upper": None, "n_warmup_steps": 0},
}.items():
    _STORE.store(group="hydra/sweeper/pruner", name=_name, node=_node, provider="zoo")


class _Heartbeat:
    """Records a heartbeat for the in-flight trials while their jobs run: a process that dies (kill -9, a lost
    node) leaves trials that go stale, and the next sweep process on the study marks them FAIL."""

    def __init__(self, storage: Any, trial_ids: list[int], interval: int) -> None:
        self.storage, self.trial_ids, self.interval = storage, trial_ids, interval
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while True:
            for trial_id in self.trial_ids:
                try:
                    self.storage.record_heartbeat(trial_id)
                except Exception:  # noqa: BLE001 - a busy database: the next beat tries again
                    pass
            if self.stop_event.wait(self.interval):
                return

    def __enter__(self) -> "_Heartbeat":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_event.set()
        self.thread.join()


def _hydra_value(v: Any) -> str:
    """A plain value in Hydra's override grammar (dicts as {k:v}, strings quoted)."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_hydra_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_hydra_value(x) for x in v) + "]"
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    if isinstance(v, (int, float)):
        return repr(v)
    return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _say(line: str) -> None:
    print(f"zoo: search: {line}", file=sys.stderr, flush=True)


class ZooOptunaSweeper(Sweeper):
    def __init__(self, **settings: Any) -> None:
        super().__init__()
        s = {k: OmegaConf.to_container(v, resolve=True) if isinstance(v, DictConfig) else v
             for k, v in settings.items()}
        self.n_trials, self.n_jobs = int(s["n_trials"]), int(s["n_jobs"])
        self.study_name, self.storage, self.direction = s["study_name"], s["storage"], s["direction"]
        self.monitor, self.sampler_spec, self.pruner_spec = s["monitor"], dict(s["sampler"] or {}), s["pruner"]
        self.params = {str(k): str(v) for k, v in (s["params"] or {}).items()}
        self.max_failures = int(s["max_failures_in_a_row"])
        self.heartbeat_interval, self.grace_period = int(s["heartbeat_interval"]), int(s["grace_period"])
        self.hydra_context: Any = None
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: Any, task_function: Any, config: DictConfig) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        from zoo.errors import ZooError, fail

        try:
            return self._sweep(arguments)
        except ZooError as e:  # inside Hydra's run_and_report, which would print it as a traceback
            fail(e)
        except KeyboardInterrupt:  # between trials (a trial's own Ctrl-C ends its job with 130 already)
            _say("stopped by Ctrl-C; run the same command to continue the study")
            sys.exit(130)

    # ------------------------------------------------------------------------------------------------------------
    def _sweep(self, arguments: list[str]) -> Any:
        from zoo.errors import ZooError
        from zoo.verbs import search

        cfg = self.config
        assert cfg is not None
        if self.n_trials < 1 or self.n_jobs < 1:
            raise ZooError(f"hydra.sweeper.n_trials={self.n_trials}, n_jobs={self.n_jobs}: both must be at least 1")
        fixed, cli_params = self._split(arguments)
        space = search.search_space({**self.params, **cli_params}, cfg)
        self.objective = self.monitor or str(cfg.task.monitor)
        mode = str(cfg.task.mode)
        if not self.direction and mode not in ("max", "min"):
            raise ZooError(f"task.mode={mode} must be max or min (or set hydra.sweeper.direction)")
        direction = self.direction or {"max": "maximize", "min": "minimize"}[mode]
        if direction not in ("maximize", "minimize"):
            raise ZooError(f"hydra.sweeper.direction={direction} must be maximize or minimize")
        sweep_dir = Path(str(cfg.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, sweep_dir / "multirun.yaml")
        self.url = search.storage_url(self.storage, sweep_dir)
        storage = search.open_storage(self.url, self.heartbeat_interval, self.grace_period)
        name = self.study_name or str(cfg.task.name).replace("/", "_")
        study = search.open_study(name, storage, direction, sampler=None)
        study.sampler = self._sampler(len(study.get_trials(deepcopy=False)))
        _say(f"study '{name}' in {search.redact(self.url)}: {direction} {self.objective}, {self.n_trials} trials "
             f"({len(space)} parameters); trials in {sweep_dir}")
        try:
            returns = self._loop(study, space, fixed, sweep_dir)
        except ZooError:  # too many failures in a row: the table shows what ran, then the error line
            self._report(study, fixed, sweep_dir)
            raise
        self._report(study, fixed, sweep_dir)
        return returns

    def _split(self, arguments: list[str]) -> tuple:
        """Command-line sweep expressions join the search space (over the preset's); the rest is fixed."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        fixed, params = [], {}
        for o in parser.parse_overrides(arguments):
            if o.is_sweep_override():
                params[o.get_key_element()] = o.input_line.partition("=")[2]
            else:
                fixed.append(o.input_line)
        return fixed, params

    def _sampler(self, trials_so_far: int) -> Any:
        """The sampler from its spec, seeded with the run's seed plus the trials already in the study: a resumed
        search draws new random start points instead of repeating the first run's."""
        from zoo.base import instantiate

        spec = dict(self.sampler_spec or {"_target_": "optuna.samplers.TPESampler", "seed": None})
        if "seed" in spec:
            base = spec["seed"] if spec["seed"] is not None else int(self.config.seed)  # type: ignore[union-attr]
            spec["seed"] = int(base) + trials_so_far
        return instantiate(spec)

    def _loop(self, study: Any, space: dict[str, Any], fixed: list[str], sweep_dir: Path) -> list[Any]:
        import optuna

        from zoo.errors import ZooError
        from zoo.verbs import search

        returns, failures, waiting = [], 0, False
        while True:
            optuna.storages.fail_stale_trials(study)  # RUNNING trials of a process that died
            counts = search.count_states(study)
            done, running = counts.get("COMPLETE", 0) + counts.get("PRUNED", 0), counts.get("RUNNING", 0)
            todo = self.n_trials - done - running
            if todo <= 0:
                if done >= self.n_trials or running == 0:
                    return returns
                if not waiting:
                    _say(f"{done}/{self.n_trials} trials done; waiting for {running} running in other processes")
                    waiting = True
                time.sleep(self.heartbeat_interval)
                continue
            trials = [study.ask(space) for _ in range(min(self.n_jobs, todo))]
            results = self._launch(study, trials, fixed, sweep_dir)
            returns.append(results)
            for trial, result in zip(trials, results):
                state, error = self._tell(study, trial, result)
                failures = failures + 1 if state == "FAIL" else 0
                if failures >= self.max_failures:
                    raise ZooError(f"{failures} trials in a row failed (last: {error}); fix the cause and run the "
                                   "same command again: the study continues where it stopped")

    def _launch(self, study: Any, trials: list[Any], fixed: list[str], sweep_dir: Path) -> Any:
        from optuna.trial import TrialState

        from zoo.verbs import search

        jobs = []
        for t in trials:
            t.set_user_attr("run_dir", str(sweep_dir / f"trial_{t.number:03d}"))
            values = [search.as_override(k, v) for k, v in t.params.items()]
            _say(f"trial {t.number}: {' '.join(values)}")
            jobs.append([*fixed, *values, self._pruning_override(t), f"hydra.sweep.subdir=trial_{t.number:03d}"])
        try:
            with _Heartbeat(study._storage, [t._trial_id for t in trials], self.heartbeat_interval):
                return self.launcher.launch(jobs, initial_job_idx=trials[0].number)
        except BaseException:  # Ctrl-C, SIGTERM, a launcher error: the trials did not finish
            for t in trials:
                if study._storage.get_trial(t._trial_id).state == TrialState.RUNNING:
                    t.set_user_attr("error", "stopped (Ctrl-C, SIGTERM or a launcher error)")
                    study.tell(t, state=TrialState.FAIL)
            _say(f"stopped; trial(s) {', '.join(str(t.number) for t in trials)} marked FAIL. Run the same command "
                 "to continue the study")
            raise

    def _pruning_override(self, trial: Any) -> str:
        node = {"_target_": "zoo.verbs.search.OptunaPruning", "storage": self.url, "study": trial.study.study_name,
                "trial_id": trial._trial_id, "monitor": self.objective}
        if self.pruner_spec:
            node["pruner"] = self.pruner_spec
        return f"+callbacks.optuna_pruning={_hydra_value(node)}"

    def _tell(self, study: Any, trial: Any, result: Any) -> tuple:
        """The job's outcome -> COMPLETE (its metric), PRUNED (the callback said so), or FAIL (a user error, a crash,
        no or a non-finite metric), each said in one line; a crash's traceback is printed, not hidden."""
        import math
        import traceback

        from hydra.core.utils import JobStatus
        from optuna.trial import TrialState

        from zoo.errors import ZooError, one_line

        error = ""
        if result.status != JobStatus.COMPLETED:
            exc = result._return_value
            if not isinstance(exc, ZooError):
                traceback.print_exception(type(exc), exc, exc.__traceback__)
            error = f"{type(exc).__name__ + ': ' if not isinstance(exc, ZooError) else ''}{one_line(exc)}"
        else:
            metrics = result.return_value or {}
            frozen = study._storage.get_trial(trial._trial_id)
            attrs, reported = frozen.user_attrs, frozen.intermediate_values
            # The job's metrics dict; else the last evaluation the pruning callback reported (the same number)
            value = metrics.get(self.objective, reported[max(reported)] if reported else None)
            if "pruned_at" in attrs:
                study.tell(trial, state=TrialState.PRUNED)
                _say(f"trial {trial.number} PRUNED after evaluation {attrs['pruned_at']}")
                return "PRUNED", ""
            if value is None:
                error = f"the run returned no {self.objective} (it returned: {', '.join(sorted(metrics)) or 'nothing'})"
            elif not math.isfinite(float(value)):
                error = f"{self.objective} is {float(value)}"
            else:
                study.tell(trial, float(value))
                _say(f"trial {trial.number} COMPLETE {self.objective}={float(value):.4f}")
                return "COMPLETE", ""
        trial.set_user_attr("error", error[:500])
        study.tell(trial, state=TrialState.FAIL)
        print(f"zoo: error: trial {trial.number} failed: {error}", file=sys.stderr, flush=True)
        return "FAIL", error

    def _report(self, study: Any, fixed: list[str], sweep_dir: Path) -> None:
        from zoo.verbs import search

        rows = search.trial_rows(study, self.objective)
        search.write_csv(rows, sweep_dir / "trials.csv")
        lines = ["", f"zoo: search '{study.study_name}' ({search.redact(self.url)})", search.format_table(rows),
                 f"  trials table:  {sweep_dir / 'trials.csv'}"]
        complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
        if complete:
            best = study.best_trial
            command = search.best_command(fixed, best.params)
            (sweep_dir / "best_command.txt").write_text(command + "\n")
            lines += [f"  best trial:    {best.number} ({self.objective}={best.value:.4f}) in "
                      f"{best.user_attrs.get('run_dir', '?')}",
                      f"  run it again:  {command}"]
        lines.append(f"  compare:       tensorboard --logdir {sweep_dir}  (HParams tab)")
        print("\n".join(lines), flush=True)
