"""Where a run's time went, as one line: start-up, data set-up, fit (of which validation and checkpoints), test.

`zoo: time: 44.1 s = start-up 6.2 + data 1.1 + fit 33.0 (validation 3.1, checkpoints 0.8) + test 3.8`

The parts, from the process's start (read from /proc, so the interpreter's start and every import count) to the
line: start-up until the callbacks are built (imports, Hydra's config, the datamodule's and module's constructors,
which by convention do no heavy work); data from there until the datamodule's `setup` has run (the loggers, the
trainer, `prepare_data`, `setup`: where data is read, generated or downloaded); fit from there to its end (first
batches, training, validation with the sanity check, checkpoint writing); test from its set-up (loading the best
checkpoint) to its end; `other` is what lies between them (only shown from 0.1 s).
"""

from __future__ import annotations

import os
import time
from typing import Any

from lightning.pytorch.callbacks import Callback


def process_age(stat: str = "/proc/self/stat", uptime: str = "/proc/uptime") -> float | None:
    """Seconds since this process started (Linux), or None where /proc is not there."""
    try:
        fields = open(stat).read().rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
        since_boot = float(open(uptime).read().split()[0])
        return max(0.0, since_boot - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22: starttime, in ticks
    except (OSError, IndexError, ValueError):
        return None


_IMPORTED = time.time()
_age = process_age()
PROCESS_START = _IMPORTED - _age if _age is not None else _IMPORTED  # elsewhere: this module's import
_last_end: list[float] = []  # the previous run's end in this process (a Hydra multirun runs several in one)


class TimeSplit(Callback):
    """Timestamps a run's parts from Lightning's hooks; `line()` says where the time went."""

    def __init__(self) -> None:
        self.began = max([PROCESS_START, *_last_end])
        self.created = time.time()
        self.data_end: float | None = None
        self.fit_end: float | None = None
        self.test_start: float | None = None
        self.test_end: float | None = None
        self.validation = self.checkpoints = 0.0
        self._val_t0: float | None = None
        self._wrapped = False

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self.data_end = time.time()  # Lightning calls callbacks' setup right after the datamodule's
            self._time_checkpoints(trainer)
        elif stage == "test":
            self.test_start = time.time()

    def _time_checkpoints(self, trainer: Any) -> None:
        """Every checkpoint goes through `trainer.save_checkpoint` (ModelCheckpoint, InterruptCheckpoint): time it."""
        if self._wrapped:
            return
        self._wrapped, save = True, trainer.save_checkpoint

        def timed_save(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return save(*args, **kwargs)
            finally:
                self.checkpoints += time.perf_counter() - t0

        trainer.save_checkpoint = timed_save

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._val_t0 = time.perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        # Lightning runs the checkpoint callbacks after every other callback's on_validation_end: not counted here
        if self._val_t0 is not None:
            self.validation += time.perf_counter() - self._val_t0
        self._val_t0 = None

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self.fit_end = time.time()
        elif stage == "test":
            self.test_end = time.time()

    def parts(self, now: float | None = None) -> dict[str, float]:
        """Seconds per part (those that happened), `other` and `total`."""
        now = time.time() if now is None else now
        out = {"start-up": self.created - self.began}
        if self.data_end is not None:
            out["data"] = self.data_end - self.created
            if self.fit_end is not None:
                out["fit"] = self.fit_end - self.data_end
                out["validation"], out["checkpoints"] = self.validation, self.checkpoints
        if self.test_start is not None and self.test_end is not None:
            out["test"] = self.test_end - self.test_start
        top = sum(v for k, v in out.items() if k not in ("validation", "checkpoints"))
        out["other"], out["total"] = max(0.0, now - self.began - top), now - self.began
        return out

    def line(self, now: float | None = None) -> str:
        p = self.parts(now)
        terms = [f"start-up {p['start-up']:.1f}"]
        if "data" in p:
            terms.append(f"data {p['data']:.1f}")
        if "fit" in p:
            terms.append(f"fit {p['fit']:.1f} (validation {p['validation']:.1f}, checkpoints {p['checkpoints']:.1f})")
        if "test" in p:
            terms.append(f"test {p['test']:.1f}")
        if p["other"] >= 0.1:
            terms.append(f"other {p['other']:.1f}")
        return f"zoo: time: {p['total']:.1f} s = " + " + ".join(terms)


def report_time(callbacks: list) -> str | None:
    """Print the run's time line (when a TimeSplit watched it) and start the next run's clock here."""
    split = next((c for c in callbacks if isinstance(c, TimeSplit)), None)
    if split is None:
        return None
    now = time.time()
    line = split.line(now)
    print(line, flush=True)
    _last_end[:] = [now]
    return line
