"""Stops asked for (SIGTERM, Ctrl-C; SIGHUP, a closed terminal, taken as SIGTERM) in every verb and at every moment,
imports included: one line, exit 143 / 130.

Python turns Ctrl-C into KeyboardInterrupt where the program is; SIGTERM, by default, ends the process on the spot,
so `finally` blocks never run and temp files (an export's staging folder, a half-written file) stay. `install()`
makes SIGTERM raise `Stopped` the same way, so both unwind through the code's own clean-up. During a Lightning run
Lightning's own handler is in place (it calls this one after its own): it stops the loop at the next batch boundary
and the checkpoint on stop is saved, so this one then does nothing. Imports nothing heavy: the CLI installs it first.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any, NoReturn

EXIT_CODES = {"SIGTERM": 143, "Ctrl-C": 130}  # 128 + the signal's number, as shells report a signalled process


class Stopped(BaseException):
    """SIGTERM, raised where the program is (as Ctrl-C raises KeyboardInterrupt); not an Exception, so that
    `except Exception` handlers do not swallow it."""


_OWNER: int | None = None


def install() -> None:
    global _OWNER
    _OWNER = os.getpid()
    signal.signal(signal.SIGTERM, _on_sigterm)
    if hasattr(signal, "SIGHUP") and signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:  # nohup's SIG_IGN stays
        signal.signal(signal.SIGHUP, _on_sighup)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _OWNER:  # a forked worker (DataLoader): end as SIGTERM would have ended it
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if signal.getsignal(signal.SIGTERM) is not _on_sigterm:
        return  # Lightning's handler runs and called this one: it ends its loop itself, after saving
    if _importing_fragile(frame):
        _again_soon(signal.SIGTERM)
        return
    raise Stopped


def done() -> None:
    """The verb has ended: a SIGTERM arriving while the interpreter exits has nothing left to stop. Raised there, it
    lands inside an atexit callback (torch's) as a traceback after the verb's last line; it is ignored instead, and
    the process ends as the verb did."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _on_sighup(signum: int, frame: FrameType | None) -> None:
    """The terminal closed (SIGHUP): a stop like SIGTERM, delivered as one, so that whichever handler is in place
    (this module's, or Lightning's during a run: it saves last.ckpt at the next batch boundary) stops the work. By
    default SIGHUP ended the process on the spot: no last.ckpt, a partial checkpoint temp file left behind."""
    if os.getpid() != _OWNER:  # a forked worker: end as SIGHUP would have ended it
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGHUP)
        return
    os.kill(os.getpid(), signal.SIGTERM)


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C as Python's own handler, except that it waits for a FRAGILE package's import to finish."""
    if os.getpid() == _OWNER and _importing_fragile(frame):
        _again_soon(signal.SIGINT)
        return
    raise KeyboardInterrupt


def _again_soon(signum: int) -> None:
    """Deliver the stop again a moment later. Raised inside a FRAGILE import, it can cross torch's C++ start-up frames,
    where an exception aborts the process (SIGABRT), or leave numpy half-initialised (a RecursionError traceback
    instead of the stop)."""
    import threading

    timer = threading.Timer(0.005, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


# Packages whose import a stop must not cut: torch's runs C++ that calls back into Python; numpy's lazy submodules,
# cut half-way (scipy imports them through torchmetrics), recurse without end. Only these: the verbs import lazily
# all the time, and a stop deferred over every import could wait until the program had gone on past it.
FRAGILE = ("torch", "numpy")


def _importing_fragile(frame: FrameType | None) -> bool:
    """Whether `frame` runs inside an import, in code of a FRAGILE package."""
    fragile = importing = False
    while frame is not None:
        fragile = fragile or str(frame.f_globals.get("__name__", "")).split(".")[0] in FRAGILE
        importing = importing or frame.f_code.co_filename.startswith("<frozen importlib._bootstrap")
        frame = frame.f_back
    return fragile and importing


def stopped_by(exc: BaseException) -> str | None:
    """"SIGTERM" or "Ctrl-C" when `exc` is a stop (ours, Lightning's, Python's), else None."""
    if isinstance(exc, Stopped):
        return "SIGTERM"
    if isinstance(exc, KeyboardInterrupt):
        return "Ctrl-C"
    exceptions = sys.modules.get("lightning.pytorch.utilities.exceptions")
    if exceptions is not None and isinstance(exc, exceptions.SIGTERMException):
        return "SIGTERM"
    return None


def exit_stopped(how: str, hint: str = "") -> NoReturn:
    # the stop is under way: a second Ctrl-C (or one that a library re-delivers) must not cut its exit short
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(f"zoo: stopped by {how}" + (f"; {hint}" if hint else ""), file=sys.stderr, flush=True)
    if how == "Ctrl-C":
        # CPython ends the process by SIGINT (status -2, not 130) once a KeyboardInterrupt has passed through a
        # nested PyRun_* call (pybind11's exec), even when it was handled since: seen on a stopped ONNX export.
        # The clean-up has run by now (finally blocks, Lightning's save on stop); flush the logs and leave.
        import logging

        logging.shutdown()
        sys.stdout.flush()
        os._exit(EXIT_CODES[how])
    sys.exit(EXIT_CODES[how])


def lightning_call(trainer: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`trainer.fit/test/...(...)`, with Lightning's end of a Ctrl-C (its 'attempting graceful shutdown' and
    sys.exit(1)) raised as the KeyboardInterrupt it was."""
    try:
        return fn(*args, **kwargs)
    except SystemExit as e:
        if stopped_by(e) is None and e.code == 1 and trainer.interrupted:
            raise KeyboardInterrupt from None
        raise
