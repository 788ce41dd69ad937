"""`python -m zoo <verb> ...`: train | reproduce | test | predict | export | serve | bench | list.

Heavy imports (torch, lightning, hydra) happen inside the verbs, so `--help` answers at once.
`sys.argv` is never rewritten: Lightning's DDP launcher re-runs this exact command line for ranks 1..N-1, and those
children load rank 0's resolved config from its run directory instead of composing again (no `${now:}` drift, no
nested multirun sweeps).
"""

from __future__ import annotations

import sys

from zoo.errors import ZooError, fail

USAGE = """usage: python -m zoo <command> [key=value ...]

commands:
  train [overrides]               fit a task, then test its best checkpoint
                                  e.g. python -m zoo train task=vision/resnet trainer.max_epochs=5
                                  Hydra flags work: --cfg job, --help, -m (multirun sweeps)
  train ckpt_path=last|<run dir>|<file.ckpt>
                                  resume an interrupted or finished run (same run dir and TensorBoard)
  reproduce <run dir|file.ckpt> [reproduce.tolerance=0.03] [overrides]
                                  train a finished run again from its record into a new folder: environment
                                  differences first, then both runs' final metrics side by side (exit 1 if apart)
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

Runs are written to outputs/<task>/<date>_<time>_<pid>/ (config.yaml, checkpoints/, tensorboard/);
watch them with: tensorboard --logdir outputs
"""

def verb_help(verb: str) -> str:
    """The usage lines of one command (its block in USAGE, continuation lines included)."""
    lines = USAGE.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {verb} "))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  ") and lines[i][2] != " "
                or not lines[i].strip()), len(lines))
    block = "\n".join(line[2:] for line in lines[start:end])
    return f"usage: python -m zoo {block}\n\nall commands: python -m zoo --help"


# verb -> "module:function(rest)"; imported only when used, so `--help` answers at once
VERBS = {
    "train": "zoo.verbs.train:main",
    "reproduce": "zoo.verbs.reproduce:main",
    "test": "zoo.verbs.evaluate:test_main",
    "predict": "zoo.verbs.evaluate:predict_main",
    "list": "zoo.verbs.listing:main",
    "export": "zoo.verbs.export:main",
    "serve": "zoo.verbs.serve:main",
    "bench": "zoo.verbs.bench:main",
}


def main(argv: list[str] | None = None) -> None:
    from zoo.core import stops

    stops.install()  # first: a SIGTERM while the verb imports torch is a stop too
    try:
        _main(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:  # `python -m zoo list | head`
        sys.stderr.close()
    except BaseException as e:  # noqa: BLE001 - a stop at any moment (imports, evaluation, export): one line
        how = stops.stopped_by(e)
        if how is None:
            raise
        stops.exit_stopped(how)
    finally:
        if argv is None:  # this process's own command: it ends now
            stops.done()


def _main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    if argv[0] == "--version":
        from zoo import __version__

        print(__version__)
        return
    verb, rest = argv[0], argv[1:]
    if verb in VERBS and verb != "train" and any(a in ("-h", "--help") for a in rest):  # train: Hydra's own help
        print(verb_help(verb))
        return
    try:
        if verb not in VERBS:
            raise ZooError(f"unknown command '{verb}': use {', '.join(list(VERBS)[:-1])} or {list(VERBS)[-1]} "
                           "(python -m zoo --help)")
        from zoo.base import import_attr

        import_attr(VERBS[verb])(rest)
    except ZooError as e:
        fail(e)
