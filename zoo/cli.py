"""`python -m zoo <verb> ...`: train | test | predict | export | serve | bench | list.

Heavy imports (torch, lightning, hydra) happen inside the verbs, so `--help` answers at once.
`sys.argv` is never rewritten: Lightning's DDP launcher re-runs this exact command line for ranks 1..N-1, and those
children load rank 0's resolved config from its run directory instead of composing again (no `${now:}` drift, no
nested multirun sweeps).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from zoo.errors import ZooError, one_line

USAGE = """usage: python -m zoo <command> [key=value ...]

commands:
  train [overrides]               fit a task, then test its best checkpoint
                                  e.g. python -m zoo train task=vision/resnet trainer.max_epochs=5
                                  Hydra flags work: --cfg job, --help, -m (multirun sweeps)
  train ckpt_path=last|<run dir>|<file.ckpt>
                                  resume an interrupted or finished run (same run dir and TensorBoard)
  test ckpt_path=<file.ckpt>      evaluate a checkpoint on its task's test data
  predict ckpt_path=<file.ckpt> input=<file|folder|text|-> [predict.<option>=...]
                                  one JSON line per input (input=- reads texts from standard input)
  export ckpt_path=<ckpt|run dir|last> [export.format=onnx|torchscript|exported_program]
         [export.quantize=none|int8] [export.out=<dir>]
                                  the model file + model.json in <run dir>/export/, parity-checked on real data
  serve ckpt_path=<ckpt|run dir|last|export dir> [serve.port=8000] [serve.backend=torch|onnxruntime]
         [serve.max_batch_size=32]
                                  HTTP inference on 127.0.0.1: POST /predict, GET /health, GET /metadata
  bench task=<task> [bench.precision=[32-true,bf16-mixed]] [bench.compile=[false,true]] [bench.steps=20]
                                  throughput, MFU, memory and energy per setting: a table, CSV and plot
  list [task]                     tasks and experiment presets; with a task, its model names

Runs are written to outputs/<task>/<date>_<time>/ (config.yaml, checkpoints/, tensorboard/);
watch them with: tensorboard --logdir outputs
"""


def main(argv: list[str] | None = None) -> None:
    try:
        _main(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:  # `python -m zoo list | head`
        sys.stderr.close()


def _main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    if argv[0] == "--version":
        from zoo import __version__

        print(__version__)
        return
    verb, rest = argv[0], argv[1:]
    try:
        if verb == "train":
            _train(rest)
        elif verb in ("test", "predict"):
            _evaluate(verb, rest)
        elif verb == "list":
            _list(rest)
        elif verb == "export":
            _export(rest)
        elif verb == "serve":
            _serve(rest)
        elif verb == "bench":
            from zoo.bench import main as bench

            bench(rest)
        else:
            raise ZooError(f"unknown command '{verb}': use train, test, predict, export, serve, bench or list "
                           "(python -m zoo --help)")
    except ZooError as e:
        fail(e)


def fail(e: ZooError) -> None:
    print(f"zoo: error: {one_line(e)}", file=sys.stderr, flush=True)
    sys.exit(2)


# ----------------------------------------------------------------------------------------------------- train
def _train(rest: list[str]) -> None:
    from zoo.ddp import CHILD_CONFIG_ENV

    if os.environ.get(CHILD_CONFIG_ENV) and os.environ.get("LOCAL_RANK", "0") != "0":
        return _train_child(Path(os.environ[CHILD_CONFIG_ENV]))

    from hydra._internal.utils import _run_hydra, get_args_parser

    from zoo.config import CONFIG_DIR, check_overrides, register_resolvers, run_id

    register_resolvers()
    parser = get_args_parser()
    args = parser.parse_args(rest)
    if not (args.help or args.hydra_help or args.info or args.shell_completion):
        args.overrides = resolve_resume(args.overrides)
        check_overrides(args.overrides)
        warn_elastic_store()
        run_id()  # the launcher's name for the run, now: a refusal is one line here, a traceback inside Hydra
    # Under torchrun/srun every rank runs this: `${zoo_writer:}` in configs/hydra lets one write .hydra/ and cli.log.
    _run_hydra(args=args, args_parser=parser, task_function=TrainJob(), config_path=str(CONFIG_DIR),
               config_name="train")


def warn_elastic_store() -> None:
    """torchrun keeps its rendezvous store across restarts by default, and a restarted gloo/NCCL group can hang or
    fail on the last attempt's keys (pytorch/pytorch#135712): say so once, where an elastic multi-node run starts."""
    env = os.environ
    if (env.get("RANK") == "0" and env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
            and int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")) > 0 and env.get("WORLD_SIZE") != env.get("LOCAL_WORLD_SIZE")):
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
    from zoo.config import register_resolvers

    register_resolvers()
    return TrainJob()


def _train_job(cfg) -> dict:  # noqa: ANN001 - Hydra passes a DictConfig; the metrics go back to the sweeper
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from zoo import run

    hydra_cfg = HydraConfig.get()
    overrides = list(hydra_cfg.overrides.task)
    # In a search (hydra/sweeper=zoo_optuna) a failed trial is the sweeper's to record as FAIL and to report in one
    # line, and the search goes on; anywhere else the failure ends the command with its one line.
    searcher = "zoo_optuna" in str(hydra_cfg.sweeper.get("_target_", ""))
    in_search = searcher and hydra_cfg.mode == RunMode.MULTIRUN
    if searcher and not in_search:
        print("zoo: warning: a search (hparams_search=...) runs only with -m; this is one run with the task's "
              "own values", file=sys.stderr, flush=True)
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    resume = None
    try:
        resume = check_resume_task(cfg)
        return run.train(cfg, overrides, resume)
    except ZooError as e:
        if resume is None:
            remove_failed_run(Path(cfg.run_dir))
        if in_search:
            raise
        fail(e)
    except SIGTERMException:  # a SystemExit without a code: without this the stopped run would exit 0
        hint = "the search continues with the same command" if in_search else \
            f"continue with `python -m zoo train ckpt_path={cfg.run_dir}`"
        print(f"zoo: error: stopped by SIGTERM; last.ckpt was saved, {hint}", file=sys.stderr, flush=True)
        sys.exit(143)


def remove_failed_run(run_dir: Path) -> None:
    """A new run that stopped on bad input before saving any checkpoint leaves nothing worth keeping: remove its
    folder, so that `ls outputs/`, TensorBoard and `ckpt_path=last` see only real runs. (Crashes keep theirs: the
    traceback in cli.log is what a bug report needs.)"""
    import shutil

    from zoo.ddp import is_lightning_child, launcher_rank

    if is_lightning_child() or launcher_rank() != 0 or not run_dir.is_dir() or any(run_dir.rglob("*.ckpt")):
        return
    logging.shutdown()  # close cli.log before its folder goes
    shutil.rmtree(run_dir, ignore_errors=True)


def _train_child(config_file: Path) -> None:
    """DDP rank > 0 started by Lightning: same resolved config, same run dir, no Hydra run of its own."""
    from omegaconf import OmegaConf

    from zoo import run

    saved = OmegaConf.load(config_file)
    cfg = saved.config
    try:  # rank 0's checkpoint, also when it found one itself (a restarted job's last.ckpt)
        run.train(cfg, list(saved.overrides), saved.get("resume", cfg.get("ckpt_path")))
    except ZooError as e:
        fail(e)


def _override_value(overrides: list[str], key: str) -> str | None:
    for o in overrides:
        k, sep, v = o.partition("=")
        if sep and k.lstrip("+") == key:
            return v.strip("'\"")
    return None


def _config_dir() -> Path:
    from zoo.config import CONFIG_DIR

    return CONFIG_DIR


def _output_root() -> Path:
    return Path(os.environ.get("ZOO_OUTPUT_ROOT", "outputs"))


def _carried(overrides: list[str]) -> list[str]:
    """Overrides of an earlier run worth re-applying: not its checkpoint, run dir or Hydra internals."""
    return [o for o in overrides if not o.lstrip("+~").startswith(("ckpt_path=", "hydra.", "run_dir="))]


def _unquote(value: str) -> str:
    """`'a, b'` -> `a, b`: the quoting Hydra needed, still accepted where the zoo reads the value itself."""
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value


def _key(override: str) -> str:
    return override.partition("=")[0].lstrip("+~")


def merge_overrides(earlier: list[str], later: list[str]) -> list[str]:
    """Earlier overrides, then later ones, one per key (the later wins): resuming twice with
    `trainer.max_epochs=20` must not pile up copies, and a repeated `+key=` would fail to compose."""
    keys = {_key(o) for o in later}
    return [o for o in earlier if _key(o) not in keys] + list(later)


def composed_task(overrides: list[str]) -> str:
    """The task these group choices select, as the composed config says (a preset may set it, not only `task=`)."""
    from zoo.config import compose, explain, register_resolvers

    register_resolvers()
    try:  # group choices only: one composition (the full override and value checks run once, later)
        return str(compose(overrides).task.name)
    except Exception as e:  # noqa: BLE001 - Hydra's composition errors, as one line
        raise ZooError(explain(e, overrides)) from None


def latest_run_checkpoint(task: str, pattern: str, verb: str) -> Path:
    """The newest checkpoint matching `pattern` under the task's runs: what `ckpt_path=last` means."""
    found = sorted((_output_root() / task).glob(f"*/checkpoints/{pattern}"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ZooError(f"ckpt_path=last: no earlier run of {task} under {_output_root() / task}; {verb} one with "
                       f"`python -m zoo train task={task}` or pass task=<domain>/<name>")
    return found[-1]


def resolve_resume(overrides: list[str]) -> list[str]:
    """`ckpt_path=last|<run dir>|<file>` -> continue that run: its overrides, its run dir, its last checkpoint.

    Everything is checked before Hydra starts, because Hydra then writes `.hydra/` into the run directory: a resume
    that would fail (another task's run, a corrupt file) must not touch that run's files.
    """
    value = _override_value(overrides, "ckpt_path")
    if value in (None, "", "null", "None"):
        return overrides
    from zoo.checkpoint import checkpoint_task, find_last, load_checkpoint

    user = [o for o in overrides if _key(o) != "ckpt_path"]
    if value == "last":
        task = composed_task([o for o in user if _key(o) in ("task", "experiment")])
        ckpt = latest_run_checkpoint(task, "last.ckpt", "start")
    else:
        path = Path(value).expanduser()
        if path.is_dir():
            ckpt = find_last(path)
            if ckpt is None:
                raise ZooError(f"{path} holds no checkpoints/last.ckpt; point ckpt_path at a run directory "
                               "or a .ckpt file")
        else:
            ckpt = path
    saved = load_checkpoint(ckpt)  # fails early, in one line, on a missing or corrupt file
    task = checkpoint_task(saved, ckpt)
    ckpt = ckpt.resolve()
    run_dir = ckpt.parent.parent
    # The checkpoint carries the overrides of the run that wrote it: the run's own record, which a failed
    # later command cannot have changed.
    previous = _carried([str(o) for o in saved["zoo"].get("overrides", [])])
    in_run = ckpt.parent.name == "checkpoints"
    merged = merge_overrides(previous, user) if in_run else user
    asked = composed_task([o for o in merged if _key(o) in ("task", "experiment")])  # the groups pick the task
    if asked != task:
        raise ZooError(f"checkpoint {ckpt} is from task {task}, but these overrides select {asked}; resume it "
                       f"without the other task's preset, or fine-tune from it with the task's pretrained option")
    if in_run:
        return merged + [f"hydra.run.dir='{run_dir}'", f"ckpt_path='{ckpt}'"]
    return user + [f"ckpt_path='{ckpt}'"]


def check_resume_task(cfg) -> str | None:  # noqa: ANN001
    """The checkpoint this job continues: `ckpt_path`, or its run's last.ckpt when a launcher restarted it."""
    restart = None if cfg.get("ckpt_path") else restart_checkpoint(Path(cfg.run_dir))
    path = cfg.get("ckpt_path") or restart
    if not path:
        return None
    from zoo.checkpoint import checkpoint_task, load_checkpoint

    saved = load_checkpoint(path)
    task = checkpoint_task(saved, path)
    if restart:
        logging.getLogger("zoo").warning(
            "%s already holds this job's run (a torchrun restart, a SLURM requeue, or the same job id again): "
            "continuing from %s (epoch %s, step %s)", cfg.run_dir, path, saved.get("epoch"), saved.get("global_step"))
    if task != cfg.task.name:
        raise ZooError(f"checkpoint {path} is from task {task}, not {cfg.task.name}; resume it with "
                       f"task={task}, or fine-tune from it with the task's pretrained=<file> option")
    return str(path)


def restart_checkpoint(run_dir: Path) -> Path | None:
    """A job that torchrun restarted or SLURM requeued continues from its run's last.ckpt, with no new arguments.

    Only runs named by their launcher (torchrun's run id, the SLURM job) can find a run dir already there: the job id
    names the run, so starting the same id again continues it. (Not torchrun's restart count: an agent whose own
    worker did not fail restarts its workers with count 0, and every rank must agree on resuming.)"""
    from zoo.config import launcher_named_run

    # Lightning's own SLURM requeue (SIGUSR1 in an sbatch job) saves hpc_ckpt_<n>.ckpt in the run dir: the newest wins.
    found = [p for p in [run_dir / "checkpoints" / "last.ckpt", *run_dir.glob("hpc_ckpt_*.ckpt")] if p.is_file()]
    if not launcher_named_run() or not found:
        return None
    return max(found, key=lambda p: p.stat().st_mtime)


# ---------------------------------------------------------------------------------------------- test/predict
def _evaluate(verb: str, rest: list[str]) -> None:
    from datetime import datetime

    from zoo.checkpoint import checkpoint_task, load_checkpoint

    path = _checkpoint_argument(verb, rest)
    ckpt = load_checkpoint(path)
    task = checkpoint_task(ckpt, path)
    asked = _override_value(rest, "task")
    if asked and asked != task:
        raise ZooError(f"checkpoint {path} is from task {task}, not {asked}; drop task=... or pass a {asked} checkpoint")
    # The input is free text (a sentence with commas, a path with brackets): it never goes through Hydra's grammar.
    text_input = next((_unquote(o.partition("=")[2]) for o in rest if _key(o) == "input"), None)
    user = [o for o in rest if _key(o) not in ("ckpt_path", "task", "input")]
    # `predict.<option>` is free-form (each task reads its own options): add the keys instead of failing on them.
    user = [f"+{o}" if o.startswith("predict.") else o for o in user]
    # Training-time device settings (DDP, 8 GPUs) are not the evaluation's: only explicit ones apply.
    carried = [o for o in _carried(ckpt["zoo"].get("overrides", [])) if not o.startswith(("trainer", "task="))]
    stamp = f"{datetime.now():%Y-%m-%d_%H-%M-%S}"
    run_dir = _output_root() / task / f"{verb}_{stamp}"
    overrides = [f"task={task}", *carried, *user, f"run_dir='{run_dir.resolve()}'", f"ckpt_path='{path.resolve()}'"]
    if verb == "predict":
        overrides.append("logger=none")
    from zoo.config import check_overrides, compose, register_resolvers

    register_resolvers()
    check_overrides(overrides, sweeps=False)
    cfg = compose(overrides)
    if text_input is not None:
        from omegaconf import open_dict

        with open_dict(cfg):
            cfg.input = text_input
    from zoo import run

    if verb == "test":
        run.test(cfg, str(path))
    else:
        run.predict(cfg, str(path))


# ------------------------------------------------------------------------------------------------------ list
def _list(rest: list[str]) -> None:
    from zoo.config import describe, options

    if rest:
        return _list_task(rest[0])
    print("tasks (task=...):")
    for name in options("task"):
        print(f"  {name:<22} {describe('task', name)}")
    print("experiment presets (experiment=...):")
    for name in options("experiment"):
        print(f"  {name:<22} {describe('experiment', name)}")
    print("trainer presets (trainer=...): " + ", ".join(options("trainer")))
    print("searches (-m hparams_search=...): " + ", ".join(options("hparams_search")))
    print("launchers (hydra/launcher=...): " + ", ".join(n for n in options("hydra/launcher")))
    print("`python -m zoo list <task>` shows a task's model names")


def _list_task(task: str) -> None:
    from omegaconf import OmegaConf

    from zoo.config import options
    from zoo.config import import_attr

    if task not in options("task"):
        raise ZooError(f"unknown task '{task}': available: {', '.join(options('task'))}")
    cfg = OmegaConf.load(_config_dir() / "task" / f"{task}.yaml")
    spec = OmegaConf.select(cfg, "task.models")
    if not spec:
        print(f"{task}: no model list")
        return
    print(f"models for {task} (task.module.arch=... or the task's model option):")
    for name in import_attr(spec)():
        print(f"  {name}")


# ------------------------------------------------------------------------------------------------ export/serve
def _checkpoint_argument(verb: str, rest: list[str]) -> Path:
    """ckpt_path=<file|run dir|last> -> the checkpoint file (a run dir gives its best) for test, predict, export
    and serve."""
    bad = [a for a in rest if a.startswith("-")]
    if bad:
        raise ZooError(f"`zoo {verb}` takes key=value overrides only, not {bad[0]}")
    value = _override_value(rest, "ckpt_path")
    if not value:
        raise ZooError(f"`zoo {verb}` needs ckpt_path=<file.ckpt|run dir|last> (e.g. outputs/<task>/<run>)")
    if value == "last":
        task = composed_task([o for o in rest if _key(o) in ("task", "experiment")])
        value = str(latest_run_checkpoint(task, "*.ckpt", "train").parent.parent)
    path = Path(value).expanduser()
    if path.is_dir():
        best = sorted((path / "checkpoints").glob("best*.ckpt")) or sorted(path.glob("best*.ckpt"))
        path = best[-1] if best else (path / "checkpoints" / "last.ckpt")
    return path


def _deploy_config(verb: str, rest: list[str], path: Path):  # noqa: ANN202 - (DictConfig, checkpoint dict)
    """The checkpoint's task config with its training overrides, plus free-form `<verb>.<option>` keys."""
    from zoo.checkpoint import checkpoint_task, load_checkpoint
    from zoo.config import check_overrides, compose, register_resolvers

    ckpt = load_checkpoint(path)
    task = checkpoint_task(ckpt, path)
    asked = _override_value(rest, "task")
    if asked and asked != task:
        raise ZooError(f"checkpoint {path} is from task {task}, not {asked}; drop task=... or pass a {asked} checkpoint")
    user = [o for o in rest if _key(o) not in ("ckpt_path", "task", "experiment")]
    user = [f"+{o}" if o.startswith(f"{verb}.") else o for o in user]
    carried = [o for o in _carried(ckpt["zoo"].get("overrides", [])) if not o.startswith(("trainer", "task="))]
    run_dir = path.resolve().parent.parent if path.resolve().parent.name == "checkpoints" else path.resolve().parent
    overrides = [f"task={task}", *carried, *user, f"run_dir='{run_dir}'", f"ckpt_path='{path.resolve()}'",
                 "logger=none"]
    register_resolvers()
    check_overrides(overrides, sweeps=False)
    return compose(overrides), ckpt


def _export(rest: list[str]) -> None:
    from zoo.export import export

    path = _checkpoint_argument("export", rest)
    cfg, ckpt = _deploy_config("export", rest, path)
    export(cfg, str(path), ckpt)


def _serve(rest: list[str]) -> None:
    from zoo.serve import serve, serve_options

    value = _override_value(rest, "ckpt_path")
    exported = Path(value).expanduser() if value else None
    if exported is not None and exported.is_file() and exported.suffix in (".onnx", ".ts", ".pt2"):
        exported = exported.parent
    if exported is not None and (exported / "model.json").is_file():  # an export folder: no checkpoint needed
        return serve(serve_options(rest), export_dir=exported)
    path = _checkpoint_argument("serve", rest)
    cfg, _ = _deploy_config("serve", rest, path)
    serve(dict(cfg.get("serve") or {}), cfg=cfg, ckpt_path=str(path))
