"""User-facing errors: the CLI prints them as one line, without a traceback."""

from __future__ import annotations

import sys
from typing import NoReturn


class ZooError(Exception):
    """An error the user caused and can fix (bad config, missing file, incompatible checkpoint).

    The message must name the problem and the fix in one line. Programming errors use ordinary
    exceptions and keep their traceback.
    """


def one_line(exc: BaseException) -> str:
    """The user-facing line of a ZooError, also when a DataLoader worker re-raised it.

    Worker processes wrap the original message in "Caught ZooError in DataLoader worker ... Original Traceback";
    the original message is the last line of that text.
    """
    text = str(exc).strip()
    if "Original Traceback" in text:
        last = text.splitlines()[-1]
        prefix = f"{type(exc).__module__}.{type(exc).__name__}: "
        text = last[len(prefix):] if last.startswith(prefix) else last
    return " ".join(text.split())


class NoOptimizerError(ZooError):
    """Training a module that was built for inference (load_from_checkpoint without an optimizer)."""

    def __init__(self, module: object) -> None:
        super().__init__(f"{type(module).__name__} was built without an optimizer (load_from_checkpoint is for "
                         "inference); train it through `python -m zoo train`, or pass optimizer=<partial>")


def fail(e: ZooError) -> NoReturn:
    """The CLI's end for an error the user can fix: one line on stderr, exit code 2."""
    print(f"zoo: error: {one_line(e)}", file=sys.stderr, flush=True)
    sys.exit(2)
