"""The one place the zoo runs Hydra's application machinery itself, and so the one use of a private Hydra function.

`python -m zoo train ...` hands Hydra the arguments after the verb. Hydra's public entry point, `@hydra.main`, reads
`sys.argv`, where the verb still stands; rewriting `sys.argv` to hide it would break Lightning's DDP children, which
re-run the command line as it is. `hydra.compose` (public) composes a config but has no run folder, job logging,
sweeps, launchers or callbacks. So the zoo calls what `@hydra.main` calls, `hydra._internal.utils._run_hydra`, with
Hydra's own argument parser: kept here, with `tests/test_hydra_run.py` checking the behaviour the zoo relies on
(run folder and logging, overrides, `-m` sweeps, `--cfg`), so that a Hydra release that changes it fails there.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any


def parse_args(rest: list[str]) -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    """Hydra's own command line (overrides, `-m`, `--cfg`, `--help`, ...) parsed from the arguments after the verb."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    args = parser.parse_args(rest)
    modes = [flag for flag, on in (("-m", args.multirun), ("--cfg", args.cfg), ("--info", args.info)) if on]
    if len(modes) > 1:  # Hydra's own refusal is a ValueError traceback
        from zoo.errors import ZooError

        raise ZooError(f"{' and '.join(modes)} cannot go together: --cfg and --info print one run's config or "
                       "set-up, -m runs a sweep; drop -m to see the first trial's (python -m zoo train --cfg job ...)")
    return args, parser


def only_prints(args: argparse.Namespace) -> bool:
    """Whether Hydra will only print (`--help`, `--hydra-help`, `--info`, shell completion) and run no job."""
    return bool(args.help or args.hydra_help or args.info or args.shell_completion)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser, task: Callable[[Any], Any], config_dir: Path,
        config_name: str) -> None:
    """What `@hydra.main(config_path=config_dir, config_name=...)` does with `args`: one job (or a sweep's jobs with
    `-m`) in its run folder with Hydra's logging, or the printing that `--cfg`/`--help` ask for."""
    from hydra._internal.utils import _run_hydra

    _run_hydra(args=args, args_parser=parser, task_function=task, config_path=str(config_dir),
               config_name=config_name)
