"""`python -m zoo train`: Hydra runs the job; fit, then test the best checkpoint."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import DictConfig

from zoo.base import plain
from zoo.core.build import (
    build_callbacks_and_loggers,
    build_data_and_module,
    has_test_data,
    save_run_config,
    save_run_metrics,
    start,
)
from zoo.core.ddp import (
    CHILD_CONFIG_ENV,
    DIST_ENV,
    die_with_parent,
    is_lightning_child,
    launcher_rank,
    release_process_group,
    restore_dist_env,
)
from zoo.core.naming import output_root
from zoo.core.recorded import frozen_overrides
from zoo.core.resume import check_resume_task, resolve_resume, resumed_from
from zoo.core.runlock import claim_for, discard_new_folders
from zoo.core.stops import Stopped, lightning_call, stopped_by
from zoo.core.sweeps import continue_trial, finish_hint
from zoo.errors import ZooError, fail


def main(rest: list[str]) -> None:
    if os.environ.get(CHILD_CONFIG_ENV) and os.environ.get("LOCAL_RANK", "0") != "0":
        die_with_parent()
        return _train_child(Path(os.environ[CHILD_CONFIG_ENV]))

    from zoo.core import hydra_run
    from zoo.core.config import CONFIG_DIR, check_output_dir, check_overrides, register_resolvers
    from zoo.core.naming import run_id

    register_resolvers()
    args, parser = hydra_run.parse_args(rest)
    if not hydra_run.only_prints(args):
        args.overrides = resolve_resume(args.overrides)
        composed = check_overrides(args.overrides)
        warn_elastic_store()
        run_id()  # the launcher's name for the run, now: a refusal is one line here, a traceback inside Hydra
        if not args.cfg:  # --cfg only prints
            check_output_dir(composed, args.multirun)
            claim_for(composed, args.multirun, args.overrides)  # one run per folder, before Hydra writes there
    # Under torchrun/srun every rank runs this: `${zoo_writer:}` in configs/hydra lets one write .hydra/ and cli.log.
    try:
        hydra_run.run(args, parser, TrainJob(), CONFIG_DIR, "train")
    except BaseException as e:
        if stopped_by(e):  # stopped while Hydra set the job up: the new folder holds nothing worth keeping
            discard_new_folders()
        raise


def warn_elastic_store() -> None:
    """torchrun keeps its rendezvous store across restarts by default, and a restarted gloo/NCCL group can hang or
    fail on the last attempt's keys (pytorch/pytorch#135712): say so once, where an elastic multi-node run starts."""
    env = os.environ
    if (env.get("RANK") == "0" and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
            and int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0
            and env.get("WORLD_SIZE") != env.get("LOCAL_WORLD_SIZE")):
        print("zoo: warning: torchrun restarts on several nodes need TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (and "
              "--rdzv-id=<name>) in every agent's environment, or a restart can hang (docs/scale.md)",
              file=sys.stderr, flush=True)


class TrainJob:
    """Hydra's task function (`_train_job`), as an object: a submitit worker unpickles it before Hydra resolves the
    job's config there, and unpickling registers the zoo's resolvers (`${zoo_run_id:}` in the sweep dir)."""

    def __call__(self, cfg) -> dict:  # noqa: ANN001 - a DictConfig
        return _train_job(cfg)

    def __reduce__(self) -> tuple:
        return _unpickled_train_job, ()


def _unpickled_train_job() -> TrainJob:
    from zoo.core.config import register_resolvers

    register_resolvers()
    return TrainJob()


def _train_job(cfg) -> dict:  # noqa: ANN001 - Hydra passes a DictConfig; the metrics go back to the sweeper
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode


    hydra_cfg = HydraConfig.get()
    overrides = frozen_overrides(hydra_cfg.overrides.task, cfg)
    # In a search (hydra/sweeper=zoo_optuna) a failed trial is the sweeper's to record as FAIL and to report in one
    # line, and the search goes on; anywhere else the failure ends the command with its one line.
    searcher = "zoo_optuna" in str(hydra_cfg.sweeper.get("_target_", ""))
    in_search = searcher and hydra_cfg.mode == RunMode.MULTIRUN
    if searcher and not in_search:
        print("zoo: warning: a search (hparams_search=...) runs only with -m; this is one run with the task's "
              "own values", file=sys.stderr, flush=True)
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    resume = None
    sweep = str(hydra_cfg.sweep.dir) if hydra_cfg.mode == RunMode.MULTIRUN and not in_search else None
    try:
        if sweep and (finished := continue_trial(cfg, overrides)) is not None:
            return finished  # a continued sweep: this trial finished the first time
        resume = check_resume_task(cfg)
        return train(cfg, overrides, resume)
    except ZooError as e:
        if resume is None:
            remove_failed_run(Path(cfg.run_dir))
        if in_search:
            raise
        fail(e)
    except (SIGTERMException, KeyboardInterrupt, Stopped) as e:  # a stop asked for, not an error: 143 / 130
        if resume is None:
            remove_failed_run(Path(cfg.run_dir))
        stopped(cfg, stopped_by(e) or "SIGTERM", in_search, sweep)


def stopped(cfg: DictConfig, how: str, in_search: bool, sweep: str | None = None) -> NoReturn:
    """SIGTERM or Ctrl-C ended the run: what was kept and how to go on (for a sweep: how to finish all of it), one
    line; exit 143 / 130."""
    from zoo.core.rank_watch import resume_hint

    hint = "the search continues with the same command" if in_search else finish_hint(sweep) if sweep else \
        resume_hint(str(cfg.run_dir))
    print(f"zoo: stopped by {how}; {hint}", file=sys.stderr, flush=True)
    sys.exit(143 if how == "SIGTERM" else 130)


def remove_failed_run(run_dir: Path) -> None:
    """A new run that stopped on bad input before saving any checkpoint leaves nothing worth keeping: what this
    process made for it goes (the folder, and the task's folders above it where that leaves them empty), so that
    `ls outputs/`, TensorBoard and `ckpt_path=last` see only real runs. A folder that was there before the command
    keeps everything it held (zoo.core.owned). Crashes keep theirs: the traceback in cli.log is what a bug report
    needs."""
    from zoo.core import owned
    from zoo.core.ddp import is_lightning_child, launcher_rank
    from zoo.core.runlock import checkpoints

    if is_lightning_child() or launcher_rank() != 0 or not run_dir.is_dir() or checkpoints(run_dir):
        return
    logging.shutdown()  # close cli.log before it goes
    owned.remove(run_dir)


def _train_child(config_file: Path) -> None:
    """DDP rank > 0 started by Lightning: same resolved config, same run dir, no Hydra run of its own."""
    from omegaconf import OmegaConf


    saved = OmegaConf.load(config_file)
    if not isinstance(saved, DictConfig):  # written by save_run_config as a mapping; anything else is not a run's
        raise ZooError(f"{config_file} is not a zoo run config (a mapping with config, overrides, resume)")
    cfg = saved.config
    try:  # rank 0's checkpoint, also when it found one itself (a restarted job's last.ckpt)
        train(cfg, list(saved.overrides), saved.get("resume", cfg.get("ckpt_path")))
    except ZooError as e:
        fail(e)


log = logging.getLogger("zoo")


def train(cfg: DictConfig, overrides: list[str], resume: str | None) -> dict:
    """Fit, then test the best checkpoint; the run's one writer (global rank 0) also saves the resolved config that
    Lightning's DDP children load."""
    if is_lightning_child() or launcher_rank() != 0:
        return _train(cfg, overrides, resume)
    before = {k: os.environ[k] for k in DIST_ENV if k in os.environ}
    os.environ[CHILD_CONFIG_ENV] = str(save_run_config(cfg, overrides, resume))
    try:
        return _train(cfg, overrides, resume)
    finally:
        release_process_group()
        restore_dist_env(before)


def _train(cfg: DictConfig, overrides: list[str], resume: str | None) -> dict:
    from zoo.core.rank_watch import raise_peer_failure
    from zoo.core.trainer import build_trainer, prepare_module

    start(cfg)
    with resumed_from(resume):  # the module skips its pretrained source: the checkpoint restores every tensor
        datamodule, module = build_data_and_module(cfg)
    callbacks, loggers = build_callbacks_and_loggers(cfg, overrides)
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    # before the trainer: a task that refuses torch.compile says so before Lightning's device lines
    fit_module = prepare_module(module, cfg.trainer)
    try:  # what zoo.core.validate does not check up front (a new Lightning setting) still ends in one line
        trainer = build_trainer(cfg, callbacks, loggers)
    except (MisconfigurationException, ValueError, TypeError) as e:
        first = " ".join(str(e).split())[:300]
        raise ZooError(f"Lightning refused the trainer settings ({first}); see them with "
                       "`python -m zoo train --cfg job`") from None

    try:
        trainer.fit(fit_module, datamodule=datamodule, ckpt_path=resume, weights_only=True)
    except SystemExit as e:  # Lightning ends a Ctrl-C'd fit with sys.exit(1), after saving last.ckpt
        if trainer.interrupted and e.code == 1:
            raise KeyboardInterrupt from None
        raise
    except MisconfigurationException as e:  # Lightning's word for a setting it refuses, e.g. max_epochs below a resume
        first = " ".join(str(e).split())
        raise ZooError(f"{first[:300]} (trainer settings: `python -m zoo train --cfg job`)") from None
    except RuntimeError as e:
        raise_peer_failure(e, trainer)
    if trainer.interrupted:
        raise ZooError(f"training interrupted; continue it with `python -m zoo train ckpt_path={cfg.run_dir}`")
    # the last evaluation's val/* (what a sweeper optimises), taken before trainer.test clears callback_metrics
    metrics = {k: v for k, v in scalars(trainer.callback_metrics).items() if k.startswith("val/")}
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.test_after_fit and has_test_data(datamodule, module):
        results = lightning_call(trainer, trainer.test, fit_module, datamodule=datamodule, ckpt_path=best or None,
                                 weights_only=True)  # a Ctrl-C here is a stop (130) too, not Lightning's exit 1
        metrics.update(results[0] if results else {})
    end_collectives(trainer)
    if trainer.is_global_zero:
        log_hparams(loggers, cfg, metrics)
        summarize(cfg, best, metrics)
        save_run_metrics(cfg, scalars(metrics))  # what `zoo reproduce` compares a re-run with
        from zoo.measure.timing import report_time

        report_time(trainer.callbacks)  # `zoo: time: ...`: where the run's time went (callbacks.time_split)
    finish_children(trainer)
    return metrics


def end_collectives(trainer: Any) -> None:
    """Every rank's last collective: past it, rank 0 knows each child finished its work, so the watch stops first
    (a child's exit is then no death). A child that died before it fails the barrier, said in one line."""
    from zoo.core.rank_watch import raise_peer_failure, watch_of

    watch = watch_of(trainer)
    if watch is not None:
        watch.stop()
    try:
        trainer.strategy.barrier("zoo-run-end")
    except RuntimeError as e:
        raise_peer_failure(e, trainer)


def finish_children(trainer: Any) -> None:
    """Rank 0, the run done: wait for the DDP children it started to end before the next job of a sweep starts."""
    from zoo.core.rank_watch import watch_of

    watch = watch_of(trainer)
    if watch is not None:
        watch.finish()


def scalars(metrics: dict) -> dict:
    out = {}
    for k, v in metrics.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


def flatten(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


def log_hparams(loggers: list, cfg: DictConfig, metrics: dict) -> None:
    """Fill TensorBoard's HParams tab: the flattened resolved config against the final metrics."""
    from lightning.pytorch.loggers import TensorBoardLogger

    params = {k: v for k, v in flatten(plain(cfg)).items() if not k.startswith("hydra.")}
    final = {f"final/{k}": float(v) for k, v in scalars(metrics).items()}
    for lg in loggers:
        if isinstance(lg, TensorBoardLogger):
            lg.log_hyperparams(params, metrics=final)
            lg.finalize("success")


def summarize(cfg: DictConfig, best: str, metrics: dict) -> None:
    run_dir = Path(cfg.run_dir)
    root = output_root()
    lines = [
        "",
        f"zoo: finished {cfg.task.name}",
        f"  run dir:         {run_dir}",
        f"  best checkpoint: {best or '(none saved)'}",
    ]
    for k, v in sorted(scalars(metrics).items()):
        lines.append(f"  {k:<16} {v:.4f}")
    inside = run_dir.resolve().is_relative_to(root.resolve())  # else a hydra.run.dir of its own: name that one
    lines.append(f"  watch:           tensorboard --logdir {root if inside else run_dir}")
    print("\n".join(lines), flush=True)
