"""`python -m zoo test|predict ckpt_path=...`: evaluate a checkpoint, or one JSON line per input."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from zoo.core import owned
from zoo.core.build import build_callbacks_and_loggers, build_checked_data, has_test_data, load_module, start
from zoo.core.naming import output_root
from zoo.core.numbers import strict_json
from zoo.core.overrides import override_key, override_value, unquote
from zoo.core.recorded import checkpoint_overrides
from zoo.core.resume import checkpoint_argument
from zoo.core.stops import lightning_call, stopped_by
from zoo.errors import ZooError
from zoo.kit.hooks import find_hooks
from zoo.verbs.train import scalars


def _evaluate(verb: str, rest: list[str]) -> None:
    from zoo.core.checkpoint import evaluated_checkpoint

    path = checkpoint_argument(verb, rest)
    ckpt, task = evaluated_checkpoint(path, override_value(rest, "task"))
    # The input is free text (a sentence with commas, a path with brackets): it never goes through Hydra's grammar.
    text_input = next((unquote(o.partition("=")[2]) for o in rest if override_key(o) == "input"), None)
    user = [o for o in rest if override_key(o) not in ("ckpt_path", "task", "input")]
    if verb == "predict":
        check_predict_trainer_keys(user)
    check_predict_keys(verb, task, user)
    # `predict.<option>` is free-form (each task reads its own options): add the keys instead of failing on them.
    user = [f"+{o}" if o.startswith("predict.") else o for o in user]
    run_dir = evaluation_dir(verb, path, task)
    tail = [f"run_dir='{run_dir.resolve()}'", f"ckpt_path='{path.resolve()}'"]
    if verb == "predict":
        tail.append("logger=none")
    from zoo.core.config import compose, register_resolvers

    register_resolvers()
    cfg = compose(checkpoint_overrides(ckpt, task, user, tail))
    if text_input is not None:
        from omegaconf import open_dict

        with open_dict(cfg):
            cfg.input = text_input

    if verb == "test":
        test(cfg, str(path))
    else:
        predict(cfg, str(path))


# What predict applies of `trainer.*`: it drives the module itself, without a Lightning Trainer.
PREDICT_TRAINER_KEYS = ("trainer.num_threads", "trainer.channels_last", "trainer.float32_matmul_precision")


def check_predict_trainer_keys(user: list[str]) -> None:
    """A trainer setting predict would not apply (precision, accelerator, devices, ...) is refused, not dropped."""
    dropped = [o for o in user if override_key(o).startswith("trainer") and override_key(o) not in PREDICT_TRAINER_KEYS]
    if dropped:
        raise ZooError(f"{' '.join(dropped)}: zoo predict runs the model itself on the CPU, without a Trainer, so "
                       f"this would be dropped; of the trainer settings it applies {', '.join(PREDICT_TRAINER_KEYS)} "
                       "(the others apply to train and test)")


def check_predict_keys(verb: str, task: str, user: list[str]) -> None:
    """Every `predict.<key>` is one the task's predict hook reads (its module's PREDICT_KEYS), or one line: a misspelt
    `predict.topk=1` was dropped in silence, as `zoo test` drops any predict key."""
    import difflib
    import sys

    from zoo.core.config import compose

    asked = {o: override_key(o).split(".")[1] for o in user if override_key(o).startswith("predict.")}
    if not asked:
        return
    if verb != "predict":
        raise ZooError(f"{next(iter(asked))}: predict.* options are for `zoo predict`; zoo {verb} would drop it")
    try:
        fn = find_hooks(compose([f"task={task}"]).task).predict
    except Exception:  # noqa: BLE001 - a task that does not compose: the verb's own compose says why, in one line
        return
    keys = tuple(getattr(sys.modules.get(getattr(fn, "__module__", "")), "PREDICT_KEYS", ()))
    for override, key in asked.items():
        if key not in keys:
            near = difflib.get_close_matches(key, keys, n=1)
            hint = f"did you mean predict.{near[0]}? " if near else ""
            raise ZooError(f"{override}: {task}'s predict reads no predict.{key}, so it would be dropped; {hint}"
                           f"it reads {', '.join(f'predict.{k}' for k in keys) or 'no predict.* option'}")


def evaluation_dir(verb: str, path: Path, task: str) -> Path:
    """Where an evaluation writes: inside the run it evaluates (`<run>/test/<date>`: its logs beside the training's,
    not a folder that looks like another run), `predict` into the run itself (rl's episode.gif); a checkpoint outside
    a run gets `outputs/<task>/<verb>_<date>`."""
    from datetime import datetime

    from zoo.core.naming import check_writable

    stamp = f"{datetime.now():%Y-%m-%d_%H-%M-%S}"
    ckpt = path.resolve()
    if ckpt.parent.name != "checkpoints":
        return output_root() / task / f"{verb}_{stamp}"
    run = ckpt.parent.parent
    if verb == "predict":
        return run
    check_writable(run / "test", "the test's logs in", "copy the run to a writable folder and test the copy there")
    return run / "test" / stamp


def test(cfg: DictConfig, ckpt_path: str) -> dict:
    from lightning.pytorch.callbacks import ModelCheckpoint

    from zoo.core.trainer import build_trainer, prepare_module

    start(cfg)
    module = load_module(cfg, ckpt_path)
    datamodule = build_checked_data(cfg, module)
    if not has_test_data(datamodule, module):
        raise ZooError(f"task {cfg.task.name} has no test data to evaluate {ckpt_path} on")
    callbacks, loggers = build_callbacks_and_loggers(cfg, [])
    callbacks = [c for c in callbacks if not isinstance(c, ModelCheckpoint)]
    trainer = build_trainer(cfg, callbacks, loggers)
    if trainer.is_global_zero:
        owned.make_dirs(cfg.run_dir)  # this test's folder, made here so that a stopped test can take it back
    try:
        results = lightning_call(trainer, trainer.test, prepare_module(module, cfg.trainer), datamodule=datamodule)
    except BaseException as e:
        if (stopped_by(e) or isinstance(e, ZooError)) and trainer.is_global_zero:
            import logging

            logging.shutdown()
            owned.remove(cfg.run_dir)  # a stopped test's partial logs are no record of anything; never the run's
        raise
    metrics = results[0] if results else {}
    if trainer.is_global_zero and not any(Path(cfg.run_dir).iterdir()):
        owned.remove(cfg.run_dir)  # nothing logged there (logger=none)
    if trainer.is_global_zero:
        print(strict_json({"checkpoint": str(ckpt_path), **scalars(metrics)}), flush=True)
    return metrics


def predict(cfg: DictConfig, ckpt_path: str) -> None:
    """One JSON line per input. The task's predict function drives the module itself (no Trainer: it reads files,
    text or an environment), so of the trainer switches only the process-wide ones and channels_last apply here;
    torch.compile would hand it a wrapper without the module's own methods."""
    import torch

    from zoo.core.trainer import prepare_module

    start(cfg)
    module = load_module(cfg, ckpt_path)
    if cfg.trainer.get("channels_last"):
        module = prepare_module(module, {"channels_last": True})
    fn = find_hooks(cfg.task).need("predict", "predict")
    with torch.inference_mode():
        for row in fn(module, cfg, cfg.get("input")):
            print(strict_json(row), flush=True)


def test_main(rest: list[str]) -> None:
    _evaluate("test", rest)


def predict_main(rest: list[str]) -> None:
    _evaluate("predict", rest)
