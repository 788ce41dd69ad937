"""A dead or hung rank, said in one line: the watch over Lightning's DDP children and the collective-error reader.

Apart from zoo.core.ddp so that the process-role helpers stay free of Lightning (imported before a task's lean-import
settings apply)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, NoReturn

from lightning.pytorch.callbacks import Callback

from zoo.errors import ZooError

_PEER_ERRORS = ("connection reset by peer", "connection closed by peer", "broken pipe", "gloo", "nccl",
                "socket timeout", "timed out", "connection refused")


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def resume_hint(run_dir: str) -> str:
    """How to go on after a stop: continue the run from its checkpoint, or, when it stopped before saving one (and a
    new run's empty folder is then removed), start the same command again."""
    from pathlib import Path

    if any((Path(run_dir) / "checkpoints").glob("*.ckpt")):
        return f"last.ckpt holds the run up to its last save; continue with `python -m zoo train ckpt_path={run_dir}`"
    return f"no checkpoint was saved; start again with `{original_command()}`"


def original_command() -> str:
    """This process's command line as the user typed it (Lightning's DDP children run the same one)."""
    import shlex

    return "python -m zoo " + shlex.join(sys.argv[1:])


def peer_failure(error: BaseException, trainer: Any) -> str | None:
    """A failed collective caused by a dead peer -> the one line to print, else None (a different error)."""
    if trainer is None or trainer.world_size <= 1 or not isinstance(error, RuntimeError):
        return None
    if not any(s in str(error).lower() for s in _PEER_ERRORS):
        return None
    watch = watch_of(trainer)
    dead = watch.dead_ranks() if watch is not None else []
    # No dead process in sight: a peer on another node, or one that hangs (the collective timeout ended the wait).
    who = f"DDP {', '.join(dead)} died" if dead else "another DDP rank of this run died or stopped answering"
    import re

    # drop the "[.../pair.cc:545]" prefix
    first = re.sub(r"^\[[^\]]*\]\s*", "", str(error).strip().splitlines()[0]).split(". ")[0][:100]
    line = f"{who} (this rank {trainer.global_rank} saw: {first})"
    return f"{line}; {resume_hint(watch.run_dir)}" if watch else line


def raise_peer_failure(error: RuntimeError, trainer: Any) -> NoReturn:
    """Re-raise a collective's error as the one line of `peer_failure`, or as it was when a dead peer is not why."""
    message = peer_failure(error, trainer)
    if message is None:
        raise error
    raise ZooError(message) from None


def watch_of(trainer: Any) -> DeadRankWatch | None:
    return next((c for c in trainer.callbacks if isinstance(c, DeadRankWatch)), None)


class DeadRankWatch(Callback):
    """Rank 0 watches the DDP children Lightning started; a child records its parent (rank 0).

    Lightning's own watcher SIGKILLs rank 0 (no message, no exit code worth reading) when a child dies; this one
    replaces it, prints which rank died and how to resume, stops the other children and exits non-zero. A rank that
    instead sees the death as a failed collective turns it into the same line through `peer_failure`.
    """

    def __init__(self, run_dir: str, poll_s: float = 1.0) -> None:
        self.run_dir, self.poll_s = str(run_dir), poll_s
        self.parent_pid = os.getppid()
        self.procs: list = []
        self.stopping = False
        self.lock = threading.Lock()  # the watcher decides under it; finish() sets `stopping` under it
        self.died: list[str] | None = None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Rank 0 failed (e.g. a collective timed out on a hung child): stop the children it started, which Lightning
        leaves running on any error but Ctrl-C (a hung one would hold its GPU forever); SIGTERM stops them itself."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        with self.lock:
            self.stopping = True  # the watcher must not report the children stopped here as deaths
        # (setup has not run yet when the process group's start-up itself timed out)
        self.procs = self.procs or list(getattr(getattr(trainer.strategy, "launcher", None), "procs", None) or [])
        if isinstance(exception, (KeyboardInterrupt, SIGTERMException)) or not self.procs:
            return
        self.died = self.dead_ranks(wait_s=2.0)  # before the kills below, which would read as deaths
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        launcher = getattr(trainer.strategy, "launcher", None)
        self.procs = list(getattr(launcher, "procs", None) or [])
        if not self.procs or stage != "fit":
            return
        from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver

        for t in threading.enumerate():
            if isinstance(t, _ChildProcessObserver):
                # retire Lightning's watcher at its next wake-up, before it kills anything
                t._run = lambda: True  # type: ignore[method-assign]
        threading.Thread(target=self._watch, args=(trainer,), daemon=True, name="zoo-dead-rank-watch").start()

    def stop(self) -> None:
        """From here on a child's exit ends its work, not the run: a crash in its own shutdown is no death, and a
        watcher left running into a sweep's next job would end that job for it."""
        with self.lock:
            self.stopping = True

    def finish(self, wait_s: float = 60.0) -> None:
        """The run ended well: wait for the children to end (a sweep's next job must not start beside them)."""
        self.stop()
        deadline = time.monotonic() + wait_s
        for rank, proc in enumerate(self.procs, start=1):
            try:
                code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
                print(f"zoo: warning: DDP rank {rank} (pid {proc.pid}) had not ended {wait_s:.0f} s after the run "
                      "finished and was stopped; the run's results are saved", file=sys.stderr, flush=True)
                continue
            if code != 0:
                print(f"zoo: warning: DDP rank {rank} (pid {proc.pid}) ended ({describe_exit(code)}) after the run "
                      "finished; the run's results are saved", file=sys.stderr, flush=True)

    def _watch(self, trainer: Any) -> None:
        while True:
            time.sleep(self.poll_s)
            with self.lock:
                if self.stopping or self._check(trainer):
                    return

    def _check(self, trainer: Any) -> bool:
        """True when every child ended well; a child that died ends rank 0 (and the others) with one line."""
        codes = [p.poll() for p in self.procs]
        if all(c == 0 for c in codes):
            return True
        for rank, (proc, code) in enumerate(zip(self.procs, codes), start=1):
            if code in (None, 0) or getattr(trainer, "received_sigterm", False):
                continue  # a SIGTERM'd run stops through its own handler (and saves last.ckpt)
            if code != 2:  # exit code 2: the child printed its own zoo error line already
                print(f"zoo: error: DDP rank {rank} (pid {proc.pid}) died ({describe_exit(code)}); the run stopped; "
                      f"{resume_hint(self.run_dir)}", file=sys.stderr, flush=True)
            for other in self.procs:
                if other.poll() is None:
                    other.kill()
            os._exit(code if code > 0 else 1)
        return False

    def dead_ranks(self, wait_s: float = 3.0) -> list[str]:
        """Which peers are gone, as this process can tell on its node (rank 0 its children, a child rank 0)."""
        if self.died is not None:
            return self.died
        deadline = time.monotonic() + wait_s
        while True:
            dead = [f"rank {r} (pid {p.pid}, {describe_exit(p.returncode)})"
                    for r, p in enumerate(self.procs, start=1) if p.poll() not in (None, 0)]
            if not self.procs and os.getppid() != self.parent_pid:
                dead = [f"rank 0 (pid {self.parent_pid})"]
            if dead or time.monotonic() > deadline:
                return dead
            time.sleep(0.2)
